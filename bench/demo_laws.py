"""Every law form on a finished MoE ladder (the demo's): backtest of the largest size and leave-one-size-out.

Forms: the curve law L(N, s) (glassroom.ladder.predict, what the demo's hero prediction uses) with N
the active parameters (fit.size_term active, the default) or the total ones (size_term total), and
the endpoint laws of glassroom.ladder.laws that the ladder's final losses identify (foresight, law
auto: L(C) on a fixed tokens-per-parameter ladder; with varied sparsity also L(Nt,D), L(Neff,D)).
For each: the backtest (fit without the largest size, predict the mean of its seeds' final losses)
and the leave-one-size-out error (every size left out in turn, root mean square of log(predicted /
mean observed)); the form with the smallest leave-one-size-out error is the choice.

    python bench/demo_laws.py lab/ladders/demo-fit-<version>
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import numpy as np

from glassroom.ladder.foresight import fit_points
from glassroom.ladder.laws import candidates, cross_validate
from glassroom.ladder.predict import backtest, fit_curves, predict_curve
from glassroom.ladder.results import read_ladder
from glassroom.ladder.rungs import group_sizes, load_rungs, measure_noise, read_spec_settings


def curve_errors(rungs, fit_cfg) -> list[float]:
    """log(predicted / mean observed) of each size's final loss, the curve law fitted without it."""
    sizes = group_sizes(rungs)
    quick = dataclasses.replace(fit_cfg, bootstrap=1)  # the law only (the fit section refuses 0)
    out = []
    for i, held in enumerate(sizes):
        train = [r for j, g in enumerate(sizes) if j != i for r in g]
        fit = fit_curves(train, fit_cfg.metric, quick, measure_noise(train, fit_cfg.metric, fit_cfg.noise_floor))
        first = held[0]
        band = predict_curve(fit, first.law_size(fit_cfg.size_term), first.config["train"], first.tokens_per_step, quick)
        actual = float(np.mean([r.final(fit_cfg.metric) for r in held]))
        out.append(math.log(band["final_loss"] / actual))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ladder", help="a finished ladder folder (spec.yaml, ladder.json, rungs)")
    args = ap.parse_args()
    fit_cfg, param_count = read_spec_settings(args.ladder)
    rungs = load_rungs(args.ladder, param_count)
    rows = []
    for term in ("active", "total"):
        cfg = dataclasses.replace(fit_cfg, size_term=term)
        check = backtest(args.ladder, cfg)
        errors = curve_errors(rungs, cfg)
        rows.append((f"L(N,s), N {term}", check["relative_error"], check["covered"],
                     float(np.sqrt(np.mean(np.square(errors)))), check["notes"]))
    points = read_ladder(args.ladder).points
    ff = fit_points(points, law="auto", stated_noise=fit_cfg.noise_floor, bootstrap=0)
    largest = max(p.flops for p in points)
    arrays = [np.array([getattr(p, k) for p in points], float) for k in ("params", "tokens", "flops", "total_params")]
    able = [k for k, why in candidates(*arrays).items() if not why]
    table = cross_validate(able, *arrays, [p.loss for p in points])
    for key in able:
        row = table.get(key)
        try:
            held = fit_points([p for p in points if p.flops != largest], law=key, stated_noise=fit_cfg.noise_floor,
                              bootstrap=0)
        except Exception as exc:  # noqa: BLE001  (a law the remaining sizes cannot identify)
            rows.append((f"endpoints {key}", None, None, (row or {}).get("rms"), [str(exc)]))
            continue
        big = [p for p in points if p.flops == largest]
        predicted = held.predict(big[0].params, big[0].tokens, big[0].flops, kind="law",
                                 total_params=big[0].total_params)["predicted_loss"]
        actual = float(np.mean([p.loss for p in big]))
        rows.append((f"endpoints {held.law_name}", predicted / actual - 1, None, (row or {}).get("rms"), []))
    print(f"ladder {args.ladder}: {len(group_sizes(rungs))} sizes, {len(rungs)} runs, metric {fit_cfg.metric}")
    print(f"{'law form':28} {'backtest':>9} {'covered':>8} {'leave-one-size-out':>19}")
    for name, err, covered, rms, notes in rows:
        e = "" if err is None else f"{err:+.2%}"
        c = "" if covered is None else ("yes" if covered else "no")
        r = "" if rms is None else f"{rms:.2%}"
        print(f"{name:28} {e:>9} {c:>8} {r:>19}" + (f"   ({'; '.join(notes)[:120]})" if notes else ""))
    scored = [row for row in rows if row[3] is not None]
    if scored:
        best = min(scored, key=lambda row: round(row[3], 6))  # a tie goes to the earlier (simpler) form
        print(f"chosen by leave-one-size-out: {best[0]} ({best[3]:.2%})")
    print(f"foresight on the endpoints (law auto): {ff.law_name}: {ff.why}")


if __name__ == "__main__":
    main()
