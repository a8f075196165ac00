"""Which launch this process belongs to, and whether it is an automatic restart of it.

An engine restarts every worker of a run when one fails: torchrun (`--max-restarts`, counted in
TORCHELASTIC_RESTART_COUNT on the node whose worker failed; the other nodes restart with the count
they had) and Ray Train (`FailureConfig(max_failures)`, glassroom/train/ray_train.py, which names
its launch in GLASSROOM_LAUNCH_ID). A restarted worker continues the run from its newest intact
checkpoint without being asked (`--resume`), and the main rank journals `restarted`, naming the
ranks that failed.

The ranks leave notes in RUN_DIR/.launch/: rank-R.json when they start (rank, pid, host, launch id)
and, when they end on an exception, the reason added to it. After a restart the main rank reads the
previous attempt's notes: a rank that ended without a word was killed (SIGKILL, a lost node); a rank
that ended on its own error failed; ranks that ended because a peer's connection closed were
bystanders. The decision is taken collectively (any rank that knows of a restart makes it one)
before RUN_DIR is checked, so every rank resumes or none does.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch.distributed as dist

from glassroom.folders import replace_file

NOTES_DIR = ".launch"
LAUNCH_ID_ENV = "GLASSROOM_LAUNCH_ID"   # set by `glassroom train --ray` in each Ray Train worker
# Words of an exception raised in a survivor because another rank went away (gloo, NCCL, the store).
PEER_GONE = ("connection closed by peer", "connection reset by peer", "broken pipe", "nccl communicator was aborted",
             "socket timeout", "recvbytes", "sendbytes", "connection refused", "timed out", "stopped by sigterm")


@dataclass
class Restart:
    """What the main rank knows of the attempt before this one."""

    attempt: int
    failed: list[dict] = field(default_factory=list)      # notes of the ranks that failed or were killed
    bystanders: list[int] = field(default_factory=list)   # ranks ended by a peer's failure

    def text(self) -> str:
        if not self.failed:
            return "the run's workers were restarted (which rank failed is not known)"
        named = ", ".join(f"rank {n['rank']} (pid {n.get('pid')} on {n.get('host')}: {n.get('ended', 'killed')})"
                          for n in self.failed)
        return f"{named} failed; every worker restarted"

    def data(self) -> dict:
        return {"attempt": self.attempt, "failed_ranks": [n["rank"] for n in self.failed],
                "failed": self.failed, "bystanders": self.bystanders}


def launch_id() -> Optional[str]:
    """This launch's name: Ray Train's (set by glassroom), else torchrun's rendezvous id."""
    return os.environ.get(LAUNCH_ID_ENV) or os.environ.get("TORCHELASTIC_RUN_ID") or None


def launched_by_ray() -> bool:
    return bool(os.environ.get(LAUNCH_ID_ENV))


def local_restart_count() -> int:
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0


def _folder(run_dir: Path) -> Optional[Path]:
    """RUN_DIR/.launch, unless it is a link (the notes never read or write outside the run)."""
    folder = Path(run_dir) / NOTES_DIR
    return None if folder.is_symlink() else folder


def _notes(run_dir: Path) -> list[dict]:
    folder = _folder(run_dir)
    out = []
    for path in sorted(folder.glob("rank-*.json")) if folder and folder.is_dir() else []:
        if path.is_symlink():
            continue
        try:
            note = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(note, dict) and isinstance(note.get("rank"), int):
            out.append(note)
    return out


def _any_rank(flag: bool) -> bool:
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    flags = [None] * dist.get_world_size()
    dist.all_gather_object(flags, bool(flag))
    return any(flags)


def detect_restart(run_dir: Path, rank: int) -> Optional[Restart]:
    """A Restart when this start is an engine's automatic restart of the launch that wrote RUN_DIR's
    notes (a collective: call it on every rank); None for a start a person made."""
    ident = launch_id()
    notes = _notes(run_dir) if rank == 0 else []
    here = local_restart_count() > 0
    if ident and launched_by_ray():  # Ray Train: the notes name this launch
        here = here or any(n.get("launch") == ident for n in _notes(run_dir))
    if not _any_rank(here):
        return None
    found = None
    if rank == 0:
        previous = [n for n in notes if n.get("launch") == ident] or notes
        failed = [n for n in previous if "ended" not in n or not _peer_gone(n["ended"])]
        bystanders = [n["rank"] for n in previous if n not in failed]
        attempt = max([int(n.get("attempt", 0)) for n in previous] or [0]) + 1
        found = Restart(attempt=attempt, failed=failed, bystanders=bystanders)
        clear_notes(run_dir)  # this attempt's ranks write theirs once RUN_DIR is prepared
    if dist.is_available() and dist.is_initialized():
        box = [found]
        dist.broadcast_object_list(box, src=0)
        found = box[0]
    return found


def _peer_gone(reason: str) -> bool:
    low = reason.lower()
    return any(words in low for words in PEER_GONE)


class RankNote:
    """This rank's note in RUN_DIR/.launch/: written at start, the reason added if it ends on an error."""

    def __init__(self, run_dir: Path, rank: int, world_size: int, attempt: int) -> None:
        self.path = Path(run_dir) / NOTES_DIR / f"rank-{rank}.json"
        self.note = {"rank": rank, "world_size": world_size, "pid": os.getpid(), "host": socket.gethostname(),
                     "launch": launch_id(), "attempt": attempt, "started": time.time()}

    def write(self) -> None:
        if _folder(self.path.parent.parent) is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(self.path, json.dumps(self.note))
        except OSError:
            pass  # the notes only name a failed rank; a run never fails for them

    def ended(self, exc: BaseException) -> None:
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        self.note["ended"] = f"{type(exc).__name__}: {reason}"
        self.write()


def clear_notes(run_dir: Path) -> None:
    """Remove the previous attempt's notes (main rank, before the ranks write theirs)."""
    folder = _folder(run_dir)
    for path in folder.glob("rank-*.json") if folder and folder.is_dir() else []:
        path.unlink(missing_ok=True)
