"""Routed experts: token dispatch sorted by expert, grouped matmuls, and the weighted combine.

`GroupedExperts(x, chosen, weights, counts)` takes each token's chosen experts (T, k) (-1 marks an
assignment dropped by the capacity limit: not computed, contributes zero), their combine weights
(T, k) and the kept assignments per expert (E,). The kept (token, expert) rows are sorted by expert
and multiplied with one grouped matmul per projection (`torch.nn.functional.grouped_mm` where the
device and dtype allow, otherwise one matmul per expert).

Expert parallelism plugs in at one point: `run_experts(rows, counts)` maps rows sorted by global
expert id to their unweighted expert outputs. With `self.ep` set (train/expert_parallel.py) the rows
travel to the ranks that hold their experts and back, and `compute_local` runs this rank's experts.

Speed (bench/moe_layer.py has the measurements). On a CPU a fresh tensor over 32 MiB is mmapped by
glibc and pays a page fault per 4 KiB on first touch, which at MoE sizes (T*k rows of d) costs as
much as the memory-bound work itself; so:
- with every expert local on a CPU (`fuse`, the default there), dispatch, experts and combine run
  as one autograd Function, chunk by chunk of CHUNK_ROWS sorted rows: gather the chunk's token rows,
  gate|up grouped matmul (saved), SwiGLU times the combine weight, down grouped matmul, index_add
  into the (T, d) output. Only gate|up is kept for the backward, which recomputes the rest per
  chunk, gets the combine weights' gradient as <g @ down^T, act> (no expert output saved) and
  writes each expert's weight gradient in place by matmul. Every other per-chunk temporary lives in
  a scratch buffer that all chunks reuse (out= gathers, matmuls and silu). The expert weights enter
  in their parameter dtype and each chunk casts its own experts to the compute dtype (no bf16 copy
  of all experts is kept for the backward); under bf16 autocast their gradients are written
  straight into fp32 (no bf16 gradient tensor, no cast node, a group cut by a chunk edge adds up in
  fp32);
- otherwise (expert parallelism, GPUs) dispatch -> run_experts -> combine, three Functions with
  hand-written backwards: a gather, then grouped matmuls with a SwiGLU backward that writes gate and
  up gradients into one buffer (no cat), then a weighted gather-sum (`embedding_bag`); their
  backwards are a gather-sum, the grouped matmuls, and a gather scaled in place. No (rows, d)
  temporary exists beyond those returned or saved.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

CHUNK_ROWS = 8192  # work in chunks of this many rows keeps temporaries small (2-8 MiB)


def _grouped_mm_supported(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether F.grouped_mm takes these operands (it needs 16-byte aligned rows)."""
    if x.dtype != w.dtype or x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return False
    size = x.element_size()
    if (x.shape[-1] * size) % 16 or (w.shape[-1] * size) % 16:
        return False
    if x.device.type == "cpu":
        return True
    if x.device.type == "cuda":
        return x.dtype == torch.bfloat16 and torch.cuda.get_device_capability(x.device) >= (9, 0)
    return False


def grouped_matmul(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Rows of `x` sorted into groups of sizes `counts`; group g is multiplied by `w[g]` (K, N)."""
    if _grouped_mm_supported(x, w):
        offsets = torch.cumsum(counts, 0, dtype=torch.int32)
        return F.grouped_mm(x, w, offs=offsets)
    out = x.new_empty(x.shape[0], w.shape[-1])
    start = 0
    for g, count in enumerate(counts.tolist()):
        if count:
            torch.mm(x[start : start + count], w[g], out=out[start : start + count])
        start += count
    return out


def grouped_weight_grad(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Per group g: a_g^T @ b_g for rows of `a` (N, K) and `b` (N, M) in groups `counts` -> (G, K, M);
    an empty group's block is zero."""
    if _grouped_mm_supported(a, b) and a.shape[0] > 0:
        offsets = torch.cumsum(counts, 0, dtype=torch.int32)
        return F.grouped_mm(a.t(), b, offs=offsets)
    out = a.new_zeros(counts.numel(), a.shape[1], b.shape[1])
    start = 0
    for g, count in enumerate(counts.tolist()):
        if count:
            torch.mm(a[start : start + count].t(), b[start : start + count], out=out[g])
        start += count
    return out


def _chunks(n: int):
    return ((s, min(s + CHUNK_ROWS, n)) for s in range(0, n, CHUNK_ROWS))


class _Dispatch(torch.autograd.Function):
    """x (T, d) -> rows x[token_index] (N, d). Backward: each token's rows summed (a gather-sum)."""

    @staticmethod
    def forward(ctx, x, token_index, bag_rows, bag_offsets):
        ctx.save_for_backward(bag_rows, bag_offsets)
        return x.index_select(0, token_index)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_rows):
        bag_rows, bag_offsets = ctx.saved_tensors
        return _bag_sum(bag_rows, grad_rows, bag_offsets, None), None, None, None


