"""Expert parallelism (`train.parallel: {ep: N}`): experts spread over ranks, tokens sent to them by all-to-all.

The world of W = dp x ep ranks is a 2-D device mesh ("dp", "ep"), expert-parallel ranks contiguous
(ranks 0..ep-1 form the first expert group). Each rank of an expert group holds n_experts / ep
consecutive experts: GroupedExperts' packed tensors become DTensors Shard(0) on the "ep" submesh
(each rank keeps its chunk of the full tensors every rank built from the same seed: no
communication), then FSDP2 shards them further over "dp" only; every other parameter is sharded
by FSDP2 over all W ranks (glassroom/train/parallel.py applies both).

In a forward, `ExpertExchange.run` (set as `GroupedExperts.ep`) receives this rank's (token,
expert) rows sorted by global expert id with the count per expert. The counts go first (one
all_to_all_single of E integers), then the rows (all_to_all_single with variable split sizes) to
the ranks holding their experts; received rows are regrouped by local expert, computed, put back
in arrival order and returned the same way. The exchange is a torch.autograd.Function whose
backward is the reverse all-to-all, so gradients come back to the tokens' ranks, and each expert's
gradient is already summed over the tokens of its whole expert group: FSDP2 over "dp" then divides
by W (set_gradient_divide_factor), which makes it the global-mean gradient like every other one.

Gradient clipping cannot use torch's clip_grad_norm_ (it stacks norms of DTensors living on
different meshes): `clip_grad_norm_` here sums the squares of each rank's local shards, all-reduced
once; every element of a sharded tensor lives on exactly one rank.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from glassroom.errors import ConfigError


def check_layout(ep: int, world_size: int, n_experts: int | None) -> None:
    """The mesh can be built: ep divides the world size and the expert count (ConfigError otherwise).
    ep 1 is plain FSDP."""
    if ep == 1:
        return
    if n_experts is None:
        raise ConfigError(f"train.parallel.ep: {ep} needs a Mixture-of-Experts model (model.moe); "
                          "this model is dense: use train.parallel: fsdp")
    if n_experts % ep:
        raise ConfigError(f"train.parallel.ep: {ep} does not divide model.moe.n_experts ({n_experts}); "
                          "give an ep that divides it")
    if world_size % ep:
        processes = f"{world_size} process" + ("es" if world_size != 1 else "")
        raise ConfigError(f"train.parallel.ep: {ep} does not divide the world size ({processes}); "
                          f"launch a multiple of {ep} processes with torchrun, or set train.parallel: fsdp")


class _AllToAll(torch.autograd.Function):
    """Rows split by `send` (rows per destination rank) in, rows split by `recv` (rows per source
    rank) out; backward sends the gradients back the same way reversed."""

    @staticmethod
    def forward(ctx, rows, send: list[int], recv: list[int], exchange: "ExpertExchange"):
        ctx.send, ctx.recv, ctx.exchange = send, recv, exchange
        return exchange.all_to_all(rows.contiguous(), send, recv)

    @staticmethod
    def backward(ctx, grad):
        return ctx.exchange.all_to_all(grad.contiguous(), ctx.recv, ctx.send), None, None, None


class ExpertExchange:
    """The token exchange of one MoE layer over an expert-parallel process group.

    `last_sent` and `last_received` (rows per peer rank in the group) describe the latest forward;
    `seconds` accumulates the wall time spent in the all-to-alls (forward and backward)."""

    def __init__(self, group, n_experts: int):
        self.group = group
        self.size = dist.get_world_size(group)
        self.n_local = n_experts // self.size
        self.last_sent: list[int] = []
        self.last_received: list[int] = []
        self.seconds = 0.0

    def all_to_all(self, rows: torch.Tensor, send: list[int], recv: list[int]) -> torch.Tensor:
        started = time.perf_counter()
        out = rows.new_empty((sum(recv), *rows.shape[1:]))
        dist.all_to_all_single(out, rows, output_split_sizes=recv, input_split_sizes=send, group=self.group)
        self.seconds += time.perf_counter() - started
        return out

    def run(self, rows: torch.Tensor, counts: torch.Tensor,
            compute_local: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """rows (N, d) sorted by global expert id, `counts` (E,) -> their experts' outputs (N, d)."""
        with torch.no_grad():  # rows each peer sends to each of this rank's experts: (peer, local expert)
            started = time.perf_counter()
            received_counts = torch.empty_like(counts)
            dist.all_to_all_single(received_counts, counts.contiguous(), group=self.group)
            self.seconds += time.perf_counter() - started
            per_peer = received_counts.view(self.size, self.n_local)
            send = counts.view(self.size, self.n_local).sum(1).tolist()
            recv = per_peer.sum(1).tolist()
        self.last_sent, self.last_received = send, recv
        arrived = _AllToAll.apply(rows, send, recv, self)  # blocks by source rank, each by local expert
        local_expert = torch.arange(self.n_local, device=rows.device).repeat(self.size)
        expert_of_row = torch.repeat_interleave(local_expert, per_peer.flatten())
        order = torch.argsort(expert_of_row, stable=True)
        computed = compute_local(arrived.index_select(0, order), per_peer.sum(0))
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        return _AllToAll.apply(computed.index_select(0, inverse), recv, send, self)


def expert_modules(model: nn.Module) -> list[nn.Module]:
    """The GroupedExperts of every MoE layer of the Transformer."""
    return [moe.experts for _, moe in model.moe_layers()]


def shard_experts(model: nn.Module, mesh) -> None:
    """Each expert group's rank keeps its n_experts / ep experts as DTensors Shard(0) on mesh["ep"],
    and sends its rows there through an ExpertExchange."""
    from torch.distributed.tensor import DTensor, Shard  # lazy: DTensor costs seconds; only expert-parallel runs

    ep_mesh = mesh["ep"]
    group, coordinate, size = ep_mesh.get_group(), ep_mesh.get_local_rank(), ep_mesh.size()
    for experts in expert_modules(model):
        for name in ("gate_up_proj", "down_proj"):
            full = getattr(experts, name)
            chunk = full.detach().chunk(size, dim=0)[coordinate].clone()
            local = DTensor.from_local(chunk, ep_mesh, [Shard(0)], run_check=False)
            setattr(experts, name, nn.Parameter(local, requires_grad=full.requires_grad))
        experts.ep = ExpertExchange(group, experts.n_experts)


def exchange_seconds(model: nn.Module) -> float:
    """Wall time all expert exchanges of the model spent in all-to-alls so far."""
    return sum(e.ep.seconds for e in expert_modules(model) if e.ep is not None)


@torch.no_grad()
def clip_grad_norm_(parameters, max_norm: float, all_reduce: Callable[[torch.Tensor], None]) -> torch.Tensor:
    """The global gradient norm of sharded (DTensor) parameters, from the squares of each rank's local
    shards summed over ranks; gradients are scaled in place by min(1, max_norm / norm)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    locals_ = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
    device = locals_[0].device if locals_ else torch.device("cpu")
    square = torch.zeros((), dtype=torch.float64, device=device)
    for g in locals_:  # each shard's norm (fp32 accumulation, no fp64 copy of a gradient), squared in fp64
        if g.numel():
            square += torch.linalg.vector_norm(g.detach(), dtype=torch.float32).double().square()
    all_reduce(square)
    norm = square.sqrt().float()
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    if torch.isfinite(norm) and float(scale) < 1.0:
        for g in locals_:
            g.mul_(scale.to(g.dtype))
    return norm
