"""Replacing a folder or a file as one step: what dataset builds, exports, task writers and the
published site use to put what they wrote beside its destination into place; and the ownership
manifest (OWNED) that lets a command replace, with --force or a re-publish, only files it wrote."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable, Iterable, Optional

from glassroom.errors import GlassroomError


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


# ---------------------------------------------------------------------- what a command wrote

OWNED = ".glassroom-manifest.json"   # inside an output folder: the files a command wrote there
OWNED_FORMAT = "glassroom-owned/1"
_MAX_OWNED_BYTES = 64 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _body_digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def folder_files(folder: Path) -> list[str]:
    """Every file and symbolic link below `folder` (links not followed) as sorted relative POSIX
    paths, the ownership manifest (and its temporary file, which a kill mid-write leaves) left out;
    empty folders hold nothing to lose and are not listed."""
    found = []
    for top, dirs, files in os.walk(folder, onerror=_raise):
        here = Path(top)
        for name in files + [d for d in dirs if (here / d).is_symlink()]:
            rel = (here / name).relative_to(folder).as_posix()
            if rel != OWNED and not rel.startswith(f".{OWNED}.tmp-"):   # the manifest, or one half-written
                found.append(rel)
    return sorted(found)


def _raise(exc: OSError) -> None:
    raise exc


def write_owned(folder: Path, command: str, files: Optional[Iterable[str]] = None, *, state: str = "complete",
                **extra) -> dict:
    """Write `folder`'s ownership manifest (OWNED): the command, its state ("complete" or "in
    progress"), every file it wrote (relative path -> sha256; default: every file now in `folder`)
    and a digest over all of that, so a hand-made or edited manifest is not taken for one of ours."""
    folder = Path(folder)
    names = folder_files(folder) if files is None else sorted(set(files))
    listed = {rel: file_sha256(folder / rel) for rel in names
              if (folder / rel).is_file() and not (folder / rel).is_symlink()}
    body = {"format": OWNED_FORMAT, "command": command, "state": state, "files": listed, **extra}
    replace_file(folder / OWNED, json.dumps({**body, "digest": _body_digest(body)}, indent=1) + "\n")
    for stale in folder.glob(f".{OWNED}.tmp-*"):   # one a process killed mid-write left
        if stale.is_file() and not stale.is_symlink():
            stale.unlink(missing_ok=True)
    return body


def read_owned(folder: Path, command: str) -> Optional[dict]:
    """`folder`'s ownership manifest when it is valid and `command`'s (its digest matches its body);
    None for anything else: missing, a symbolic link, not JSON, edited by hand, another command's."""
    path = Path(folder) / OWNED
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _MAX_OWNED_BYTES:
            return None
        body = json.loads(path.read_text(encoding="utf-8"))
        digest = body.pop("digest")
        files = body["files"]
        if (digest != _body_digest(body) or body.get("format") != OWNED_FORMAT or body.get("command") != command
                or not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values())):
            return None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return body


def record_owned(folder: Path, command: str, files: Iterable[str]) -> None:
    """Add `files` (written into `folder` since, by a command working on what `command` wrote, e.g.
    a dataset's atlas) to `folder`'s valid manifest; a folder without one is left as it is."""
    body = read_owned(folder, command)
    if body is None:
        return
    extra = {k: v for k, v in body.items() if k not in ("format", "command", "state", "files")}
    write_owned(folder, command, [*body["files"], *files], state=body["state"], **extra)


REFUSED = "not replacing it, even with --force: move it out or choose a new folder"


def check_owned(folder: Path, command: str, *, label: str = "--out", refused: str = REFUSED,
                adopt: Callable[[str, dict], bool] = lambda rel, body: False) -> Optional[dict]:
    """Before `command` replaces what it wrote in `folder`: None when `folder` is missing or holds no
    file (nothing to lose), else its valid manifest, after checking that every file in `folder` is
    listed there (or `adopt(rel, manifest)`) and still has the sha256 it was written with. Anything
    else is a GlassroomError in one line naming the first such file; nothing is touched here."""
    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return None
    if not folder.is_dir():
        raise GlassroomError(f"{label} {folder}: exists and is not a folder; choose another path")
    try:
        present = folder_files(folder)
        if not present and not (folder / OWNED).exists() and not (folder / OWNED).is_symlink():
            return None
        body = read_owned(folder, command)
        if body is None:
            first = present[0] if present else OWNED
            raise GlassroomError(f"{label} {folder}: holds {first}, and no valid {OWNED} of glassroom {command} lists "
                                 f"it; {refused}")
        for rel in present:
            path = folder / rel
            listed = body["files"].get(rel)
            if listed is not None and not path.is_symlink() and path.is_file() and file_sha256(path) == listed:
                continue
            if adopt(rel, body):
                continue
            if path.is_symlink():
                raise GlassroomError(f"{label} {folder}: {rel} is a symbolic link, which glassroom {command} never "
                                     f"writes; {refused}")
            if listed is None:
                raise GlassroomError(f"{label} {folder}: holds {rel}, which glassroom {command} did not write; "
                                     f"{refused}")
            raise GlassroomError(f"{label} {folder}: {rel} was changed since glassroom {command} wrote it; "
                                 f"{refused}")
    except OSError as exc:
        raise GlassroomError(f"{label} {folder}: cannot be read ({exc.strerror or exc}: {exc.filename}); "
                             "choose a folder you can read") from None
    return body