def _bag_sum(bag_rows, rows, bag_offsets, row_weights):
    """Per token t: sum of rows[bag_rows[j]] (times row_weights[bag_rows[j]]) over its bag -> (T, d)."""
    n_tokens = bag_offsets.numel()
    if rows.shape[0] == 0:
        return rows.new_zeros(n_tokens, rows.shape[1])
    with torch.autocast(rows.device.type, enabled=False):
        per_sample = None if row_weights is None else row_weights.index_select(0, bag_rows)
        return F.embedding_bag(bag_rows, rows, bag_offsets, mode="sum", per_sample_weights=per_sample)


class _Combine(torch.autograd.Function):
    """Rows' unweighted outputs (N, d) and their weights (N,) -> (T, d): each token's weighted sum."""

    @staticmethod
    def forward(ctx, out, row_weights, token_index, bag_rows, bag_offsets):
        weights = row_weights.to(out.dtype)
        ctx.save_for_backward(out, weights, token_index)
        ctx.weights_dtype = row_weights.dtype
        return _bag_sum(bag_rows, out, bag_offsets, weights)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        out, weights, token_index = ctx.saved_tensors
        grad_rows = grad.to(out.dtype).index_select(0, token_index)
        grad_weights = None
        if ctx.needs_input_grad[1]:
            grad_weights = torch.empty(out.shape[0], dtype=torch.float32, device=out.device)
            for s, e in _chunks(out.shape[0]):
                torch.sum(grad_rows[s:e] * out[s:e], -1, out=grad_weights[s:e])  # fp32 sums, no fp32 copy
            grad_weights = grad_weights.to(ctx.weights_dtype)
        grad_rows.mul_(weights.unsqueeze(-1))
        return grad_rows, grad_weights, None, None, None


class _SwiGLUExperts(torch.autograd.Function):
    """rows (N, d) sorted by expert -> down(silu(gate) * up) per expert, with a lean backward."""

    @staticmethod
    def forward(ctx, rows, gate_up, down, counts):
        hidden = grouped_matmul(rows, gate_up, counts)  # (N, 2h): gate | up
        width = hidden.shape[1] // 2
        act = hidden.new_empty(hidden.shape[0], width)
        for s, e in _chunks(hidden.shape[0]):
            torch.mul(F.silu(hidden[s:e, :width]), hidden[s:e, width:], out=act[s:e])
        ctx.save_for_backward(rows, hidden, act, gate_up, down, counts)
        return grouped_matmul(act, down, counts)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        rows, hidden, act, gate_up, down, counts = ctx.saved_tensors
        grad_out = grad_out.to(act.dtype).contiguous()
        grad_down = grouped_weight_grad(act, grad_out, counts) if ctx.needs_input_grad[2] else None
        grad_act = grouped_matmul(grad_out, down.transpose(1, 2), counts)
        width = act.shape[1]
        grad_hidden = torch.empty_like(hidden)
        for s, e in _chunks(hidden.shape[0]):
            gate, up, g = hidden[s:e, :width], hidden[s:e, width:], grad_act[s:e]
            torch.mul(g, F.silu(gate), out=grad_hidden[s:e, width:])
            torch.ops.aten.silu_backward.grad_input(g * up, gate, grad_input=grad_hidden[s:e, :width])
        del grad_act
        grad_gate_up = grouped_weight_grad(rows, grad_hidden, counts) if ctx.needs_input_grad[1] else None
        grad_rows = None
        if ctx.needs_input_grad[0]:
            grad_rows = grouped_matmul(grad_hidden, gate_up.transpose(1, 2), counts)
        return grad_rows, grad_gate_up, grad_down, None


