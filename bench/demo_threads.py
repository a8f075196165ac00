"""Why the demo trains every run on one thread, two runs at once: throughput against one run on all threads.

The demo's models are small (37K to 361K parameters, micro-batches of 4 x 128 tokens): a second torch
thread barely speeds one run up, while two processes on one thread each use both cores. For each of
the demo's runs chosen (default: the largest rung and the hero), this trains --steps steps of its
config (without evaluations) three ways, each run in its own process, and reports seconds per step:

- `alone_all`: one process with every core's thread (OMP_NUM_THREADS = os.cpu_count()), the reference;
- `alone_1`: one process on one thread;
- `pair_1`: two processes at once, one thread each (what the demo's pipeline does on 2 cores).

`speedup` = 2 x alone_all / pair_1: how much more training the machine does per second. It also
times the in-training downstream evaluation (the demo's tasks) at one micro-batch and at four per
forward, with the scores of both (they must be equal).

    python bench/demo_threads.py --data lab/demo-data/dataset --steps 60

Appends one JSON line per run to bench/results/demo_threads.jsonl (with the CPU and core count).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from glassroom.ladder.spec import expand_seeds, load_spec

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "demo_threads.jsonl"

CHILD = """
import sys, time, yaml, torch
from pathlib import Path
from glassroom.train.config import run_config_from_mapping
from glassroom.train.trainer import Trainer
cfg = yaml.safe_load(open(sys.argv[1]))
trainer = Trainer(run_config_from_mapping(cfg, "bench"), Path(sys.argv[2]), resume=False)
start = time.perf_counter()
trainer.run()
print(json.dumps({"s_per_step": (time.perf_counter() - start) / cfg["train"]["steps"],
                  "threads": torch.get_num_threads()}))
"""

EVAL_CHILD = """
import sys, time, json, yaml
from pathlib import Path
from glassroom.downstream import run as downstream
from glassroom.train.config import run_config_from_mapping
from glassroom.train.trainer import Trainer
cfg = yaml.safe_load(open(sys.argv[1]))
trainer = Trainer(run_config_from_mapping(cfg, "bench"), Path(sys.argv[2]), resume=False)
tasks, out = trainer.downstream, {}
for name, batch in (("one_micro_batch", cfg["train"]["micro_batch_size"]), ("four_micro_batches", tasks.batch)):
    start = time.perf_counter()
    scores = downstream.evaluate(trainer.model.eval(), tasks.tokenizer, tasks.names, tasks.tasks_dir,
                                 batch_size=batch, max_length=tasks.seq_len, manager=tasks.manager)["scores"]
    out[name] = {"seconds": time.perf_counter() - start, "batch": batch, "scores": scores}
print(json.dumps(out))
"""


def child(code: str, config: dict, folder: Path, threads: int) -> subprocess.Popen:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    return subprocess.Popen([sys.executable, "-c", "import json\n" + code, str(path), str(folder / "run")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder)


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"a bench process failed (exit {proc.returncode}): {err.strip().splitlines()[-1:]}")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(ROOT / "experiments" / "ladder-demo.yaml"))
    ap.add_argument("--data", required=True, help="the demo's dataset (lab/demo-data/dataset)")
    ap.add_argument("--runs", nargs="+", default=["221K-A159K", "hero"], help="run names (rung sizes or hero)")
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    runs, hero = expand_seeds(load_spec(args.spec))
    by_name = {r.name: r for r in runs} | {"hero": hero}
    cores = os.cpu_count() or 1
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    for name in args.runs:
        config = copy.deepcopy(by_name[name].config)
        config["data"]["path"] = str(Path(args.data).resolve())
        timed = copy.deepcopy(config)
        timed["train"].update(steps=args.steps, eval_every=10 * args.steps, eval_tasks=[], checkpoint_every=100000)
        with tempfile.TemporaryDirectory() as tmp:
            folders = [Path(tmp) / str(i) for i in range(5)]
            for f in folders:
                f.mkdir()
            alone_all = result(child(CHILD, timed, folders[0], cores))
            alone_1 = result(child(CHILD, timed, folders[1], 1))
            pair = [child(CHILD, timed, f, 1) for f in folders[2:4]]
            pair_1 = [result(p) for p in pair]
            evals = result(child(EVAL_CHILD, config, folders[4], 1)) if config["train"].get("eval_tasks") else {}
        pair_s = max(p["s_per_step"] for p in pair_1)
        row = {"run": name, "steps": args.steps, "cores": cores, "cpu": platform.processor() or platform.machine(),
               "alone_all": alone_all["s_per_step"], "alone_1": alone_1["s_per_step"], "pair_1": pair_s,
               "speedup": 2 * alone_all["s_per_step"] / pair_s, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        if evals:
            row["eval_tasks"] = {k: {"seconds": v["seconds"], "batch": v["batch"]} for k, v in evals.items()}
            row["eval_tasks_same_scores"] = evals["one_micro_batch"]["scores"] == evals["four_micro_batches"]["scores"]
        print(json.dumps(row))
        with open(RESULTS, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
