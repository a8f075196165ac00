"""Replacing a folder as one step: what dataset builds, exports and task writers use to put a folder
they wrote beside its destination into place."""

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