def _chunk_plan(counts: list[int], n_rows: int):
    """Row chunks of about CHUNK_ROWS sorted rows: (start, end, first expert, end expert, the chunk's
    rows per expert). A chunk may cut an expert's group; its weight gradient then adds up."""
    starts, total = [], 0
    for count in counts:
        starts.append(total)
        total += count
    plan, first = [], 0
    for s, e in _chunks(n_rows):
        while starts[first] + counts[first] <= s:
            first += 1
        last, local = first, []
        while last < len(counts) and starts[last] < e:
            local.append(min(starts[last] + counts[last], e) - max(starts[last], s))
            last += 1
        plan.append((s, e, first, last, local))
    return plan


class _WeightGrad:
    """A (E, K, M) weight gradient, in the parameter's dtype, filled chunk by chunk: each expert's
    block is written by matmul straight into place the first time (no zero fill), added to when a
    chunk cut its group. Under autocast the products are computed in the compute dtype into one
    (K, M) scratch block and written into the fp32 gradient from there: no (E, K, M) bf16 gradient,
    no cast of it afterwards, and a cut group's parts add up in fp32."""

    def __init__(self, weight: torch.Tensor, compute_dtype: torch.dtype):
        """`weight`: the (E, K, M) parameter (the gradient's dtype); products in `compute_dtype`."""
        self.grad = torch.empty_like(weight)
        self.scratch = None if weight.dtype == compute_dtype else torch.empty_like(weight[0], dtype=compute_dtype)
        self.written = 0  # experts [0, written) hold their value so far

    def add(self, first: int, a: torch.Tensor, b: torch.Tensor, counts: list[int]) -> None:
        if first > self.written:
            self.grad[self.written : first].zero_()
        start = 0
        for g, count in enumerate(counts, start=first):
            block, seen = self.grad[g], g < self.written
            a_g, b_g = a[start : start + count].t(), b[start : start + count]
            start += count
            if not count:
                if not seen:
                    block.zero_()
            elif self.scratch is not None:
                torch.mm(a_g, b_g, out=self.scratch)
                block.add_(self.scratch) if seen else block.copy_(self.scratch)
            elif seen:
                block.addmm_(a_g, b_g)
            else:
                torch.mm(a_g, b_g, out=block)
        self.written = max(self.written, first + len(counts))

    def result(self) -> torch.Tensor:
        self.grad[self.written :].zero_()
        return self.grad


