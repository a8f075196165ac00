"""Expert parallelism on CPU: the all-to-all's share of a training step, and the step against plain FSDP.

Launches itself under torchrun (2 processes, gloo): the same MoE Transformer (default 16 experts
top-4, d_model 256, 4 layers, 1,024 tokens per rank) is wrapped twice, once with plain FSDP2 (every
rank runs every expert) and once with `train.parallel: {ep: 2}` (each rank holds 8 experts, tokens
exchanged by all_to_all_single). Forward + backward + AdamW steps of both take turns; the medians
are printed with the wall time the expert exchanges spent in all-to-alls (forward and backward),
measured around each call on rank 0.

    python bench/ep.py [--nproc 2] [--ep 2] [--rounds 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--ep", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=4)
    parser.add_argument("--d-expert", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4, help="sequences per rank")
    parser.add_argument("--seq", type=int, default=256)
    return parser.parse_args()


def build(args, ep: int):
    from glassroom.model.config import ModelConfig, MoEConfig
    from glassroom.model.transformer import build_model
    from glassroom.train import parallel

    cfg = ModelConfig(vocab_size=4096, d_model=args.d_model, n_layers=args.layers, n_heads=4, max_seq_len=args.seq,
                      d_ff=4 * args.d_model, moe=MoEConfig(n_experts=args.experts, top_k=args.top_k,
                                                           d_expert=args.d_expert, n_shared_experts=1,
                                                           first_dense_layers=0))
    info = parallel.DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size())
    model = parallel.parallelize(build_model(cfg, seed=0), info, "fsdp", torch.device("cpu"), False, ep=ep)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4), info


def step(model, optimizer, info, tokens, ep: int) -> float:
    import torch.nn.functional as F

    from glassroom.train import parallel

    dist.barrier()
    start = time.perf_counter()
    out = model(tokens[:, :-1])
    loss = F.cross_entropy(out.logits.flatten(0, 1).float(), tokens[:, 1:].flatten()) + out.moe_loss
    loss.backward()
    parallel.clip_grad_norm(model, 1.0, info, ep)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    dist.barrier()
    return time.perf_counter() - start


def worker(args) -> None:
    from glassroom.train.expert_parallel import exchange_seconds

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fsdp = build(args, 1)
    ep = build(args, args.ep)
    gen = torch.Generator().manual_seed(rank)
    times: dict[str, list[float]] = {"fsdp": [], "ep": []}
    shares: list[float] = []
    for round_ in range(args.rounds + 1):  # round 0 warms up
        tokens = torch.randint(0, 4096, (args.batch, args.seq + 1), generator=gen)
        t_fsdp = step(*fsdp, tokens, 1)
        before = exchange_seconds(ep[0])
        t_ep = step(*ep, tokens, args.ep)
        exchanged = exchange_seconds(ep[0]) - before
        if round_:
            times["fsdp"].append(t_fsdp)
            times["ep"].append(t_ep)
            shares.append(exchanged / t_ep)
    if rank == 0:
        f, e = statistics.median(times["fsdp"]), statistics.median(times["ep"])
        share = statistics.median(shares)
        print(f"torch {torch.__version__}, {dist.get_world_size()} processes x {args.threads} thread(s), gloo; "
              f"{args.layers} MoE layers, {args.experts} experts top-{args.top_k} (width {args.d_expert}), "
              f"d_model {args.d_model}, {args.batch} x {args.seq} tokens per rank; medians of {args.rounds} steps")
        print(f"plain FSDP2 (every expert on every rank): {f * 1000:8.1f} ms/step")
        print(f"FSDP2 + ep {args.ep} ({args.experts // args.ep} experts per rank): {e * 1000:8.1f} ms/step  "
              f"({e / f:.2f}x plain FSDP)")
        print(f"all-to-all share of the ep step: {share:.1%} ({share * e * 1000:.1f} ms: counts, rows out and "
              "back, and their gradients)")
    dist.destroy_process_group()


def main() -> None:
    args = parse()
    if "RANK" in os.environ:
        worker(args)
        return
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
           str(Path(__file__).resolve()), *sys.argv[1:]]
    raise SystemExit(subprocess.run(cmd, env=env, cwd=root).returncode)


if __name__ == "__main__":
    main()
