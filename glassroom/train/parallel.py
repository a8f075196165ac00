"""torchrun support: process-group setup, FSDP2 / DDP wrapping, and data-parallel reductions.

`torchrun --nproc_per_node=N -m glassroom train ...` sets RANK/WORLD_SIZE/LOCAL_RANK; `setup`
initialises gloo on CPU or NCCL on GPU. The model file knows nothing of this: `parallelize` applies
`fully_shard` to every block and then the root (FSDP2), or wraps the model in DDP.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


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


def parallelize(model: nn.Module, info: DistInfo, strategy: str, device: torch.device,
                bf16_params: bool) -> nn.Module:
    """FSDP2 (`fully_shard` per block, then the root) or DDP; the model itself when one process."""
    if not info.enabled:
        return model
    if strategy == "ddp":
        import warnings

        from torch.nn.parallel import DistributedDataParallel

        warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
        # Buffers are not broadcast: router biases move identically on every rank from
        # all-reduced counts, and per-step expert counts are rank-local until reduced.
        return DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False
        )
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16_params else MixedPrecisionPolicy()
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


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
