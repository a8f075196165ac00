"""DIR's safety rules for a build: the lock, the checks of --out and the sources, stale folders.

A build holds an exclusive lock (`.DIR.lock`, flock) for its whole run, so a second build to the
same DIR is refused; under that lock, folders left beside DIR by builds that were killed are
removed (or, for a kill mid-swap, put back); `--force` replaces only a folder whose every file is
listed, unchanged, in the ownership manifest a build wrote there (glassroom.folders.OWNED);
DIR and the source folders may not contain one another (docs/data-build.md, Safety rules).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
from pathlib import Path
from typing import TextIO

from glassroom.data import executor
from glassroom.data.recipe import Recipe
from glassroom.data.sources import check_source, source_roots
from glassroom.errors import GlassroomError
from glassroom.folders import check_owned

FORMAT = "glassroom-dataset/1"  # manifest.json's marker; `glassroom-dataset/<N>` for later versions
FORMAT_RE = re.compile(r"glassroom-dataset/[0-9]+")
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
COMMAND = "data build"   # its name in DIR's ownership manifest (glassroom.folders.OWNED)


def dataset_format(folder: str | Path) -> str | None:
    """The format marker of `folder`'s manifest.json (`glassroom-dataset/1`) when the folder is a
    glassroom dataset; None for anything else (no manifest, a symlinked one, another program's)."""
    manifest = Path(folder) / "manifest.json"
    try:
        if manifest.is_symlink() or not manifest.is_file() or manifest.stat().st_size > MAX_MANIFEST_BYTES:
            return None
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    fmt = data.get("format") if isinstance(data, dict) else None
    if isinstance(fmt, str) and FORMAT_RE.fullmatch(fmt) and isinstance(data.get("domains"), dict):
        return fmt
    return None


def require_dataset(folder: str | Path) -> Path:
    """`folder` as a Path when it is a built glassroom dataset; a one-line GlassroomError otherwise.
    For commands that read a dataset (mixture, atlas) before they touch it."""
    path = Path(folder)
    try:
        if not path.exists():
            raise GlassroomError(f"{folder}: no such folder; give a dataset built with glassroom data build")
        if not path.is_dir():
            raise GlassroomError(f"{folder}: is a file, not a dataset folder; give a folder built with glassroom data build")
        if not (path / "manifest.json").exists():
            raise GlassroomError(f"{folder}: not a built dataset (no manifest.json); run glassroom data build first")
    except OSError as exc:
        raise GlassroomError(f"{str(folder)[:80]}: cannot be read as a dataset ({exc.strerror}); give a folder built "
                             "with glassroom data build") from None
    if dataset_format(path) is None:
        raise GlassroomError(f"{folder}: manifest.json is not a glassroom dataset manifest (no \"format\": "
                             f"\"{FORMAT}\"); give a folder built with glassroom data build")
    return path


def check_parent(out: Path) -> None:
    if not out.name:
        raise GlassroomError(f"{out}: --out cannot be the root folder; choose a new folder")
    if not out.parent.exists():
        raise GlassroomError(f"{out.parent}: no such folder for --out")
    if not out.parent.is_dir():
        raise GlassroomError(f"{out.parent}: is a file, not a folder for --out")


def check_out(out: Path, force: bool) -> None:
    """DIR may be new, an empty folder, or (with --force) a dataset a build wrote: every file in it
    listed, unchanged, in its ownership manifest (glassroom.folders.OWNED; `data atlas` adds its
    file there), or in a tasks/ folder `data tasks` wrote (derived from the dataset); nothing else."""
    if out.is_symlink() and not out.exists():
        raise GlassroomError(f"{out}: is a broken symbolic link; remove it or choose another --out")
    if check_owned(out, COMMAND, label="--out", adopt=lambda rel, body: _derived_tasks(out, rel)) is not None and not force:
        raise GlassroomError(f"{out}: already exists; pass --force to replace it or choose another --out")


def _derived_tasks(out: Path, rel: str) -> bool:
    # lazy: numpy loads only when this runs
    from glassroom.data.tasks import written_here  # DIR/tasks of `data tasks`: derived from the dataset

    return rel.startswith("tasks/") and written_here(out / "tasks")


def check_sources(recipe: Recipe, out: Path) -> None:
    """Every source is there to read, and none reads from inside DIR nor DIR from inside a source
    folder (a rebuild would read its own output, and --force would delete the source)."""
    for domain, dcfg in recipe.domains.items():
        for i, src in enumerate(dcfg.sources):
            where = f"domains.{domain}.sources[{i}] ({src.label})"
            for root, recursive in source_roots(src):  # first: a source at / would take long to list
                try:
                    root = root.resolve()
                except (OSError, RuntimeError):
                    continue
                if root.is_relative_to(out):
                    raise GlassroomError(f"{where}: reads {root}, which is inside --out {out}; "
                                         "choose an --out outside the sources")
                if recursive and out.is_relative_to(root):
                    raise GlassroomError(f"{where}: --out {out} is inside the source folder {root}, which the "
                                         "source reads; choose an --out outside the sources")
            check_source(src, where)


def _read_lock_pid(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
    return "unknown"


@contextlib.contextmanager
def build_lock(out: Path):
    """Hold `.DIR.lock` (fcntl.flock, exclusive) beside DIR for the whole build; a GlassroomError
    naming the holder's pid when another build holds it. The file is removed on release; a holder
    re-checks after locking that the path still names the file it locked, so removal cannot let
    two builds in."""
    path = out.parent / f".{out.name}.lock"
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise GlassroomError(f"{path}: cannot create or open the build lock ({exc.strerror}); choose an --out "
                                 f"in a folder you can write, or remove {path.name} if it is not a lock file") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_lock_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise GlassroomError(f"another build (pid {holder}) is writing {out}; wait for it to finish "
                                     "or choose another --out") from None
            raise GlassroomError(f"{path}: cannot lock ({exc.strerror}); choose an --out on a local disk") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed it on release: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        executor._LOCK_FD[0] = fd
        yield
    finally:
        executor._LOCK_FD[0] = None
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def clear_stale(out: Path, log: TextIO) -> None:
    """Under the lock, remove what killed builds left beside DIR: `.DIR.building-<pid>` (a build
    killed before it finished) and `.DIR.old-<pid>` (a previous dataset whose removal was cut
    short). A build killed between its two renames leaves DIR missing and `.DIR.old-<pid>` holding
    the previous dataset: that one is put back as DIR. No live build can own these folders: every
    build to DIR holds the lock we now hold."""
    pattern = re.compile(re.escape(f".{out.name}.") + r"(building|old)-([0-9]+)")
    try:
        entries = sorted(out.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m or int(m[2]) == os.getpid() or entry.is_symlink() or not entry.is_dir():
            continue
        if m[1] == "old" and not out.exists() and not out.is_symlink():
            os.rename(entry, out)   # a folder put back after a killed build (not folders.replace_file)
            print(f"note: put back {out}: a build (pid {m[2]}) was killed while replacing it", file=log)
            continue
        shutil.rmtree(entry, ignore_errors=True)
        print(f"note: removed {entry.name}, left by a build (pid {m[2]}) that did not finish", file=log)

