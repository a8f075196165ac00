"""What activation checkpointing saves and costs: bytes kept for backward, peak RSS, step time.

A small MoE transformer (d_model 256, 4 layers of 8 experts top-2 with a shared expert, the first
dense) at a longer sequence (2 x 1024 tokens), one forward + backward in fp32, per mode of
`train.activation_checkpointing` (none, full, selective):

- kept: bytes autograd keeps for backward (saved-tensor hooks summing unique storages, parameters
  left out, plus selective's cached matmul outputs): glassroom.train.activation_checkpointing.saved_activation_bytes;
- peak RSS: a fresh subprocess per mode runs one step and reports its peak resident set size
  (VmHWM of /proc/self/status; ru_maxrss would carry the parent's over fork and exec) above the
  RSS it had once the model was built. glibc's malloc keeps freed heap memory
  resident, which would hide what a step frees, so the child runs with MALLOC_MMAP_THRESHOLD_=65536:
  every tensor above 64 KiB is its own mapping, returned when freed, and RSS follows live memory;
- step time: the modes take turns in one process (interleaved, median of rounds), as a ratio to none.

    python bench/activation_checkpointing.py [--seq 1024] [--batch 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import build_model
from glassroom.train import activation_checkpointing as ac


def config(seq: int) -> ModelConfig:
    return ModelConfig(vocab_size=4096, d_model=256, n_layers=4, n_heads=8, d_ff=1024, max_seq_len=seq,
                       moe=MoEConfig(n_experts=8, top_k=2, d_expert=256, n_shared_experts=1, first_dense_layers=1))


def make(mode: str, seq: int):
    model = build_model(config(seq), seed=0)
    model.train()
    ac.apply(model, mode)
    return model


def loss_of(model, ids):
    out = model(ids[:, :-1])
    return F.cross_entropy(out.logits.flatten(0, 1), ids[:, 1:].flatten()) + out.moe_loss


def step(model, ids) -> float:
    start = time.perf_counter()
    loss_of(model, ids).backward()
    model.zero_grad(set_to_none=True)
    for _, moe in model.moe_layers():
        moe.update_router_bias(rate=0.0)
    return time.perf_counter() - start


def rss_child(mode: str, seq: int, batch: int) -> None:
    """Run in a subprocess: peak RSS of steps in `mode`, above the RSS before them (bytes)."""
    model = make(mode, seq)
    ids = torch.randint(0, 4096, (batch, seq + 1), generator=torch.Generator().manual_seed(0))
    before = _status_kib("VmRSS") * 1024
    step(model, ids)
    print(json.dumps({"peak": _status_kib("VmHWM") * 1024, "before": before}))


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key} (Linux only)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", choices=ac.MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        rss_child(args.child, args.seq, args.batch)
        return
    ids = torch.randint(0, 4096, (args.batch, args.seq + 1), generator=torch.Generator().manual_seed(0))
    models = {mode: make(mode, args.seq) for mode in ac.MODES}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.batch} x {args.seq} tokens, fp32, "
          f"{sum(p.numel() for p in models['none'].parameters()):,} parameters")
    kept = {m: ac.saved_activation_bytes(model, lambda model=model: loss_of(model, ids)) for m, model in models.items()}
    rss = {}
    for mode in ac.MODES:
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--seq", str(args.seq), "--batch", str(args.batch)],
                             capture_output=True, text=True, check=True, env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})
        rss[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    times = {mode: [] for mode in ac.MODES}
    for model in models.values():
        step(model, ids)  # warm-up
    for _ in range(args.rounds):
        for mode, model in models.items():
            times[mode].append(step(model, ids))
    base = statistics.median(times["none"])
    print(f"{'mode':<10} {'kept for backward':>18} {'peak RSS of a step':>21} {'step (median)':>14} {'vs none':>8}")
    for mode in ac.MODES:
        median = statistics.median(times[mode])
        peak = rss[mode]["peak"] - rss[mode]["before"]
        print(f"{mode:<10} {kept[mode] / 2**20:>15.1f} MiB {peak / 2**20:>17.1f} MiB {median * 1000:>11.0f} ms "
              f"{median / base:>7.2f}x")


if __name__ == "__main__":
    main()
