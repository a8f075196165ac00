"""Reading the evaluation files a recipe's decontaminate.files names (glassroom/data/decontam.py indexes them).

`file_texts(files)` gives ("file:<path>", text) for every evaluation text: a .txt file is one text, a .jsonl
or .json file every string value of its records, a folder the files inside it; `check_files(files)` runs the
same path checks without reading any text. Every mistake is a one-line GlassroomError naming
decontaminate.files[i].
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Sequence

from glassroom.errors import GlassroomError
from glassroom.numbers import NumberError, loads as json_loads

FILE_SUFFIXES = (".txt", ".jsonl", ".json")
MAX_DEPTH = 8  # folder levels file_texts descends
MAX_FILES = 10_000  # files file_texts reads from one folder
MAX_FILE_BYTES = 1 << 30  # one evaluation file at most (each is read whole)


def _strings(value, where: str) -> Iterator[str]:
    """Every string inside a JSON value, depth first, without recursion."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if v.strip():
                yield v
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))


def _read(path: Path, where: str) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise GlassroomError(f"{where}: {path} is {size / 2**30:.1f} GiB, more than an evaluation file may be "
                                 f"({MAX_FILE_BYTES / 2**30:.0f} GiB); give the evaluation sets, not a corpus")
        raw = path.read_bytes()
    except OSError as exc:
        raise GlassroomError(f"{where}: cannot read {path} ({exc.strerror or exc}); give a readable file") from None
    try:
        return raw.decode("utf-8-sig")  # a byte-order mark is not text
    except UnicodeDecodeError as exc:
        raise GlassroomError(f"{where}: {path} is not UTF-8 text (byte {exc.start}); "
                             "convert it to UTF-8 or leave it out") from None


def _texts_of_file(path: Path, where: str) -> list[str]:
    text = _read(path, where)
    if path.suffix.lower() == ".jsonl":
        out: list[str] = []
        for line_no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.extend(_strings(json_loads(line), where))
            except NumberError as exc:
                raise GlassroomError(f"{where}: {path}:{line_no}: {exc}") from None
            except (ValueError, RecursionError):
                raise GlassroomError(f"{where}: {path}:{line_no} is not a JSON value; "
                                     "fix the line (one JSON record per line)") from None
        return out
    if path.suffix.lower() == ".json":
        try:
            return list(_strings(json_loads(text), where))
        except NumberError as exc:
            raise GlassroomError(f"{where}: {path}: {exc}") from None
        except (ValueError, RecursionError):
            raise GlassroomError(f"{where}: {path} is not valid JSON; fix it or give it as .txt") from None
    return [text] if text.strip() else []


def _folder_files(root: Path, where: str) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        depth = len(Path(dirpath).relative_to(root).parts)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if depth < MAX_DEPTH else []
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.suffix.lower() in FILE_SUFFIXES and not name.startswith(".") and p.is_file():
                found.append(p)
                if len(found) > MAX_FILES:
                    raise GlassroomError(f"{where}: {root} holds more than {MAX_FILES} evaluation files; "
                                         "give a narrower folder or the files themselves")
    return sorted(found)


def check_files(files: Sequence[str]) -> None:
    """The cheap checks of file_texts (each path exists, is a file or a folder holding evaluation files),
    for a build to run before any text is read; one-line GlassroomError naming decontaminate.files[i]."""
    _plan(files)


def _plan(files: Sequence[str]) -> list[tuple[str, str, list[Path], bool]]:
    plan: list[tuple[str, str, list[Path], bool]] = []
    for i, name in enumerate(files):
        where = f"decontaminate.files[{i}]"
        path = Path(os.path.expanduser(str(name)))
        if not path.exists():
            raise GlassroomError(f"{where}: {name} does not exist; give an evaluation file or folder "
                                 "(.txt, .jsonl, .json)")
        if path.is_dir():
            found = _folder_files(path, where)
            if not found:
                raise GlassroomError(f"{where}: folder {name} has no .txt, .jsonl or .json files; "
                                     "give a folder of evaluation text")
            plan.append((where, name, found, True))
        elif path.is_file():
            plan.append((where, name, [path], False))
        else:
            raise GlassroomError(f"{where}: {name} is not a regular file or folder; give an evaluation file")
    return plan


def file_texts(files: Sequence[str]) -> Iterator[tuple[str, str]]:
    """("file:<path>", text) for every evaluation text in the recipe's decontaminate.files: a .txt file is one
    text; a .jsonl or .json file gives every string value of every record, each its own text; a folder gives
    those files inside it (sorted, hidden ones skipped, at most MAX_DEPTH levels and MAX_FILES files).
    Paths are relative to the current folder, ~ expanded. Every input is checked before the first text is
    given, so a mistake in files[2] is reported before any work: a missing, unreadable, non-UTF-8, malformed
    or empty input is a one-line GlassroomError naming decontaminate.files[i]."""
    plan = _plan(files)
    loaded: list[tuple[str, list[str]]] = []
    for where, name, paths, folder in plan:
        got = 0
        for p in paths:
            texts = _texts_of_file(p, where)
            if not texts and not folder:
                raise GlassroomError(f"{where}: {p} has no text; give a file with evaluation text or leave it out")
            got += len(texts)
            loaded.append((f"file:{p}", texts))
        if not got:
            raise GlassroomError(f"{where}: the evaluation files in folder {name} have no text; give evaluation text")
    for label, texts in loaded:
        for text in texts:
            yield label, text
