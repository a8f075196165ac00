"""Atomic, checksummed checkpoints with retention, verification on resume, and exact resume.

A checkpoint is a folder RUN_DIR/checkpoints/step_NNNNNNN holding the model (router biases
included) and optimizer state written with torch.distributed.checkpoint (one file per rank under
torchrun, so any world size can load it), trainer.json (the step, RNG states, counters and the
resolved config that `--resume` needs to continue exactly) and manifest.json (the size and SHA-256
of every other file, .metadata and trainer.json included). It is written to a temporary folder,
the manifest last, and renamed into place, so a checkpoint is complete or absent.

`--resume` verifies the newest checkpoint against its manifest and falls back to the newest intact
one (`choose_for_resume`); damaged ones are moved to checkpoints/damaged/, never deleted. A
checkpoint written before manifests existed is checked as far as its own index allows (trainer.json
readable, .metadata readable, every data file as long as the index says); flipped bytes inside it
cannot be seen. Retention keeps the newest `keep_last` checkpoints that look intact (manifest sizes
match) and every `keep_every`-th step's for good; it never deletes one in favour of damaged ones.
It runs after every save and on every resume, over all checkpoints: one a kill between a save and
its pruning left past `keep_last` is removed by the next save or resume.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from glassroom.errors import GlassroomError
from glassroom.folders import file_sha256
from glassroom.observe.run_folder import checkpoints_path

_NAME = re.compile(r"^step_(\d{7,})$")
MANIFEST = "manifest.json"
TRAINER_FILE = "trainer.json"
METADATA_FILE = ".metadata"
DAMAGED_DIR = "damaged"  # under checkpoints/: damaged checkpoints set aside by a resume


def checkpoint_dir(run_dir: Path) -> Path:
    return checkpoints_path(run_dir)


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Every checkpoint folder (renamed into place, so complete when written), oldest first.
    Whether one is still intact is `verify_checkpoint`'s question."""
    folder = checkpoint_dir(run_dir)
    if folder.exists() and not folder.is_dir():
        raise GlassroomError(f"{folder}: is a file, not the checkpoints folder; move it away")
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def _optimizers(optimizer) -> list[torch.optim.Optimizer]:
    return list(getattr(optimizer, "optimizers", [optimizer]))


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _broadcast(value: Any) -> Any:
    """Rank 0's `value` on every rank (the value itself for one process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value if _rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state().tolist()}
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


# ---------------------------------------------------------------------- writing


def _as_never_stepped(optim_sd: dict) -> None:
    """DCP fills the state of an optimizer that never stepped by stepping it once with zero gradients
    and lr 0 (state_dict._init_optim_state): AdamW's step counters then read 1 and its first real
    update would be bias-corrected as its second. A checkpoint of step 0 (train.steps: 0) records
    them as 0, so training on from it is exactly training from scratch."""
    for entry in (optim_sd.get("state") or {}).values():
        if isinstance(entry, dict) and "step" in entry:
            entry["step"] = torch.zeros_like(entry["step"]) if torch.is_tensor(entry["step"]) else 0


def save_checkpoint(run_dir: Path, step: int, model, optimizer, trainer_state: dict[str, Any],
                    keep_last: int, keep_every: Optional[int],
                    on_visible: Optional[Callable[[Path], None]] = None) -> Path:
    """Write the checkpoint of the state after `step` optimizer steps; every rank calls this.
    `on_visible(path)` runs on rank 0 right after the rename, before retention (fault drills)."""
    folder = checkpoint_dir(run_dir)
    final = folder / f"step_{step:07d}"
    tmp = folder / f".tmp-step_{step:07d}"
    if _rank() == 0:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    _barrier()
    model_sd, optim_sd = get_state_dict(model, _optimizers(optimizer))
    if step == 0:
        _as_never_stepped(optim_sd)
    with warnings.catch_warnings():  # one process without a process group is intended here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp))
    _barrier()
    if _rank() == 0:
        state = {**trainer_state, "step": step, "rng": rng_state()}
        (tmp / TRAINER_FILE).write_text(json.dumps(state))
        write_manifest(tmp)
        _fsync_dir(tmp)
        if final.exists() or final.is_symlink():  # not expected: resume sets damaged ones aside
            set_aside(run_dir, final)
        os.replace(tmp, final)   # a folder, fsynced before and after (not folders.replace_file: one file)
        _fsync_dir(folder)
        if on_visible is not None:
            on_visible(final)
        apply_retention(run_dir, keep_last, keep_every)
    _barrier()
    return final


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: Path) -> dict:
    """manifest.json: {"format": 1, "files": {relative path: {"bytes", "sha256"}}} of every file."""
    files = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
             for p in _files(folder)}
    manifest = {"format": 1, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


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


def _looks_intact(path: Path) -> bool:
    """The cheap check retention uses: every file the manifest lists is there with its size (a
    checkpoint without a manifest, from an older version, needs its trainer.json)."""
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
        return all((path / name).stat().st_size == entry["bytes"] for name, entry in files.items())
    except FileNotFoundError:
        return not (path / MANIFEST).exists() and (path / TRAINER_FILE).is_file()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def apply_retention(run_dir: Path, keep_last: int, keep_every: Optional[int]) -> None:
    """Delete intact-looking checkpoints beyond the newest `keep_last` intact ones (keep_every's
    steps stay); a damaged one is never counted, so it can never push out the last intact one.
    What should exist is computed from the whole list, not from the one just superseded, so every
    save and every resume also removes what a run killed before its pruning left behind."""
    intact = [(step, path) for step, path in list_checkpoints(run_dir) if _looks_intact(path)]
    newest = {step for step, _ in intact[-keep_last:]} if keep_last > 0 else set()
    for step, path in intact:
        permanent = keep_every is not None and step % keep_every == 0
        if step not in newest and not permanent:
            shutil.rmtree(path, ignore_errors=True)
    for leftover in checkpoint_dir(run_dir).glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)


# ---------------------------------------------------------------------- verifying


def _shown(path: Path) -> str:
    """checkpoints/step_NNNNNNN, the way messages name a checkpoint."""
    return f"{path.parent.name}/{path.name}"


def _check_trainer_json(path: Path, step: int) -> Optional[str]:
    where = f"{_shown(path)}/{TRAINER_FILE}"
    try:
        state = json.loads((path / TRAINER_FILE).read_text())
    except FileNotFoundError:
        return f"{where}: missing"
    except (OSError, UnicodeDecodeError) as exc:
        return f"{where}: unreadable ({type(exc).__name__})"
    except json.JSONDecodeError:
        return f"{where}: not JSON"
    if not isinstance(state, dict) or not all(k in state for k in ("step", "rng", "train_state")):
        return f"{where}: lacks step, rng or train_state"
    if state["step"] != step:
        return f"{where}: says step {state['step']}, the folder step {step}"
    return None


def _verify_with_manifest(path: Path) -> Optional[str]:
    shown = _shown(path)
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
        if not isinstance(files, dict) or not all(
                isinstance(e, dict) and isinstance(e.get("bytes"), int) and isinstance(e.get("sha256"), str)
                for e in files.values()):
            raise ValueError
        if any(Path(name).is_absolute() or ".." in Path(name).parts for name in files):
            raise ValueError
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return f"{shown}/{MANIFEST}: not a readable checksum manifest"
    for required in (TRAINER_FILE, METADATA_FILE):
        if required not in files:
            return f"{shown}/{MANIFEST}: does not list {required}"
    for name, entry in sorted(files.items()):
        file = path / name
        if not file.is_file():
            return f"{shown}/{name}: missing"
        size = file.stat().st_size
        if size != entry["bytes"]:
            what = "truncated" if size < entry["bytes"] else "grown"
            return f"{shown}/{name}: {what} ({size} bytes, the manifest says {entry['bytes']})"
        try:
            digest = file_sha256(file)
        except OSError as exc:
            return f"{shown}/{name}: unreadable ({type(exc).__name__})"
        if digest != entry["sha256"]:
            return f"{shown}/{name}: checksum mismatch"
    return None


def _verify_without_manifest(path: Path) -> Optional[str]:
    """An older checkpoint: .metadata must load and every data file be as long as it says."""
    shown = _shown(path)
    if not (path / METADATA_FILE).is_file():
        return f"{shown}/{METADATA_FILE}: missing"
    try:
        metadata = dcp.FileSystemReader(str(path)).read_metadata()
        needed: dict[str, int] = {}
        for info in metadata.storage_data.values():
            needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    except Exception as exc:  # noqa: BLE001 - a damaged pickle raises anything
        return f"{shown}/{METADATA_FILE}: unreadable ({type(exc).__name__})"
    for name, end in sorted(needed.items()):
        file = path / name
        if not file.is_file():
            return f"{shown}/{name}: missing"
        if file.stat().st_size < end:
            return f"{shown}/{name}: truncated ({file.stat().st_size} bytes, .metadata needs {end})"
    return None


def verify_checkpoint(path: Path, step: int) -> Optional[str]:
    """None when the checkpoint is intact, else one line: 'checkpoints/step_N/FILE: what is wrong'."""
    path = Path(path)
    if not path.is_dir():
        return f"{_shown(path)}: not a folder"
    if (path / MANIFEST).exists():
        problem = _verify_with_manifest(path)
    else:
        problem = _verify_without_manifest(path)
    return problem or _check_trainer_json(path, step)


@dataclass
class ResumeChoice:
    """What `--resume` loads: the newest intact checkpoint (None: none), and the newer damaged
    ones as (step, folder, problem)."""

    step: Optional[int] = None
    path: Optional[Path] = None
    damaged: list[tuple[int, Path, str]] = field(default_factory=list)
    verified: bool = True  # False for a checkpoint without manifest (checked by its index only)


def choose_for_resume(run_dir: Path) -> ResumeChoice:
    """Verify checkpoints newest first until one is intact. Rank 0 reads the files and every rank
    receives its answer, so all ranks load the same checkpoint."""
    choice: Any = None
    if _rank() == 0:
        try:
            choice = ResumeChoice()
            for step, path in reversed(list_checkpoints(run_dir)):
                problem = verify_checkpoint(path, step)
                if problem is None:
                    choice.step, choice.path = step, path
                    choice.verified = (path / MANIFEST).exists()
                    break
                choice.damaged.append((step, path, problem))
        except GlassroomError as exc:  # raised on every rank, none left waiting
            choice = exc
    choice = _broadcast(choice)
    if isinstance(choice, GlassroomError):
        raise choice
    return choice


def set_aside(run_dir: Path, path: Path) -> Path:
    """Move a damaged checkpoint to checkpoints/damaged/ (kept for inspection; delete at will)."""
    target_dir = checkpoint_dir(run_dir) / DAMAGED_DIR
    target_dir.mkdir(parents=True, exist_ok=True)
    target, n = target_dir / path.name, 1
    while target.exists():
        n += 1
        target = target_dir / f"{path.name}.{n}"
    os.replace(path, target)   # a move of a folder that exists, not a write (not folders.replace_file)
    return target


# ---------------------------------------------------------------------- loading


def load_checkpoint(path: Path, model, optimizer) -> dict[str, Any]:
    """Load model and optimizer state in place; returns trainer.json (RNG restored)."""
    try:
        state = json.loads((path / TRAINER_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GlassroomError(f"{_shown(path)}: unreadable checkpoint ({exc}); move it away to resume from an older one") from None
    model_sd, optim_sd = get_state_dict(model, _optimizers(optimizer))
    target = {"model": model_sd, "optim": optim_sd}
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(target, checkpoint_id=str(path))
    except (RuntimeError, ValueError, KeyError, OSError, EOFError, pickle.UnpicklingError, CheckpointException) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GlassroomError(f"{_shown(path)}: checkpoint does not fit this model or cannot be read ({first[:200]})") from None
    set_state_dict(model, _optimizers(optimizer), model_state_dict=target["model"], optim_state_dict=target["optim"])
    set_rng_state(state["rng"])
    return state
