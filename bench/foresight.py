"""Foresight on synthetic truth: the fitter's error at 100x the largest rung, least squares on the true formula, coverage.

For each published law (glassroom.ladder.synthetic.TRUTHS: Chinchilla, Hoffmann et al. 2022,
arXiv 2203.15556; its refit by Besiroglu et al. 2024, arXiv 2404.10102) and each ladder (5 rungs
log-spaced in compute over 34x or 820x, smallest 1e18 FLOPs; 20 tokens per parameter, or every rung
at 10 and at 40 tokens per parameter so that L(N, D) is identifiable), with 1 or 3 seeds per size
and 0.5% multiplicative lognormal run-to-run noise, over --noise-seeds noise draws:
glassroom.ladder.foresight.fit_points predicts the hero (100x the largest rung's compute, 20 tokens
per parameter) and synthetic.least_squares_reference fits the TRUE formula by least squares of log
loss. Printed and appended to bench/results/foresight.jsonl: the fitter's median, 90th percentile
and max |relative error|, the reference's median, their ratio (acceptance: <= 1.1), and how often the
95% interval covered the noise-free truth (acceptance: >= 90%), for the law's value ("law") and for
one run ("run"), with the median interval width, and the median error of fit.py's Huber fit (delta
1e-3, what `ladder fit DIR` used before foresight) on the same points. Extra rows (--extra): the stated noise wrong
(0.3% stated, 0.5% true, one seed) and 8 rungs.

    OMP_NUM_THREADS=1 python bench/foresight.py [--noise-seeds 40] [--bootstrap 200] [--extra]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from glassroom.ladder.synthetic import TRUTHS, measure

RESULTS = Path(__file__).resolve().parent / "results" / "foresight.jsonl"
LADDERS = {"fixed-34x": (34, 20), "fixed-820x": (820, 20), "varied-34x": (34, (10, 40)), "varied-820x": (820, (10, 40))}


def _row(truth: str, ladder: str, span: float, tpp, seeds: int, args, **extra) -> dict:
    start = time.time()
    out = measure(TRUTHS[truth], span, extra.pop("rungs", 5), seeds, 0.005, tpp, args.noise_seeds,
                  bootstrap=args.bootstrap, huber=True, **extra)
    out.update({"truth": truth, "ladder": ladder, "span": span, "tokens_per_param": tpp, "seeds": seeds,
                "noise": 0.005, "hero_factor": 100, "seconds": time.time() - start})
    return out


def _line(r: dict) -> str:
    return (f"{r['truth']:10s} {r['ladder']:14s} {r['seeds']:>5d} {r['law']:7s} {100 * r['fit_median']:7.2f}% "
            f"{100 * r['fit_p90']:6.2f}% {100 * r['fit_max']:6.2f}% {100 * r['ls_true_median']:7.2f}% {r['ratio']:6.2f} "
            f"{100 * r['coverage_law']:5.0f}% {100 * r['coverage_run']:5.0f}% {100 * r['width_median']:6.2f}% "
            f"{100 * r['huber_median']:6.2f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise-seeds", type=int, default=40)
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--extra", action="store_true", help="also the wrong stated noise and 8-rung rows")
    args = parser.parse_args()
    print(f"{'truth':10s} {'ladder':14s} {'seeds':>5s} {'law':7s} {'median':>8s} {'p90':>7s} {'max':>7s} "
          f"{'LS-true':>8s} {'ratio':>6s} {'cov':>6s} {'covrun':>6s} {'width':>7s} {'huber':>7s}")
    rows = []
    for truth in TRUTHS:
        for ladder, (span, tpp) in LADDERS.items():
            for seeds in (1, 3):
                rows.append(_row(truth, ladder, span, tpp, seeds, args))
                print(_line(rows[-1]), flush=True)
        if args.extra:
            rows.append(_row(truth, "fixed-34x", 34, 20, 1, args, stated_noise=0.003))
            rows[-1]["note"] = "stated noise 0.3%, true 0.5%"
            print(_line(rows[-1]) + "  (stated 0.3%, true 0.5%)", flush=True)
            rows.append(_row(truth, "fixed-34x-8r", 34, 20, 1, args, rungs=8))
            print(_line(rows[-1]) + "  (8 rungs)", flush=True)
    worst_ratio = max(r["ratio"] for r in rows)
    worst_cover = min(r["coverage_law"] for r in rows)
    print(f"worst ratio {worst_ratio:.2f} (<= 1.1 wanted), worst coverage {100 * worst_cover:.0f}% (>= 90% wanted)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as f:
        for r in rows:
            r.update({"bootstrap": args.bootstrap, "numpy": np.__version__, "machine": platform.machine(),
                      "time": time.time()})
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
