"""How much a ladder's rungs depend on their seed: every rung trained with K seeds, each rung's spread.

The demo's MoE rungs once ended up to 7% apart between two seeds (the seed-dependent early plateau),
which made the ladder's fit refuse on some machines. This trains each size of a ladder spec (default
experiments/ladder-demo.yaml) with train.seed = offset .. offset + K - 1, every run a `glassroom
train` process with --threads torch threads (OMP_NUM_THREADS), --jobs at once, and reports each
rung's final eval/macro/loss per seed, the SD of their log and their range ((max - min) / mean).
The downstream tasks are left out (they do not change the losses) unless --with-tasks.

    python bench/ladder_seeds.py --data lab/data/demo-.../dataset --seeds 5 --threads 1 --jobs 2
    python bench/ladder_seeds.py --data ... --seeds 5 --seed-offset 100 --threads 2 --jobs 1

Appends one JSON line per rung to bench/results/ladder_seeds.jsonl (with the threads, jobs, CPU).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

from glassroom.ladder.spec import expand, load_spec
from glassroom.observe.store import StoreReader

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "ladder_seeds.jsonl"


def train(config: dict, out: Path, threads: int) -> float:
    """One `glassroom train` run in its own process; its final eval/macro/loss."""
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out.parent / f"{out.name}.yaml"  # not with_suffix: names hold dots (102K-A83.6K)
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, "-m", "glassroom", "train", str(cfg_path), "--out", str(out)], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{out}: training failed:\n{done.stderr[-2000:]}")
    with StoreReader(out) as reader:
        return float(reader.latest("eval/macro/loss")[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(ROOT / "experiments" / "ladder-demo.yaml"))
    ap.add_argument("--data", required=True, help="the built dataset the rungs train on")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once")
    ap.add_argument("--rungs", default="", help="dial values to train (default: every rung)")
    ap.add_argument("--out", default="", help="where the runs go (default: a new folder under /tmp)")
    ap.add_argument("--with-tasks", action="store_true", help="keep the downstream tasks of the spec")
    ap.add_argument("--backtest-pairs", type=int, default=2, help="backtest the ladder on each group of this many "
                    "seeds (the demo's 2; 0: no backtest)")
    args = ap.parse_args()
    rungs, _ = expand(load_spec(args.spec))
    wanted = {int(x) for x in args.rungs.split(",") if x}
    rungs = [r for r in rungs if not wanted or r.dial in wanted]
    out = Path(args.out or f"/tmp/ladder-seeds-{int(time.time())}")
    jobs = []
    for rung in rungs:
        for k in range(args.seeds):
            config = copy.deepcopy(rung.config)
            config["data"]["path"] = str(Path(args.data).resolve())
            config["train"]["seed"] = args.seed_offset + k
            if not args.with_tasks:
                config["train"].pop("eval_tasks", None)
                config["train"].pop("eval_tasks_every", None)
            jobs.append((rung, k, config, out / f"{rung.name}-seed{args.seed_offset + k}"))
    start = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        finals = list(pool.map(lambda j: train(j[2], j[3], args.threads), jobs))
    print(f"{len(jobs)} runs in {(time.time() - start) / 60:.1f} min, {args.threads} thread(s) each, {args.jobs} at once")
    print(f"{'rung':>14} {'seeds':>14}  finals" + " " * 30 + "  mean     sd(log)  range")
    for rung in rungs:
        values = np.array([f for (r, _, _, _), f in zip(jobs, finals) if r is rung])
        sd = float(np.std(np.log(values), ddof=1)) if len(values) > 1 else 0.0
        spread = float((values.max() - values.min()) / values.mean())
        seeds = f"{args.seed_offset}..{args.seed_offset + args.seeds - 1}"
        print(f"{rung.name:>14} {seeds:>14}  " + " ".join(f"{v:.4f}" for v in values)
              + f"  {values.mean():.4f}  {sd:.2%}  {spread:.2%}")
        RESULTS.parent.mkdir(exist_ok=True)
        with RESULTS.open("a") as f:
            f.write(json.dumps({"spec": Path(args.spec).name, "rung": rung.name, "seeds": list(range(
                args.seed_offset, args.seed_offset + args.seeds)), "finals": values.tolist(), "mean": float(values.mean()),
                "sd_log": sd, "range": spread, "threads": args.threads, "jobs": args.jobs,
                "cpu": platform.processor() or platform.machine(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    if args.backtest_pairs and len(rungs) >= 3:
        backtest_pairs(args.spec, jobs, out, args.backtest_pairs, args.seed_offset)


def backtest_pairs(spec_path: str, runs: list[tuple], out: Path, pair: int, offset: int = 0) -> None:
    """The ladder's fit and backtest on each group of `pair` consecutive seeds (the demo trains two):
    a ladder folder per group over those runs, `ladder backtest`'s numbers printed."""
    from glassroom.ladder.predict import backtest
    from glassroom.steps.ladder import write_ladder_folder

    raw = yaml.safe_load(Path(spec_path).read_text())
    seeds = sorted({k for _, k, _, _ in runs})
    for first in range(0, len(seeds) - pair + 1, pair):
        chosen = seeds[first:first + pair]
        named = [offset + k for k in chosen]
        folder = out / f"ladder-seeds-{'-'.join(map(str, named))}"
        write_ladder_folder(folder, raw, [d for _, k, _, d in runs if k in chosen])
        try:
            check = backtest(folder)
        except Exception as exc:  # a refusal is the result here
            print(f"seeds {named}: fit refused: {exc}")
            continue
        print(f"seeds {named}: backtest of {check['held_out']}: predicted {check['predicted_loss']:.4f} "
              f"[{check['interval'][0]:.4f}, {check['interval'][1]:.4f}], mean of its seeds {check['actual_loss']:.4f} "
              f"({check['relative_error']:+.2%}, {'inside' if check['covered'] else 'outside'}); notes: "
              f"{'; '.join(check['notes']) or 'none'}")


if __name__ == "__main__":
    main()
