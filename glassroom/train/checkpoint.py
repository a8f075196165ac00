"""Atomic checkpoints with retention and exact resume.

A checkpoint is a folder RUN_DIR/checkpoints/step_NNNNNNN holding the model (router biases
included) and optimizer state written with torch.distributed.checkpoint (one file per rank under
torchrun, so any world size can load it), plus trainer.json: the step, RNG states, counters and the
resolved config that `--resume` needs to continue exactly. It is written to a temporary folder and
renamed into place, so a checkpoint is complete or absent. The newest `keep_last` are kept, and
every `keep_every`-th step's for good.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from glassroom.errors import GlassroomError

_NAME = re.compile(r"^step_(\d{7,})$")


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first."""
    folder = checkpoint_dir(run_dir)
    if not folder.exists():
        return []
    found = []
    for path in folder.iterdir():
        match = _NAME.match(path.name)
        if match and (path / "trainer.json").exists():
            found.append((int(match.group(1)), path))
    return sorted(found)


def _optimizers(optimizer) -> list[torch.optim.Optimizer]:
    return list(getattr(optimizer, "optimizers", [optimizer]))


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state().tolist()}
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def save_checkpoint(run_dir: Path, step: int, model, optimizer, trainer_state: dict[str, Any],
                    keep_last: int, keep_every: Optional[int]) -> Path:
    """Write the checkpoint of the state after `step` optimizer steps; every rank calls this."""
    folder = checkpoint_dir(run_dir)
    final = folder / f"step_{step:07d}"
    tmp = folder / f".tmp-step_{step:07d}"
    if _rank() == 0:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    _barrier()
    model_sd, optim_sd = get_state_dict(model, _optimizers(optimizer))
    with warnings.catch_warnings():  # one process without a process group is intended here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp))
    _barrier()
    if _rank() == 0:
        state = {**trainer_state, "step": step, "rng": rng_state()}
        (tmp / "trainer.json").write_text(json.dumps(state))
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(folder)
        _apply_retention(run_dir, keep_last, keep_every)
    _barrier()
    return final


def _fsync_dir(path: Path) -> None:
    for file in path.iterdir():
        if file.is_file():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _apply_retention(run_dir: Path, keep_last: int, keep_every: Optional[int]) -> None:
    checkpoints = list_checkpoints(run_dir)
    newest = {step for step, _ in checkpoints[-keep_last:]}
    for step, path in checkpoints:
        permanent = keep_every is not None and step % keep_every == 0
        if step not in newest and not permanent:
            shutil.rmtree(path, ignore_errors=True)
    for leftover in checkpoint_dir(run_dir).glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def load_checkpoint(path: Path, model, optimizer) -> dict[str, Any]:
    """Load model and optimizer state in place; returns trainer.json (RNG restored)."""
    try:
        state = json.loads((path / "trainer.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GlassroomError(f"{path}: unreadable checkpoint ({exc}); delete it to resume from an older one") from None
    model_sd, optim_sd = get_state_dict(model, _optimizers(optimizer))
    target = {"model": model_sd, "optim": optim_sd}
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(target, checkpoint_id=str(path))
    except (RuntimeError, ValueError, KeyError, pickle.UnpicklingError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GlassroomError(f"{path}: checkpoint does not fit this model ({first[:200]})") from None
    set_state_dict(model, _optimizers(optimizer), model_state_dict=target["model"], optim_state_dict=target["optim"])
    set_rng_state(state["rng"])
    return state
