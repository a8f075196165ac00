"""torchrun support: process-group setup, FSDP2 / DDP wrapping, and data-parallel reductions.

`torchrun --nproc_per_node=N -m glassroom train ...` sets RANK/WORLD_SIZE/LOCAL_RANK; `setup`
initialises gloo on CPU or NCCL on GPU. The model file knows nothing of this: `parallelize` applies
`fully_shard` to every block and then the root (FSDP2), or wraps the model in DDP. With expert
parallelism (`ep` > 1) it first spreads the experts over a ("dp", "ep") mesh and shards them over
"dp" only (glassroom/train/expert_parallel.py), then shards the rest over every rank.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from glassroom.model.accounting import expert_shard_dim
from glassroom.train.expert_parallel import clip_grad_norm_, expert_modules, shard_experts


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup(device_kind: str) -> DistInfo:
    """Initialise the process group when launched by torchrun with more than one process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return DistInfo(rank=rank, world_size=world, local_rank=local)


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _expert_placement(shards: int):
    """FSDP2 shard_placement_fn: routed-expert tensors (the only 3-D parameters) along
    expert_shard_dim, everything else along dim 0 (FSDP2's default)."""
    from torch.distributed.tensor import Shard  # lazy: torch.distributed.tensor costs seconds; FSDP runs only

    def placement(param: nn.Parameter):
        if param.ndim != 3:
            return None
        local = param.to_local().shape if hasattr(param, "to_local") else param.shape
        return Shard(expert_shard_dim(tuple(local), shards))

    return placement


def parallelize(model: nn.Module, info: DistInfo, strategy: str, device: torch.device,
                bf16_params: bool, ep: int = 1) -> nn.Module:
    """FSDP2 (`fully_shard` per block, then the root) or DDP; the model itself when one process.
    `ep` > 1 (FSDP2 only): experts spread over expert-parallel groups of `ep` consecutive ranks."""
    if not info.enabled:
        return model
    if strategy == "ddp":
        import warnings

        from torch.nn.parallel import DistributedDataParallel  # lazy: DDP runs only

        warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
        # Buffers are not broadcast: router biases move identically on every rank from
        # all-reduced counts, and per-step expert counts are rank-local until reduced.
        return DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False
        )
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # lazy: costs seconds; FSDP runs only

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16_params else MixedPrecisionPolicy()
    if ep > 1:
        from torch.distributed.device_mesh import init_device_mesh  # lazy: expert-parallel runs only

        mesh = init_device_mesh(device.type, (info.world_size // ep, ep), mesh_dim_names=("dp", "ep"))
        shard_experts(model, mesh)
        for experts in expert_modules(model):
            fully_shard(experts, mesh=mesh["dp"], mp_policy=policy,
                        shard_placement_fn=_expert_placement(info.world_size // ep))
            # Each expert's gradient arrives summed over its expert group's tokens (the all-to-all's
            # backward); summed over "dp" too, it becomes the global mean divided by all ranks.
            experts.set_gradient_divide_factor(float(info.world_size))
            if device.type != "cuda" and info.world_size > ep:  # gloo has no PREMUL_SUM: divide after a
                # plain sum (not with dp 1, where FSDP2 divides the copied gradient already and would twice)
                experts.set_force_sum_reduction_for_comms(True)
    for block in model.blocks:  # with ep > 1 the experts are already sharded: left as they are
        fully_shard(block, mp_policy=policy, shard_placement_fn=_expert_placement(info.world_size))
    fully_shard(model, mp_policy=policy)
    return model


def clip_grad_norm(model: nn.Module, max_norm: float, info: DistInfo, ep: int = 1) -> float:
    """Clip the gradients to a global norm of `max_norm`; returns the norm before clipping. With
    expert parallelism the norm is summed from every rank's local shards (expert_parallel.py)."""
    if info.enabled and ep > 1:
        return float(clip_grad_norm_(list(model.parameters()), max_norm, lambda t: all_reduce_sum(t, info)))
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def unwrap(model: nn.Module) -> nn.Module:
    """The Transformer inside a DDP wrapper (FSDP2 keeps the module itself)."""
    return getattr(model, "module", model)


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum across ranks in place (a no-op for one process)."""
    if info.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def barrier(info: DistInfo) -> None:
    """Wait for every rank (a no-op for one process)."""
    if info.enabled:
        dist.barrier()


def set_gradient_sync(model: nn.Module, sync: bool) -> None:
    """Skip the gradient reduction on all but the last micro-batch of a step."""
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(sync)
    elif hasattr(model, "require_backward_grad_sync"):  # DDP
        model.require_backward_grad_sync = sync
