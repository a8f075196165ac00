"""Activation checkpointing: trade recomputation in backward for activation memory, from outside the model.

`train.activation_checkpointing` chooses what a block keeps for backward:

- `none`: everything autograd saves (the default; fastest, most memory).
- `full`: only the block's inputs; the whole block runs again in backward (about one more forward).
- `selective`: op-level (torch.utils.checkpoint.create_selective_checkpoint_contexts): the outputs
  of matmuls (mm, addmm, bmm, grouped_mm) and of attention (SDPA) are kept, everything else (norms,
  RoPE, SwiGLU's activation, routing, gathers) is recomputed: most of full's saving on the cheap
  element-wise tensors, little of its recompute cost. Only ops run with gradient are kept: inside a
  custom autograd Function (experts.py's fused CPU experts) everything is recomputed, since such a
  forward may change its matmuls' outputs in place.

`train.activation_checkpointing_every: k` applies the mode to blocks 0, k, 2k, ... (default 1:
every block); the others keep everything.

`apply(model, mode, every)` replaces each chosen block's `forward` (the instance's, not the class's)
with one that runs the original through torch.utils.checkpoint (use_reentrant=False). Parameter
names and the state dict are unchanged, so checkpoints, norms and exports see the same model. Apply
it before FSDP2's `fully_shard` (which wraps `__call__` and unshards for the recompute in backward)
and before `compile`. The recompute runs inside glassroom.model.moe.recomputing(), so MoE layers do
not count their tokens, drops and statistics twice.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from glassroom.errors import GlassroomError
from glassroom.model.moe import recomputing

MODES = ("none", "full", "selective")

_aten = torch.ops.aten
# Outputs kept by `selective`: the matmuls and attention, the costly ops to recompute.
SAVED_OPS = frozenset({
    _aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default, _aten._grouped_mm.default,
    _aten._scaled_dot_product_flash_attention.default, _aten._scaled_dot_product_efficient_attention.default,
    _aten._scaled_dot_product_cudnn_attention.default, _aten._scaled_dot_product_flash_attention_for_cpu.default,
})


# Profiler annotations are not computation: FSDP2 adds some only in the recompute (a separately
# sharded module inside a block, as expert parallelism's experts, runs its root_pre_forward again in
# backward), which would shift selective's per-op count and fail "... not found in storage".
for _name, _overload in (("_record_function_enter_new", "default"), ("_record_function_exit", "_RecordFunction")):
    _op = getattr(getattr(torch.ops.profiler, _name, None), _overload, None)
    if _op is not None and hasattr(torch.utils.checkpoint, "SAC_IGNORED_OPS"):
        torch.utils.checkpoint.SAC_IGNORED_OPS.add(_op)


def _policy(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    # Ops run without gradient (inside a custom autograd Function such as experts.py's fused experts,
    # or under no_grad) are not autograd's to keep, and their outputs may be changed in place: recompute.
    if op in SAVED_OPS and torch.is_grad_enabled():
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def _full_contexts():
    return contextlib.nullcontext(), recomputing()


@contextlib.contextmanager
def _both(first, second):
    with first, second:
        yield


# Set by saved_activation_bytes: the outputs selective checkpointing keeps, one dict per block run.
_kept_by_selective: list[dict] | None = None


def _selective_contexts():
    forward, recompute = create_selective_checkpoint_contexts(_policy)
    if _kept_by_selective is not None:
        _kept_by_selective.append(getattr(forward, "storage", {}))
    return forward, _both(recompute, recomputing())


def chosen_blocks(n_blocks: int, every: int) -> list[int]:
    """Indices of the blocks checkpointed with `every`: 0, every, 2 * every, ..."""
    return list(range(0, n_blocks, every))


def apply(model: nn.Module, mode: str, every: int = 1) -> list[int]:
    """Checkpoint the chosen blocks of `model.blocks` in `mode`; returns their indices ([] for none)."""
    if mode not in MODES:
        raise GlassroomError(f"train.activation_checkpointing: {mode!r} is not one of {', '.join(MODES)}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise GlassroomError(f"train.activation_checkpointing_every: must be a whole number of 1 or more, got {every!r}")
    if mode == "none":
        return []
    contexts = _full_contexts if mode == "full" else _selective_contexts
    chosen = chosen_blocks(len(model.blocks), every)
    for index in chosen:
        block = model.blocks[index]
        if getattr(block, "_activation_checkpointing", None) is not None:
            raise GlassroomError(f"block {index}: activation checkpointing is applied already")
        block.forward = _checkpointed(block.forward, contexts)
        block._activation_checkpointing = mode
    return chosen


def _checkpointed(forward: Callable, contexts: Callable) -> Callable:
    @functools.wraps(forward)
    def run(*args, **kwargs):
        if not torch.is_grad_enabled():  # evaluation, sampling: nothing is saved anyway
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, context_fn=contexts, **kwargs)

    return run


def saved_activation_bytes(model: nn.Module, run: Callable[[], torch.Tensor]) -> int:
    """Bytes autograd keeps for backward while `run()` computes a loss: the unique storages packed by
    saved-tensor hooks, parameters left out (they are held anyway). With checkpointing these are
    the checkpointed blocks' inputs plus what the other parts save and the op outputs `selective`
    keeps (read from its cache before backward)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params and storage.device.type != "meta":
            seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
        return tensor

    global _kept_by_selective
    _kept_by_selective = []
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = run()
        kept = _kept_by_selective
    finally:
        _kept_by_selective = None
    for outputs in kept:  # selective's cached op outputs are held by its dispatch mode, not by hooks
        for entries in outputs.values():
            for entry in torch.utils._pytree.tree_leaves(entries):
                value = getattr(entry, "val", entry)
                if isinstance(value, torch.Tensor):
                    pack(value)
    loss.backward()
    return sum(seen.values())
