"""Routed experts: token dispatch sorted by expert, grouped matmuls, and the weighted combine.

`GroupedExperts(x, chosen, weights, counts)` takes each token's chosen experts (T, k) (-1 marks an
assignment dropped by the capacity limit: not computed, contributes zero), their combine weights
(T, k) and the kept assignments per expert (E,). The kept (token, expert) rows are sorted by expert
and multiplied with one grouped matmul per projection (`torch.nn.functional.grouped_mm` where the
device and dtype allow, otherwise one matmul per expert).

Expert parallelism plugs in at one point: `run_experts(rows, counts)` maps rows sorted by global
expert id to their unweighted expert outputs. With `self.ep` set (train/expert_parallel.py) the rows
travel to the ranks that hold their experts and back, and `compute_local` runs this rank's experts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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
    pieces = torch.split(x, counts.tolist())
    return torch.cat([piece @ w[g] for g, piece in enumerate(pieces)], dim=0)


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

    def expert_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's experts' (gate_up, down): the local shard when the parameters are DTensors."""
        gate_up, down = self.gate_up_proj, self.down_proj
        if hasattr(gate_up, "to_local"):
            gate_up, down = gate_up.to_local(), down.to_local()
        return gate_up, down

    def compute_local(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """rows (N, d) sorted by local expert, `counts` per local expert -> SwiGLU outputs (N, d)."""
        gate_up, down = self.expert_weights()
        dtype = rows.dtype
        if torch.is_autocast_enabled(rows.device.type):
            # grouped_mm is not autocast-aware: cast operands ourselves.
            dtype = torch.get_autocast_dtype(rows.device.type)
            gate_up, down = gate_up.to(dtype), down.to(dtype)
        hidden = grouped_matmul(rows.to(dtype), gate_up, counts)
        gate, up = hidden.chunk(2, dim=-1)
        return grouped_matmul(F.silu(gate) * up, down, counts)

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
        top_k = chosen.shape[1]
        flat = chosen.flatten()
        kept = int(counts.sum())
        # dropped assignments (-1) sort last and are cut off
        order = torch.argsort(torch.where(flat < 0, self.n_experts, flat), stable=True)[:kept]
        token_index = order // top_k
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        routed = x.to(dtype).index_select(0, token_index)  # cast the T rows, not the T*k copies
        out = self.run_experts(routed, counts)
        combine = weights.flatten().index_select(0, order).unsqueeze(-1).to(out.dtype)
        return torch.zeros(x.shape, dtype=out.dtype, device=x.device).index_add_(0, token_index, out * combine)
