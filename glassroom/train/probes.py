"""What to measure in a training step: norms by parameter group, router statistics, throughput.

Norms are L2 norms of the parameters, their gradients and their updates (what one optimizer step
changed), grouped by module kind (embedding, attention, mlp, experts, shared_experts, router,
router_bias, norms, head), by layer (layer_<i>), by kind within a layer (<kind>/layer_<i>), plus
`total`. The router bias is a buffer that
the load balancer moves, not the gradient; it is included in the param and update norms (a watcher
sees the total move when it moves) and has no gradient norm. Under FSDP2 each rank sums the
squares of its own shards and one all-reduce combines them.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import torch
from torch import nn

_LAYER = re.compile(r"^blocks\.(\d+)\.")


def group_of(name: str) -> tuple[str, Optional[int]]:
    """(kind, layer or None) of a parameter or buffer name of the Transformer."""
    match = _LAYER.match(name)
    layer = int(match.group(1)) if match else None
    if name.startswith("embed."):
        return "embedding", None
    if name.startswith("head."):
        return "head", None
    if name.endswith("router_bias"):
        return "router_bias", layer
    parts = name.split(".")
    if len(parts) >= 2 and parts[-2].endswith("norm"):
        return "norms", layer
    if ".attn." in name:
        return "attention", layer
    if ".mlp.shared_experts." in name:
        return "shared_experts", layer
    if ".mlp.experts." in name:
        return "experts", layer
    if ".mlp.router." in name:
        return "router", layer
    if ".mlp." in name:
        return "mlp", layer
    return "norms", layer


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def tracked_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor, bool]]:
    """(name, tensor, sharded) for every parameter and every router bias."""
    items = [(n, p, hasattr(p, "to_local")) for n, p in model.named_parameters()]
    items += [(n, b, False) for n, b in model.named_buffers() if n.endswith("router_bias")]
    return items


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the local values, taken before an optimizer step, for update norms."""
    return {n: _local(t).detach().float().clone() for n, t, _ in tracked_tensors(model)}


@torch.no_grad()
def norms_by_group(model: nn.Module, before: Optional[dict[str, torch.Tensor]] = None, with_grads: bool = True,
                   rank: int = 0, all_reduce: Optional[Callable[[torch.Tensor], None]] = None) -> dict[str, float]:
    """`norm/param/<group>`, `norm/grad/<group>` and, given a snapshot, `norm/update/<group>`.

    Under torchrun pass this rank and an in-place sum `all_reduce` over ranks."""
    items = tracked_tensors(model)
    kinds = ["param"] + (["grad"] if with_grads else []) + (["update"] if before is not None else [])
    squares = torch.zeros(len(kinds), len(items), dtype=torch.float64)
    for j, (name, tensor, sharded) in enumerate(items):
        # Replicated tensors are counted on rank 0 only, so the all-reduce sums each once.
        if not sharded and rank != 0:
            continue
        value = _local(tensor).detach().float()
        squares[0, j] = value.pow(2).sum().double().cpu()
        row = 1
        if with_grads:
            grad = tensor.grad
            if grad is not None:
                squares[row, j] = _local(grad).float().pow(2).sum().double().cpu()
            row += 1
        if before is not None:
            squares[row, j] = (value - before[name].to(value.device)).pow(2).sum().double().cpu()
    if all_reduce is not None:
        device = next(model.parameters()).device
        moved = squares.to(device)
        all_reduce(moved)
        squares.copy_(moved.cpu())
    out: dict[str, float] = {}
    for k, kind in enumerate(kinds):
        groups: dict[str, float] = {}
        for j, (name, _, _) in enumerate(items):
            group, layer = group_of(name)
            if kind == "grad" and group == "router_bias":
                continue
            value = float(squares[k, j])
            keys = [group, "total"]
            if layer is not None:
                keys += [f"layer_{layer}", f"{group}/layer_{layer}"]
            for key in keys:
                groups[key] = groups.get(key, 0.0) + value
        for group, square in groups.items():
            out[f"norm/{kind}/{group}"] = square ** 0.5
    return out


def router_metrics(model: nn.Module, all_reduce: Optional[Callable[[torch.Tensor], None]] = None
                   ) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Scalars `moe/layer_<i>/<stat>` and vectors `moe/layer_<i>/tokens_per_expert|bias`.

    With a capacity factor, also `moe/layer_<i>/drop_fraction`: assignments dropped over all
    assignments routed in the step, summed over ranks by the in-place `all_reduce` when given (call
    it on every rank then)."""
    scalars: dict[str, float] = {}
    vectors: dict[str, list[float]] = {}
    layers = list(model.moe_layers())
    capped = [(layer, moe) for layer, moe in layers if moe.cfg.capacity_factor is not None]
    if capped:
        drops = torch.stack([moe.drop_counts() for _, moe in capped]).to(torch.float64)
        if all_reduce is not None:
            all_reduce(drops)
        for (layer, _), (dropped, routed) in zip(capped, drops.cpu().tolist()):
            scalars[f"moe/layer_{layer}/drop_fraction"] = dropped / routed if routed > 0 else 0.0
    for layer, moe in layers:
        stats = moe.router_stats()
        prefix = f"moe/layer_{layer}"
        for key in ("imbalance", "entropy", "bias_norm", "bias_min", "bias_max", "aux_loss", "z_loss"):
            scalars[f"{prefix}/{key}"] = stats[key]
        vectors[f"{prefix}/tokens_per_expert"] = stats["tokens_per_expert"]
        vectors[f"{prefix}/bias"] = stats["bias"]
    return scalars, vectors
