"""MoE layer cost against a dense SwiGLU with the same active parameters, measured in one run.

Forward + backward (with the gradient to the input) of glassroom's MoEFeedForward (64 experts,
top-8, d_model 256, d_expert 128, 8,192 tokens; no shared experts) over a dense SwiGLU of width
8 x 128 = 1024, in fp32 and under bf16 autocast. Variants take turns inside one process and the
medians are compared, so machine noise cancels out of the ratio. `--clock cpu` measures process CPU
time (user + system, all threads) instead of wall time: steadier on a loaded machine, and it still
counts page faults, which wall-clock-free measures would miss. `--profile` prints where the MoE
step's time goes (torch.profiler, forward and backward attributed to the part that created them).

    python bench/moe_layer.py [--tokens 8192] [--rounds 10] [--clock wall|cpu] [--profile]

Where the time goes, and why the MoE is no longer 1.5-1.9x (torch 2.13 CPU, AMD EPYC 2 cores):
the grouped matmuls themselves run at the dense layer's speed per FLOP (a 1,024 x 256 @ 256 x 256
expert block and the 8,192 x 256 @ 256 x 2,048 dense block reach the same GFLOP/s in fp32 and bf16),
and sorting (argsort of 65,536 small ints: 0.5 ms) and the router are small. The cost was memory:
a CPU tensor over 32 MiB is mmapped fresh by glibc on every allocation and pays a page fault per
4 KiB on first touch (a 64 MiB tensor: 25 ms to fill fresh, 2 ms to refill). The MoE's (rows, d)
tensors are T*k x d = 65,536 x 256 (64 MiB fp32, 32 MiB bf16) against the dense layer's 8,192 x
1,024, and the old autograd graph made about 13 of them per step (gather, weighted copy, scatter
and their backwards, a cat for the gate/up gradient), so page faults and memory-bound copies, not
FLOPs, made the difference. experts.py now makes only those it returns or saves (dispatch rows,
gate|up, SwiGLU output, expert output; their gradients), combines and dispatch-backwards with a
gather-sum (embedding_bag) and no scatter, and does elementwise work in chunks.
Measured (medians, interleaved; load = 1-minute load average from other jobs on the 2 cores):
  before: fp32 1.62x, bf16 2.70x (--clock cpu, 1 thread, load 5); 1.40x / 10.8x (wall, 2 threads, load 1-3)
  after:  see the closing note of issue 15 and the numbers printed by this script.
The remaining gap is the (rows, d) tensors that must exist (4 forward, 4 backward: about 0.4 ms
per MiB of page faults without transparent huge pages; THP_MEM_ALLOC_ENABLE=1 cuts that 6x for
both layers) and the router (fp32 linear, softmax, top-k: a few ms).
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
