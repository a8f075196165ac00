"""Questions from the man pages of sections 1 and 8: what a command does (its NAME line), what an
option does and which option does a thing (its item in the page's option lists).

Pages are read from their roff source (glassroom.data.chatset.roff), not rendered. A family of
pages (the words before the first -, _ or .: `gcloud_compute_...`, `git-commit`) gives at most
FAMILY_PAGES pages, chosen by the seed, so 16,000 pages of one tool do not drown the others; a page
gives at most OPTIONS_PER_PAGE options. perl-doc's chapters (perlfunc, perlgpl) are not commands
and are left out. Each page's licence is its Debian package's, found in dpkg's
file lists; a page no package owns is skipped and counted.
"""

from __future__ import annotations

import gzip
import re
from collections import Counter
from pathlib import Path

from glassroom.data.chatset.common import Fact, Kind, squash, unit
from glassroom.data.chatset.roff import paragraphs

SECTIONS = ("man1", "man8")
FAMILY_PAGES = 12
OPTIONS_PER_PAGE = 6
DOC_PACKAGES = {"perl-doc"}  # section-1 pages that are chapters of a manual (perlgpl, perlfunc), not commands
MAX_BODY = 320  # characters of an answer: longer option texts are cut at a sentence end, or skipped

_SYSTEMS = (
    "You are a helpful assistant who knows Unix commands and their manual pages.",
    "Answer questions about Linux command-line tools briefly and accurately.",
    "You are a concise assistant for people working in a shell.",
)
PURPOSE = Kind(
    "purpose",
    ("What does the `{cmd}` command do?", "What is `{cmd}` for?", "What is `{cmd}` used for?",
     "In a Linux shell, what does `{cmd}` do?", "Can you tell me what `{cmd}` does?"),
    ("The manual page of `{cmd}` describes it as: {body}.", "In one line, from its manual page: `{cmd}` - {body}.",
     "`{cmd}` ({section}): {body}. That is how its manual page sums it up."),
    _SYSTEMS,
)
OPTION = Kind(
    "option",
    ("What does `{cmd} {flag}` do?", "What does the `{flag}` option of `{cmd}` do?", "In `{cmd}`, what is `{flag}` for?",
     "What happens if I pass `{flag}` to `{cmd}`?"),
    ("In `{cmd}`, `{tag}` means: {body}.", "The manual page of `{cmd}` says of `{tag}`: {body}.",
     "`{tag}`: {body}. (from the manual page of `{cmd}`)"),
    _SYSTEMS,
)
WHICH = Kind(
    "which_option",
    ('Which option of `{cmd}` does this: "{desc}"?', 'How do I tell `{cmd}` to do this: "{desc}"?',
     'What is the `{cmd}` option for "{desc}"?'),
    ("That is `{body}`.", "Use `{body}`.", "The option is `{body}`, as the manual page of `{cmd}` says."),
    _SYSTEMS,
)
_BORING = {"-h", "--help", "-V", "--version", "-?", "--usage"}  # the same text in every page
_FLAG = re.compile(r"^(-{1,2}[A-Za-z0-9?#@][\w.#@+-]*)")


def page_files(man_dir: Path) -> list[Path]:
    return sorted(p for s in SECTIONS for p in (man_dir / s).glob("*")
                  if p.is_file() and not p.is_symlink())


def packages(dpkg_info: Path) -> dict[str, str]:
    """Installed file -> the Debian package that owns it, for the man pages of SECTIONS."""
    owners = {}
    for listing in sorted(dpkg_info.glob("*.list")):
        package = listing.name[: -len(".list")].split(":")[0]
        try:
            text = listing.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if "/share/man/man" in line:
                owners.setdefault(line.strip(), package)
    return owners


def _stem(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return name.rsplit(".", 1)[0] if "." in name else name


def _pick_pages(files: list[Path], seed: int) -> list[Path]:
    by_family: dict[str, list[Path]] = {}
    for path in files:
        by_family.setdefault(re.split(r"[-_.]", _stem(path))[0].lower(), []).append(path)
    picked = []
    for family in sorted(by_family):
        pages = sorted(by_family[family], key=lambda p: unit(seed, "page", p.name))
        picked.extend(pages[:FAMILY_PAGES])
    return sorted(picked)


def _short(text: str) -> str | None:
    """The text cut to MAX_BODY at a sentence end, without its final full stop; None if it cannot be."""
    text = squash(text)
    if len(text) > MAX_BODY:
        ends = [m.end() - 1 for m in re.finditer(r"[.;] ", text[: MAX_BODY + 1])]
        if not ends:
            return None
        text = text[: ends[-1]]
    return text.rstrip(" .;:,")


def facts(seed: int, man_dir: Path, dpkg_info: Path, skipped: Counter) -> list[Fact]:
    owners = packages(dpkg_info)
    out: list[Fact] = []
    seen: set[str] = set()
    for path in _pick_pages(page_files(man_dir), seed):
        package = owners.get(str(path))
        if package is None:
            skipped["man: page owned by no Debian package (licence unknown)"] += 1
            continue
        if package in DOC_PACKAGES:
            skipped[f"man: documentation, not a command ({package})"] += 1
            continue
        try:
            data = path.read_bytes()
            source = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8", errors="replace")
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            skipped[f"man: unreadable page ({type(exc).__name__})"] += 1
            continue
        if source.startswith(".so "):
            continue  # a page that only points at another
        page = paragraphs(source)
        name_line = next((p.body for p in page if p.section == "NAME" and p.body), "")
        names, sep, desc = _split_name(name_line)
        cmd = names.split(",")[0].strip()
        desc = _short(desc) if sep else None
        if not cmd or not desc or len(desc.split()) < 2 or "`" in cmd or cmd in seen:
            skipped["man: no usable NAME line (or a command seen in another page)"] += 1
            continue
        seen.add(cmd)
        licence = f"{package}: see /usr/share/doc/{package}/copyright"
        section = path.parent.name[3:]
        base = dict(cmd=cmd, section=f"section {section}")
        subject = f"man:{cmd}"
        out.append(Fact("man", PURPOSE, subject, cmd, desc, licence, base))
        options, flags = [], set()
        for p in page:
            m = _FLAG.match(p.tag)
            body = _short(p.body) if m and p.body else None
            if not body or len(body.split()) < 3 or len(p.tag) > 60 or m.group(1) in flags or "`" in p.tag:
                continue
            flags.add(m.group(1))
            if m.group(1) in _BORING:
                continue
            options.append((m.group(1), p.tag, body))
        options.sort(key=lambda o: unit(seed, "option", cmd, o[0]))
        for flag, tag, body in options[:OPTIONS_PER_PAGE]:
            fields = dict(base, flag=flag, tag=tag)
            if len(body) > 120 or unit(seed, "which?", cmd, flag) < 0.7:
                out.append(Fact("man", OPTION, subject, f"{cmd} {flag}", body, licence, fields))
            else:
                out.append(Fact("man", WHICH, subject, f"{cmd} {flag}", tag, licence, dict(fields, desc=body)))
    return out


def _split_name(line: str) -> tuple[str, str, str]:
    """`ls - list directory contents` -> ("ls", "-", "list directory contents")."""
    m = re.search(r"\s+[-\u2014\u2013]+\s+", line)
    if not m:
        return line, "", ""
    return line[: m.start()], m.group(0).strip(), line[m.end():]
