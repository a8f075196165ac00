"""MoE layer cost against a dense SwiGLU with the same active parameters, measured in one run.

Forward + backward (with the gradient to the input) of glassroom's MoEFeedForward (64 experts,
top-8, d_model 256, d_expert 128, 8,192 tokens; no shared experts) over a dense SwiGLU of width
8 x 128 = 1024, in fp32 and under bf16 autocast. Variants take turns inside one process and the
medians are compared, so machine noise cancels out of the ratio.

    python bench/moe_layer.py [--tokens 8192] [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from glassroom.model.config import MoEConfig
from glassroom.model.layers import SwiGLU
from glassroom.model.moe import MoEFeedForward


def fwd_bwd(module, x, grad, autocast: bool) -> float:
    x = x.detach().requires_grad_(True)
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = module(x)
        out = out[0] if isinstance(out, tuple) else out
    out.backward(grad)
    elapsed = time.perf_counter() - start
    module.zero_grad(set_to_none=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--d-expert", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    d = args.d_model
    moe = MoEFeedForward(d, MoEConfig(n_experts=args.experts, top_k=args.top_k, d_expert=args.d_expert))
    dense = SwiGLU(d, args.top_k * args.d_expert)
    with torch.no_grad():
        for p in list(moe.parameters()) + list(dense.parameters()):
            p.normal_(0, 0.02)
    active_moe = args.top_k * (moe.experts.gate_up_proj[0].numel() + moe.experts.down_proj[0].numel())
    active_dense = sum(p.numel() for p in dense.parameters())
    assert active_moe == active_dense
    x = torch.randn(8, args.tokens // 8, d)
    grad = torch.randn_like(x)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.tokens} tokens, d_model {d}, "
          f"{args.experts} experts top-{args.top_k} of width {args.d_expert} vs dense SwiGLU {args.top_k * args.d_expert} "
          f"({active_dense:,} active parameters each)")
    for autocast in (False, True):
        times = {"dense": [], "moe": []}
        for _ in range(2):  # warm-up
            fwd_bwd(dense, x, grad, autocast), fwd_bwd(moe, x, grad, autocast)
        for r in range(args.rounds):
            order = ("dense", "moe") if r % 2 == 0 else ("moe", "dense")
            for name in order:
                times[name].append(fwd_bwd(dense if name == "dense" else moe, x, grad, autocast))
        dense_ms = statistics.median(times["dense"]) * 1e3
        moe_ms = statistics.median(times["moe"]) * 1e3
        label = "bf16 autocast" if autocast else "fp32"
        print(f"{label:14s} dense {dense_ms:7.1f} ms   moe {moe_ms:7.1f} ms   moe/dense {moe_ms / dense_ms:.2f}x "
              f"(medians of {args.rounds}, interleaved)")


if __name__ == "__main__":
    main()
