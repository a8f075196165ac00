"""Run under torchrun by tests/train/test_expert_parallel.py; writes what it saw as JSON for the test to check.

  exchange OUT.json: one MoE layer's experts spread over 2 ranks with a planted routing; the rows each
      rank sent and received, and how far the outputs and gradients are from the unsharded layer's.
  train OUT_DIR CONFIG [KEY=VALUE ...] [--resume]: `glassroom train` in-process, then every rank's
      router biases gathered on rank 0 into OUT_DIR/biases.json.
  jobs JOBS.json: several of the above, in order, in one launch (one process group, one torch import
      per rank): a list of ["exchange", OUT.json] and ["train", OUT_DIR, CONFIG, KEY=VALUE ..., "--resume"?].
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

# Rank r's chosen experts (T, 2) of 4 experts; ranks hold experts (0, 1) and (2, 3).
PLANTED = {
    0: [[0, 1], [1, 0], [0, 3], [1, 2], [0, 1]],  # to rank 0: 8 rows, to rank 1: 2
    1: [[2, 3], [3, 2], [2, 3]],  # to rank 0: none, to rank 1: 6
}


def exchange(out: Path) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from glassroom.model.experts import GroupedExperts
    from glassroom.train.expert_parallel import shard_experts

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    full = GroupedExperts(4, 8, 16)
    for p in full.parameters():
        torch.nn.init.normal_(p, std=0.3)
    torch.manual_seed(1 + rank)
    chosen = torch.tensor(PLANTED[rank])
    x = torch.randn(len(chosen), 8, requires_grad=True)
    weights = torch.rand(chosen.shape)
    counts = torch.bincount(chosen.flatten(), minlength=4)
    upstream = torch.randn(len(chosen), 8)

    want = full(x, chosen, weights, counts)
    (want * upstream).sum().backward()
    want_x_grad = x.grad.clone()
    x.grad = None
    full_grads = [full.gate_up_proj.grad.clone(), full.down_proj.grad.clone()]
    for g in full_grads:  # every rank's tokens' contribution to each expert
        dist.all_reduce(g)

    class Holder(torch.nn.Module):  # shard_experts walks model.moe_layers()
        def __init__(self):
            super().__init__()
            self.mlp = torch.nn.Module()
            self.mlp.experts = GroupedExperts(4, 8, 16)
            self.mlp.experts.load_state_dict(full.state_dict())

        def moe_layers(self):
            return [(0, self.mlp)]

    holder = Holder()
    shard_experts(holder, init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "ep")))
    experts = holder.mlp.experts
    got = experts(x, chosen, weights, counts)
    (got * upstream).sum().backward()
    local_grads = [experts.gate_up_proj.grad.to_local(), experts.down_proj.grad.to_local()]
    result = {
        "rank": rank,
        "sent": experts.ep.last_sent,
        "received": experts.ep.last_received,
        "local_experts": experts.gate_up_proj.to_local().shape[0],
        "out_diff": float((got - want).detach().abs().max()),
        "x_grad_diff": float((x.grad - want_x_grad).abs().max()),
        "weight_grad_diff": max(float((g - f.chunk(2)[rank]).abs().max()) for g, f in zip(local_grads, full_grads)),
    }
    results = [None, None]
    dist.all_gather_object(results, result)
    if rank == 0:
        out.write_text(json.dumps(results))


def train(out: Path, config: str, args: list[str]) -> None:
    from glassroom.train.config import load_run_config
    from glassroom.train.trainer import Trainer

    resume = "--resume" in args
    sets = [a for a in args if a != "--resume"]
    cfg = load_run_config(config, sets, out if resume else None)
    trainer = Trainer(cfg, out, resume=resume, quiet=True)
    trainer.run()
    biases = torch.stack([moe.router_bias.detach().clone() for _, moe in trainer.core.moe_layers()])
    gathered = [torch.empty_like(biases) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, biases)
    if dist.get_rank() == 0:
        (out / "biases.json").write_text(json.dumps([g.tolist() for g in gathered]))
    dist.barrier()  # biases.json written before any rank goes on to the next job


def run(job: list[str]) -> None:
    if job[0] == "exchange":
        exchange(Path(job[1]))
    else:
        train(Path(job[1]), job[2], job[3:])


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from glassroom.train import parallel

    jobs = json.loads(Path(sys.argv[2]).read_text()) if sys.argv[1] == "jobs" else [sys.argv[1:]]
    for job in jobs:
        run(job)
    parallel.teardown()