class _Scratch:
    """Per-chunk temporaries, allocated once per forward or backward and reused by every chunk. A
    CPU tensor over glibc's mmap threshold goes back to the OS when freed and page-faults again on
    its next first touch (a 4 MiB chunk of rows: about 1 ms, as long as the gather that fills it);
    reused, its pages fault once. `like` gives the compute dtype and device."""

    def __init__(self, plan, like: torch.Tensor):
        self.rows = max((e - s for s, e, *_ in plan), default=0)
        self.experts = max((g1 - g0 for _, _, g0, g1, _ in plan), default=0)
        self.like, self.buffers = like, {}

    def weights(self, name: str, weight: torch.Tensor, g0: int, g1: int) -> torch.Tensor:
        """Experts [g0, g1) of a parameter in the compute dtype: itself when it already is, else
        cast into a buffer of the chunk's experts (never a bf16 copy of every expert, nor one kept
        for the backward: it casts its chunk's experts again)."""
        if weight.dtype == self.like.dtype:
            return weight[g0:g1]
        buffer = self.buffers.get(name)
        if buffer is None:
            buffer = self.buffers[name] = self.like.new_empty(self.experts, *weight.shape[1:])
        return buffer[: g1 - g0].copy_(weight[g0:g1])

    def __call__(self, name: str, rows: int, width: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        buffer = self.buffers.get(name)
        if buffer is None:
            buffer = self.buffers[name] = self.like.new_empty(self.rows, width, dtype=dtype or self.like.dtype)
        return buffer[:rows]


def _mm_groups(a: torch.Tensor, w: torch.Tensor, counts: list[int], out: torch.Tensor, transpose=False):
    """out[group g's rows] = a[group g's rows] @ w[g] (w[g]^T with `transpose`): a grouped matmul
    written into `out` (on a CPU F.grouped_mm is this loop, without out=)."""
    start = 0
    for g, count in enumerate(counts):
        if count:
            torch.mm(a[start : start + count], w[g].t() if transpose else w[g], out=out[start : start + count])
        start += count
    return out


class _FusedLocalExperts(torch.autograd.Function):
    """Dispatch, SwiGLU experts and combine in one, chunk by chunk of sorted rows, for experts all
    held locally on a CPU: only gate|up (N, 2h) is kept for the backward; every other (rows, d) or
    (rows, h) tensor lives in a per-call scratch buffer that each chunk reuses (_Scratch).
    The combine weight's gradient uses <g, act @ down> = <g @ down^T, act>: no expert output saved.
    The expert weights come in their parameter dtype; each chunk casts its experts to x's dtype
    (the compute dtype) into a reused buffer, in the forward and again in the backward, so no copy
    of every expert in the compute dtype is made or kept; their gradients go back in the
    parameter dtype."""

    @staticmethod
    def forward(ctx, x, gate_up, down, row_weights, token_index, counts):
        plan = _chunk_plan(counts, token_index.numel())
        width, d_model = down.shape[1], x.shape[1]
        y = torch.zeros(x.shape, dtype=x.dtype, device=x.device)  # summed in the compute dtype, as before
        weights = row_weights.to(x.dtype)
        scratch = _Scratch(plan, x)
        hidden_chunks = []
        for s, e, g0, g1, local in plan:
            n, tokens = e - s, token_index[s:e]
            rows = torch.index_select(x, 0, tokens, out=scratch("rows", n, d_model))
            hidden = _mm_groups(rows, scratch.weights("gate_up", gate_up, g0, g1), local, x.new_empty(n, 2 * width))
            hidden_chunks.append(hidden)
            # weight the (rows, h) activation rather than the (rows, d) output: down is linear
            act = torch.ops.aten.silu.out(hidden[:, :width], out=scratch("act", n, width))
            act.mul_(hidden[:, width:]).mul_(weights[s:e].unsqueeze(-1))
            out = _mm_groups(act, scratch.weights("down", down, g0, g1), local, scratch("out", n, d_model))
            y.index_add_(0, tokens, out)
        ctx.plan = plan
        ctx.save_for_backward(x, gate_up, down, weights, token_index, *hidden_chunks)
        ctx.weights_dtype = row_weights.dtype
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, gate_up, down, weights, token_index, *hidden_chunks = ctx.saved_tensors
        width, d_model = down.shape[1], x.shape[1]
        grad = grad.to(x.dtype)
        grad_x = torch.zeros_like(x)
        grad_gate_up, grad_down = _WeightGrad(gate_up, x.dtype), _WeightGrad(down, x.dtype)
        grad_weights = torch.empty(token_index.numel(), dtype=torch.float32, device=x.device)
        scratch = _Scratch(ctx.plan, x)
        for (s, e, g0, g1, local), hidden in zip(ctx.plan, hidden_chunks):
            n, tokens, w = e - s, token_index[s:e], weights[s:e].unsqueeze(-1)
            # d loss / d (unweighted expert output) / w
            grad_rows = torch.index_select(grad, 0, tokens, out=scratch("grad_rows", n, d_model))
            gate, up = hidden[:, :width], hidden[:, width:]
            down_c = scratch.weights("down", down, g0, g1)
            grad_act = _mm_groups(grad_rows, down_c, local, scratch("grad_act", n, width), transpose=True)
            silu = torch.ops.aten.silu.out(gate, out=scratch("silu", n, width))
            act = torch.mul(silu, up, out=scratch("act", n, width))
            product = torch.mul(grad_act, act, out=scratch("product", n, width))
            if product.dtype != torch.float32:  # summed in fp32; cast into a reused buffer (sum's
                product = scratch("product32", n, width, torch.float32).copy_(product)  # dtype= allocates)
            torch.sum(product, -1, out=grad_weights[s:e])
            grad_act.mul_(w)
            grad_down.add(g0, act.mul_(w), grad_rows, local)
            grad_hidden = scratch("grad_hidden", n, 2 * width)
            torch.mul(grad_act, silu, out=grad_hidden[:, width:])
            torch.ops.aten.silu_backward.grad_input(grad_act.mul_(up), gate, grad_input=grad_hidden[:, :width])
            rows = torch.index_select(x, 0, tokens, out=scratch("rows", n, d_model))
            grad_gate_up.add(g0, rows, grad_hidden, local)
            gate_up_c = scratch.weights("gate_up", gate_up, g0, g1)
            grad_in = _mm_groups(grad_hidden, gate_up_c, local, scratch("grad_in", n, d_model), transpose=True)
            grad_x.index_add_(0, tokens, grad_in)
        return (grad_x, grad_gate_up.result(), grad_down.result(), grad_weights.to(ctx.weights_dtype), None, None)


class GroupedExperts(nn.Module):
    """`n_experts` SwiGLU experts of width `d_expert`, stored packed for grouped matmuls."""

    def __init__(self, n_experts: int, d_model: int, d_expert: int):
        super().__init__()
        self.n_experts = n_experts
        self.d_expert = d_expert
        # gate and up side by side: one grouped matmul computes both.
        self.gate_up_proj = nn.Parameter(torch.empty(n_experts, d_model, 2 * d_expert))
        self.down_proj = nn.Parameter(torch.empty(n_experts, d_expert, d_model))
        self.ep = None  # set by train/expert_parallel.py: rows travel to the ranks holding their experts
        # None: fuse dispatch, experts and combine chunk by chunk when every expert is local and on a
        # CPU (no (rows, d) tensor materialised); False: always dispatch -> run_experts -> combine.
        self.fuse: bool | None = None

    def expert_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's experts' (gate_up, down): the local shard when the parameters are DTensors."""
        gate_up, down = self.gate_up_proj, self.down_proj
        if hasattr(gate_up, "to_local"):
            gate_up, down = gate_up.to_local(), down.to_local()
        return gate_up, down

    def compute_local(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """rows (N, d) sorted by local expert, `counts` per local expert -> SwiGLU outputs (N, d)."""
        gate_up, down = self.expert_weights()
        dtype = rows.dtype  # without autocast the rows' dtype computes, as on the fused path
        if torch.is_autocast_enabled(rows.device.type):
            dtype = torch.get_autocast_dtype(rows.device.type)
        # grouped_mm is not autocast-aware and wants one dtype: cast operands ourselves, once.
        gate_up, down = gate_up.to(dtype), down.to(dtype)
        return _SwiGLUExperts.apply(rows.to(dtype), gate_up, down, counts)

    def run_experts(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """rows (N, d) sorted by global expert id, `counts` (E,) -> unweighted outputs (N, d)."""
        if self.ep is not None:
            return self.ep.run(rows, counts, self.compute_local)
        return self.compute_local(rows, counts)

    def forward(
        self, x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor, counts: torch.Tensor
    ) -> torch.Tensor:
        """x (T, d); chosen and weights (T, k), -1 in chosen = dropped; counts (E,) kept rows per
        expert. Returns (T, d): each token's kept experts' outputs times their weights, summed."""
        n_tokens, top_k = chosen.shape
        flat = chosen.flatten()
        kept = int(counts.sum())
        # Row r of the sorted layout is assignment order[r]; dropped assignments (-1) sort last.
        order = torch.argsort(torch.where(flat < 0, self.n_experts, flat), stable=True)[:kept]
        token_index = order // top_k
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        fuse = self.fuse if self.fuse is not None else x.device.type == "cpu"
        if fuse and self.ep is None:
            gate_up, down = self.expert_weights()  # cast inside, once: the gradients come back fp32
            row_weights = weights.flatten().index_select(0, order)
            return _FusedLocalExperts.apply(x.to(dtype), gate_up, down, row_weights, token_index, counts.tolist())
        # Each token's rows in token order (its "bag"), for the gather-sums of combine and dispatch.
        position = torch.empty(flat.shape, dtype=torch.long, device=flat.device)
        position[order] = torch.arange(kept, device=flat.device)
        if kept == flat.numel():
            bag_rows = position
            bag_offsets = torch.arange(0, kept, top_k, device=flat.device)
        else:
            is_kept = flat >= 0
            bag_rows = position[is_kept]
            per_token = is_kept.view(n_tokens, top_k).sum(1)
            bag_offsets = torch.cumsum(per_token, 0) - per_token
        # cast the T rows, not the T*k copies
        routed = _Dispatch.apply(x.to(dtype), token_index, bag_rows, bag_offsets)
        out = self.run_experts(routed, counts)
        row_weights = weights.flatten().index_select(0, order)
        return _Combine.apply(out, row_weights, token_index, bag_rows, bag_offsets)
