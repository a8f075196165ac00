"""A paper's table through `ladder predict --results`: Hoffmann et al.'s runs as reconstructed by Besiroglu
et al. 2024 ("Chinchilla Scaling: A replication attempt", arXiv 2404.10102; experiments/results/README.md).

Their fit (Huber delta 1e-3 on log loss): E = 1.82, A = 482.01, B = 2085.43, alpha = 0.3478, beta = 0.3658,
with bootstrap standard errors (their notebook, data_analysis.ipynb) E 0.0257, A 124.52, B 1293.28, alpha
0.0154, beta 0.0206. Its extrapolation to Chinchilla (70B parameters, 1.4T tokens): 1.9767 with those rounded
values; E is stated to two decimals, so the law's value there is given to +-0.005.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "experiments" / "results" / "chinchilla-besiroglu.csv"
PAPER = {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
PAPER_SE = {"E": 0.0257, "A": 124.52, "B": 1293.28, "alpha": 0.0154, "beta": 0.0206}
N, D = 70e9, 1.4e12


def paper_loss(n: float, d: float) -> float:
    return PAPER["E"] + PAPER["A"] / n ** PAPER["alpha"] + PAPER["B"] / d ** PAPER["beta"]


def predict(*extra: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "glassroom", "ladder", "predict", "--results", str(TABLE),
                          "--params", "70B", "--tokens", "1.4T", "--law", "ND", "--json", *extra],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_table_is_the_240_runs_the_paper_fits():
    from glassroom.ladder.results import read_results

    r = read_results(TABLE)
    assert len(r.points) == 240 and r.summary()["sizes"] == 240
    assert max(p.loss for p in r.points) < 3.41  # the five highest-loss runs are left out, as in the paper


@pytest.mark.slow
def test_huber_objective_reproduces_the_papers_fit_and_extrapolation():
    out = predict("--objective", "huber")
    assert paper_loss(N, D) == pytest.approx(1.9767, abs=1e-4)
    assert abs(out["predicted_loss"] - paper_loss(N, D)) < 0.005  # ours 1.9734
    assert abs(out["predicted_loss"] - 1.97342) < 1e-3  # the paper's unrounded estimates (their notebook)
    for name, value in out["law"]["params"].items():
        assert abs(value - PAPER[name]) < PAPER_SE[name], name
    assert out["lower"] <= paper_loss(N, D) <= out["upper"]


def test_default_least_squares_covers_the_papers_value():
    """Least squares of log loss weighs the table's scatter differently (E 1.86, beta 0.41): its point
    prediction is about 1% above the paper's, and its interval still holds the paper's value."""
    out = predict()
    assert out["objective"] == "least-squares" and out["law"]["law"] == "L(N,D)"
    assert out["lower"] <= paper_loss(N, D) <= out["upper"]
    assert abs(out["predicted_loss"] / paper_loss(N, D) - 1) < 0.02
