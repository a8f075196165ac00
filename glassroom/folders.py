"""Replacing a folder or a file as one step: what dataset builds, exports, task writers and the
published site use to put what they wrote beside its destination into place."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def swap_into_place(new: Path, final: Path) -> None:
    """Rename folder `new` to `final`. An existing `final` is moved aside first and removed only once
    `new` is in place; if that rename fails, the old folder is put back and the error raised."""
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    had = final.exists() or final.is_symlink()
    if had:
        os.replace(final, old)
    try:
        os.replace(new, final)
    except OSError:
        if had and not (final.exists() or final.is_symlink()):
            os.replace(old, final)
        raise
    if had:
        if old.is_symlink():
            old.unlink()
        else:
            shutil.rmtree(old, ignore_errors=True)


def replace_file(path: Path, data: str | bytes) -> None:
    """Write file `path` completely or not at all: a temporary name beside it, then one rename (its
    folder is made first). Readers see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:   # a full disk, a folder in the way: no temporary file is left behind
        tmp.unlink(missing_ok=True)
        raise
