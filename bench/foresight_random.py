"""Foresight on laws nobody published: random L(N, D) truths, the way a hidden law would be tried.

Draws --laws truths E in [0.5, 3], A and B log-uniform in [10^1.5, 10^3.5], alpha and beta in
[0.15, 0.5] (numpy seed --seed), and for each measures three ladders with
glassroom.ladder.synthetic.measure (0.5% lognormal run noise, hero at 100x the largest rung, the
smallest rung log-uniform in 1e16..1e20 FLOPs): 5 rungs over 100x at 20 tokens per parameter with
one seed (L(C)); 4 rungs over 100x at 10 and 40 tokens per parameter with two seeds (L(N, D)); 4
rungs over 30x with three seeds (L(C)). Printed and appended to bench/results/foresight_random.jsonl:
the fitter's median |error|, least squares on the true formula's, their ratio (acceptance: <= 1.1),
and 95% interval coverage of the law's value and of one run (>= 90%).

    OMP_NUM_THREADS=1 python bench/foresight_random.py [--laws 8] [--noise-seeds 20] [--seed 2026]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from glassroom.ladder.synthetic import measure

RESULTS = Path(__file__).resolve().parent / "results" / "foresight_random.jsonl"
LADDERS = ((100, 20, 5, 1), (100, (10, 40), 4, 2), (30, 20, 4, 3))   # span, tokens per param, rungs, seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--laws", type=int, default=8)
    parser.add_argument("--noise-seeds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    RESULTS.parent.mkdir(exist_ok=True)
    worst_ratio, worst_cover = 0.0, 1.0
    with open(RESULTS, "a") as out:
        for _ in range(args.laws):
            truth = {"E": float(rng.uniform(0.5, 3)), "A": float(10 ** rng.uniform(1.5, 3.5)),
                     "B": float(10 ** rng.uniform(1.5, 3.5)), "alpha": float(rng.uniform(0.15, 0.5)),
                     "beta": float(rng.uniform(0.15, 0.5))}
            for span, tpp, rungs, seeds in LADDERS:
                smallest = float(10 ** rng.uniform(16, 20))
                r = measure(truth, span, rungs, seeds, 0.005, tpp, noise_seeds=args.noise_seeds, smallest_flops=smallest)
                worst_ratio = max(worst_ratio, r["ratio"])
                worst_cover = min(worst_cover, r["coverage_law"], r["coverage_run"])
                print(f"E {truth['E']:.2f} A {truth['A']:.0f} B {truth['B']:.0f} alpha {truth['alpha']:.3f} "
                      f"beta {truth['beta']:.3f} | {rungs} rungs {span}x tpp {tpp} x{seeds}: {r['law']} "
                      f"fit {r['fit_median']:.2%} ls-true {r['ls_true_median']:.2%} ratio {r['ratio']:.2f} "
                      f"coverage law {r['coverage_law']:.0%} run {r['coverage_run']:.0%}", flush=True)
                out.write(json.dumps({**r, "truth": truth, "span": span, "tokens_per_param": tpp, "rungs": rungs,
                                      "seeds": seeds, "smallest_flops": smallest, "noise": 0.005,
                                      "machine": platform.machine(), "time": time.time()}) + "\n")
    print(f"worst ratio {worst_ratio:.2f} (limit 1.1), worst coverage {worst_cover:.0%} (limit 90%)")


if __name__ == "__main__":
    main()
