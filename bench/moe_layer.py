"""MoE layer cost against a dense SwiGLU with the same active parameters, measured in one run.

Forward + backward (with the gradient to the input) of glassroom's MoEFeedForward (64 experts,
top-8, d_model 256, d_expert 128, 8,192 tokens; no shared experts) over a dense SwiGLU of width
8 x 128 = 1024, in fp32 and under bf16 autocast. Variants take turns inside one process and the
medians are compared, so machine noise cancels out of the ratio. `--clock cpu` measures process CPU
time (user + system, all threads) instead of wall time: steadier on a loaded machine, and page
faults (system time) still count. `--profile` prints where the MoE
step's time goes (torch.profiler, forward and backward attributed to the part that created them).

    python bench/moe_layer.py [--tokens 8192] [--rounds 10] [--clock wall|cpu] [--profile]

Measured (torch 2.13 CPU, AMD EPYC with 2 cores shared with other jobs; load = 1-minute load
average; "old" is experts.py before its chunked, fused rewrite (below), run in the same process, interleaved):
                               fp32 moe/dense          bf16 autocast moe/dense
  wall, 2 threads, load 1.5-3  old 1.80x -> 1.12-1.15x   old 2.78x -> 1.53-1.57x
  cpu clock, 1 thread, load 5  old 1.63x -> 1.12-1.14x   old 2.34x -> 1.43x
  (under load 8 the 2-thread wall clock measures the scheduler, not the layer: every OpenMP
  region waits for a descheduled thread, and the MoE runs hundreds of regions to the dense's 20.)
fp32 is within 1.2x; bf16 is not. Where the MoE step goes (--profile, 2 threads, load 1.5):
  fp32 282 ms: expert matmuls 70%, SwiGLU and weight casts 16%, sort/gather/combine 10%, router 3%
  bf16 112 ms: expert matmuls 52% (58 ms: the dense layer's whole step is 71 ms), SwiGLU and casts
  26%, sort/gather/combine 13%, router 8%.
Why: the grouped matmuls themselves run at the dense layer's speed per FLOP (a 1,024 x 256 @ 256 x
256 expert block and the 8,192 x 256 @ 256 x 2,048 dense block reach the same GFLOP/s, in both
dtypes; the down projection's 128-deep blocks and the weight gradients over ~1,000 rows are 5-20%
slower in bf16). What cost 1.5-1.9x was memory: a CPU tensor over 32 MiB is mmapped fresh on every
allocation and pays a page fault per 4 KiB on first touch (64 MiB: 25 ms to fill fresh, 2 ms to
refill), and the old autograd graph made about 13 tensors of T*k x d = 65,536 x 256 per step
(gather, weighted copy, scatter, a cat, their backwards). experts.py now runs the local experts
chunk by chunk (page faults per step: 232 MiB against the dense layer's 272 MiB in fp32), with
gathers instead of scatters where it can.
The remaining bf16 gap (1 thread, cpu clock, load 3-6, 2026-12-01): the bench gives 1.34-1.35x
(dense 141-146 ms, MoE 189-197 ms; fp32 1.09-1.11x). Before and after the last changes
(scratch buffers reused by every chunk; each chunk casts its own experts, so no bf16 copy of the
expert weights is made or kept for the backward: 12 MiB less saved per layer here; weight gradients
written straight into fp32; the combine weights' gradient summed in fp32 without sum(dtype=)'s
allocating cast), interleaved in one process with the dense layer: bf16 1.56x -> 1.53x, fp32
1.14x -> 1.11x (12 rounds; other runs 1.37-1.42x -> 1.36-1.43x): a few percent, near the noise.
Measured apart in the same process: the expert matmuls alone, on their real shapes, 106 ms (the
floor: as fast per FLOP as the dense layer's, whose whole step is 121-141 ms); the fused experts
forward + backward 160-164 ms; the router 18 ms (fp32 linear and its two gradients 8 ms, topk on
(8192, 64) 5.3 ms, sigmoid, gather, renormalising and their backwards 5 ms). So 1.2x leaves
25-60 ms beside the matmuls, and the MoE spends about 80: the router (18, fp32 by design), the
scatter-add combine and its backward (15 ms, 16 index_add_ of 8,192 rows into the (T, d) output,
cache-cold), the row gathers (12 ms, 24 index_select of 8,192 rows), the SwiGLU recompute and
gradient (27 ms; the dense layer spends 38 on the same 8M elements), fresh fp32 weight gradients
(8x the dense layer's parameters: 24 MiB of first-touch page faults, 9 ms) and Python dispatch of
the per-expert matmuls (5 ms). Tried and dropped: top-k by repeated max (5.7 ms) or by sorting
(12 ms) instead of topk (5.3); topk on bf16 scores (5.5); the router linear as x @ W^T made
contiguous (2.85 ms against F.linear's 2.64); one gather of [grad | x] rows in the backward instead
of two (0.63 against 0.69 ms, minus the cat's 0.65); chunks of 2,048-16,384 rows (no change).
torch.mm / addmm with out_dtype=torch.float32 do not exist for CPU tensors in torch 2.13, so the
bf16 weight gradients are computed per expert into a (K, M) bf16 block and written into fp32.
Closing it needs fused kernels (gather + matmul + scatter in one, a fused top-k router), which
plain PyTorch on a CPU does not offer.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

from glassroom.model.config import MoEConfig
from glassroom.model.layers import SwiGLU
from glassroom.model.moe import MoEFeedForward

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def fwd_bwd(module, x, grad, autocast: bool, clock=time.perf_counter) -> float:
    x = x.detach().requires_grad_(True)
    start = clock()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = module(x)
        out = out[0] if isinstance(out, tuple) else out
    out.backward(grad)
    elapsed = clock() - start
    module.zero_grad(set_to_none=True)
    return elapsed


MATMULS = {"aten::mm", "aten::_grouped_mm", "aten::bmm", "aten::addmm", "aten::baddbmm"}
GATHERS = {"aten::sort", "aten::argsort", "aten::index_select", "aten::index_add_", "aten::scatter_add_", "aten::embedding_bag",
           "aten::_embedding_bag", "aten::_embedding_bag_forward_only", "aten::index", "aten::index_put_",
           "aten::where", "aten::floor_divide", "aten::div", "aten::arange", "aten::cumsum", "aten::masked_select"}
PARTS = [
    ("expert matmuls", "grouped matmuls of gate|up and down, forward and backward"),
    ("SwiGLU and casts", "silu * up and its gradient, bf16 weight casts"),
    ("sort, gather, combine", "argsort, dispatch gather, weighted gather-sum, their backwards"),
    ("router", "fp32 router linear, softmax, top-k, combine weights"),
    ("counts and losses", "bincount, balance and z losses, entropy"),
    ("other", "autograd engine, gradient accumulation, bench loop"),
]


def profile_moe(moe: MoEFeedForward, x, grad, autocast: bool, steps: int = 3) -> dict[str, float]:
    """Milliseconds per step by part: each op's self time, backward ops counted where their forward
    ran (matched through autograd sequence numbers)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    def scoped(name, fn):
        def wrapper(*args, **kwargs):
            with record_function(name):
                return fn(*args, **kwargs)
        return wrapper

    route, run_experts, experts_forward, moe_forward = (
        moe.route, moe.experts.run_experts, moe.experts.forward, moe.forward)
    moe.route = scoped("router", route)
    moe.experts.run_experts = scoped("experts/compute", run_experts)
    moe.experts.forward = scoped("experts", experts_forward)
    moe.forward = scoped("moe", moe_forward)
    try:
        fwd_bwd(moe, x, grad, autocast)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                fwd_bwd(moe, x, grad, autocast)
    finally:
        for name in ("route", "forward"):
            moe.__dict__.pop(name, None)
        for name in ("run_experts", "forward"):
            moe.experts.__dict__.pop(name, None)

    events = prof.events()
    scopes = {"router", "experts/compute", "experts", "moe"}

    def top(e):
        while e.cpu_parent is not None:
            e = e.cpu_parent
        return e

    def scope(e):
        while e is not None:
            if e.name in scopes:
                return e.name
            e = e.cpu_parent
        return None

    forward_scope = {}
    for e in events:
        if e.sequence_nr >= 0 and not top(e).name.startswith("autograd::engine"):
            forward_scope.setdefault(e.sequence_nr, scope(e))
    part_ms: dict[str, float] = defaultdict(float)
    op_ms: dict[tuple[str, str], float] = defaultdict(float)
    for e in events:
        root = top(e)
        where = forward_scope.get(root.sequence_nr) if root.name.startswith("autograd::engine") else scope(e)
        if where in ("experts", "experts/compute"):  # the fused CPU path runs everything in "experts"
            part = ("expert matmuls" if e.name in MATMULS else "sort, gather, combine" if e.name in GATHERS
                    else "SwiGLU and casts")
        else:
            part = {"router": "router", "moe": "counts and losses"}.get(where, "other")
        if e.name.startswith("aten::"):
            op_ms[(part, e.name)] += e.self_cpu_time_total / 1e3 / steps
        part_ms[part] += e.self_cpu_time_total / 1e3 / steps
    return dict(part_ms), dict(op_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--d-expert", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall: elapsed time; cpu: process CPU time (steadier on a busy machine)")
    parser.add_argument("--profile", action="store_true", help="also print where the MoE step's time goes")
    args = parser.parse_args()
    for name in ("tokens", "d_model", "experts", "top_k", "d_expert", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.tokens % 8:
        parser.error(f"--tokens {args.tokens}: must be a multiple of 8 (8 sequences of tokens/8)")
    if args.top_k > args.experts:
        parser.error(f"--top-k {args.top_k} is more than --experts {args.experts}")
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
    clock = CLOCKS[args.clock]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock; {args.tokens} tokens, "
          f"d_model {d}, {args.experts} experts top-{args.top_k} of width {args.d_expert} vs dense SwiGLU "
          f"{args.top_k * args.d_expert} ({active_dense:,} active parameters each)")
    for autocast in (False, True):
        times = {"dense": [], "moe": []}
        for _ in range(2):  # warm-up
            fwd_bwd(dense, x, grad, autocast), fwd_bwd(moe, x, grad, autocast)
        for r in range(args.rounds):
            order = ("dense", "moe") if r % 2 == 0 else ("moe", "dense")
            for name in order:
                times[name].append(fwd_bwd(dense if name == "dense" else moe, x, grad, autocast, clock))
        dense_ms = statistics.median(times["dense"]) * 1e3
        moe_ms = statistics.median(times["moe"]) * 1e3
        label = "bf16 autocast" if autocast else "fp32"
        print(f"{label:14s} dense {dense_ms:7.1f} ms   moe {moe_ms:7.1f} ms   moe/dense {moe_ms / dense_ms:.2f}x "
              f"(medians of {args.rounds}, interleaved)")
        if args.profile:
            parts, ops = profile_moe(moe, x, grad, autocast)
            total = sum(parts.values())
            print(f"  where the MoE step's time goes ({label}, profiler self time, {total:.1f} ms per step "
                  f"with the profiler's own overhead):")
            for part, what in PARTS:
                ms = parts.get(part, 0.0)
                print(f"    {part:22s} {ms:7.1f} ms {100 * ms / total:5.1f}%   {what}")
                top = sorted(((ms, op) for (p, op), ms in ops.items() if p == part), reverse=True)[:4]
                if top and ms > 0.02 * total:
                    print(" " * 38 + ", ".join(f"{op[6:]} {op_ms:.1f}" for op_ms, op in top))


if __name__ == "__main__":
    main()
