"""One training three ways on this machine: one process, two torchrun launchers (--nnodes=2, c10d on
127.0.0.1) and Ray Train (`glassroom train --ray local --workers 2`); and what an automatic restart
costs (a worker SIGKILLed after the first checkpoint, torchrun --max-restarts=1).

Each launch trains the same MoE (tests/configs/train-tiny.yaml widened: d_model 256, 8 experts,
{ep: 2} for the two-process launches) on a dataset built from experiments/data-tiny.yaml, one torch
thread per process. Printed: wall time of each launch, the median step time from the run store
(`throughput/step_seconds`, the first step left out), and each as a ratio to the one process
measured in the same run; the restarted run's wall time against the uninterrupted torchrun launch.

    python bench/multinode.py [--steps 40] [--data /tmp/glassroom-bench-tiny]
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "configs" / "train-tiny.yaml"
WIDE = ("model.d_model=256", "model.d_ff=512", "model.moe.n_experts=8", "model.moe.d_expert=256",
        "train.precision=fp32", "train.eval_every=1000", "observe.norms_every=1000")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(out: Path, data: Path, steps: int, *sets: str) -> list[str]:
    args = ["-m", "glassroom", "train", str(CONFIG), "--out", str(out), "--quiet", "--set", f"data.path={data}",
            "--set", f"train.steps={steps}", "--set", f"train.checkpoint_every={steps // 2}"]
    for item in (*WIDE, *sets):
        args += ["--set", item]
    return args


def timed(cmds: list[list[str]], env: dict) -> float:
    start = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for cmd in cmds]
    for proc in procs:
        _, err = proc.communicate(timeout=1800)
        if proc.returncode:
            sys.exit(f"failed: {' '.join(cmds[0])}\n{err[-3000:]}")
    return time.perf_counter() - start


def step_time(run: Path) -> float:
    from glassroom.observe.store import StoreReader

    with StoreReader(run) as reader:
        return statistics.median(reader.series("throughput/step_seconds")[1][1:])  # the first step warms up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "glassroom-bench-tiny")
    args = parser.parse_args()
    if not (args.data / "manifest.json").is_file():
        from glassroom.data.build import build_dataset
        from glassroom.data.recipe import load_recipe

        build_dataset(load_recipe(ROOT / "experiments" / "data-tiny.yaml"), args.data, workers=2, log=io.StringIO())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
           "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    root = Path(tempfile.mkdtemp(prefix="glassroom-bench-multinode-"))
    ep2 = "train.parallel={ep: 2}"

    def torchrun(out: Path, restarts: int = 0, faults: str = "") -> list[list[str]]:
        port = free_port()
        head = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={out.name}",
                f"--max-restarts={restarts}"]
        return [head + train_args(out, args.data, args.steps, ep2) for _ in range(2)]

    rows = []
    one = root / "one"
    rows.append(("one process", timed([[sys.executable, *train_args(one, args.data, args.steps)]], env), one))
    nodes = root / "two-nodes"
    rows.append(("torchrun, 2 nodes x 1", timed(torchrun(nodes), env), nodes))
    ray = root / "ray"
    rows.append(("Ray Train, 2 workers", timed([[sys.executable, *train_args(ray, args.data, args.steps, ep2),
                                                 "--ray", "local", "--workers", "2"]], env), ray))
    killed = root / "restarted"
    kill_env = {**env, "GLASSROOM_FAULTS": f"kill@{args.steps // 2 + 2}:1"}
    restart_wall = timed(torchrun(killed, restarts=1), kill_env)

    base_wall, base_step = rows[0][1], step_time(rows[0][2])
    print(f"{args.steps} steps, 1 torch thread per process, {os.cpu_count()} cores")
    print(f"{'launch':24s} {'wall s':>8s} {'x one':>7s} {'step':>9s} {'x one':>7s}")
    for name, wall, run in rows:
        step = step_time(run)
        print(f"{name:24s} {wall:8.1f} {wall / base_wall:7.2f} {step:9.3g} {step / base_step:7.2f}")
    print(f"torchrun restarted once (rank 1 killed at step {args.steps // 2 + 2}, resumed from {args.steps // 2}): "
          f"{restart_wall:.1f} s, {restart_wall / rows[1][1]:.2f}x the uninterrupted launch")


if __name__ == "__main__":
    main()
