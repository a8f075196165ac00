"""Helpers shared by tests (moved out of test_ladder_results.py, which other tests imported)."""

from __future__ import annotations
import json

import numpy as np


TRUTH = {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}  # Besiroglu et al. 2024


def law(n, d):
    return TRUTH["E"] + TRUTH["A"] / n ** TRUTH["alpha"] + TRUTH["B"] / d ** TRUTH["beta"]


def table(seeds: int = 1, noise: float = 0.0, ratios=(5, 20, 80)) -> list[dict]:
    """Runs at 4 sizes x 3 tokens-per-parameter ratios (L(N, D) identifiable), each `seeds` times."""
    rng = np.random.default_rng(0)
    rows = []
    for n in (1e7, 3e7, 1e8, 3e8):
        for r in ratios:
            for s in range(seeds):
                loss = law(n, r * n) * float(np.exp(rng.normal(0, noise)))
                row = {"name": f"n{n:.0e}-r{r}", "params": n, "tokens": r * n, "loss": loss}
                if seeds > 1:
                    row["seed"] = s
                rows.append(row)
    return rows


def write_csv(path, rows, columns=None):
    columns = columns or list(rows[0])
    lines = [",".join(columns)] + [",".join("" if r.get(c) is None else repr(r[c]) if not isinstance(r.get(c), str)
                                            else r[c] for c in columns) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _curve_rows():
    """Three sizes, cosine / wsd curves from the curve law (predict.CURVE_LAW) with known parameters."""
    from glassroom.ladder.fit import evaluate
    from glassroom.ladder.predict import CURVE_LAW, curve_features
    from glassroom.ladder.results import Curve
    from types import SimpleNamespace

    truth = {"E": 2.0, "B": 30.0, "beta": 0.3, "A": 20.0, "alpha": 0.2, "C": 2e-4}
    rows = []
    for i, (n, steps, tps) in enumerate(((2e4, 200, 1024), (6e4, 300, 2048), (2e5, 400, 4096))):
        schedule = ("cosine", "wsd")[i % 2]
        train = SimpleNamespace(steps=steps, warmup_steps=10, schedule=schedule, min_lr_ratio=0.1,
                                decay_fraction=0.2, decay_shape="linear")
        c = Curve("x", None, n, np.arange(1), np.arange(1), np.arange(1), train, tps)
        at = np.arange(20, steps + 1, 20)
        loss = evaluate(CURVE_LAW, truth, curve_features(n, tps, c.multipliers(), at, 0.999))
        for s, v in zip(at, loss):
            rows.append({"name": f"r{i}", "params": n, "step": int(s), "tokens": int(s) * tps, "loss": float(v),
                         "schedule": schedule, "warmup_steps": 10, "total_steps": steps})
    return rows, truth
