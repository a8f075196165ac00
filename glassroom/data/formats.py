"""Turning file formats into plain text: HTML, Project Gutenberg wrappers, tagged corpora, packing.

Small pure functions used by the extractors in sources.py; each keeps the words of the original
and drops only markup (HTML tags, Gutenberg licence boilerplate, part-of-speech tags).
"""

from __future__ import annotations

import html
import re
from typing import Iterable, Iterator

_DROP = re.compile(r"<(script|style|head|nav|noscript)\b.*?</\1\s*>|<!--.*?-->", re.S | re.I)
_PRE = re.compile(r"(<pre\b[^>]*>.*?</pre\s*>)", re.S | re.I)
_BLOCK = re.compile(
    r"</?(?:p|div|li|ul|ol|tr|table|h[1-6]|section|article|blockquote|dt|dd|dl|title|header|footer|hr|pre)\b[^>]*>", re.I
)
_BREAK = re.compile(r"<br\b[^>]*>", re.I)
_CELL = re.compile(r"</?(?:td|th)\b[^>]*>", re.I)
_TAG = re.compile(r"<[^>]*>")


def html_to_text(page: str) -> str:
    """Visible text of an HTML page: scripts, styles, head and navigation dropped, blocks on their
    own lines, whitespace inside <pre> kept. Regular expressions, not a DOM: fast, and enough for
    generated documentation pages."""
    page = _DROP.sub("", page)
    out = []
    for i, part in enumerate(_PRE.split(page)):
        if i % 2:  # a <pre> block: keep its line breaks and indentation
            out.append("\n\n" + html.unescape(_TAG.sub("", part)).strip("\n") + "\n\n")
            continue
        part = re.sub(r"\s+", " ", part)
        part = _BREAK.sub("\n", _BLOCK.sub("\n\n", _CELL.sub(" ", part)))
        out.append(html.unescape(_TAG.sub("", part)))
    lines = [line.rstrip() if line.startswith(" ") and len(line) - len(line.lstrip()) > 1 else line.strip()
             for line in "".join(out).split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


_GUTENBERG_START = re.compile(r"^\*{3} ?START OF (THE|THIS) PROJECT GUTENBERG.*$|^\*END\*THE SMALL PRINT.*$", re.M | re.I)
_GUTENBERG_END = re.compile(r"^\*{3} ?END OF (THE|THIS) PROJECT GUTENBERG.*$|^End of (the )?Project Gutenberg.*$", re.M | re.I)


def strip_gutenberg(text: str) -> str:
    """The text between Project Gutenberg's start and end markers (all of it when there are none)."""
    start = _GUTENBERG_START.search(text)
    if start:
        text = text[start.end():]
    end = _GUTENBERG_END.search(text)
    if end:
        text = text[: end.start()]
    return text.strip()


_NO_SPACE_BEFORE = re.compile(r" ([,.;:!?')\]}]|'s\b|n't\b)")
_NO_SPACE_AFTER = re.compile(r"([(\[{]) ")


def detag_brown(raw: str) -> str:
    """Brown Corpus `word/tag` tokens to running text, one paragraph per blank-line block."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", raw):
        words = []
        for token in block.split():
            word, _, _ = token.rpartition("/")
            word = word or token
            words.append({"``": '"', "''": '"'}.get(word, word))
        if words:
            sentence = " ".join(words)
            sentence = _NO_SPACE_BEFORE.sub(r"\1", sentence)
            sentence = _NO_SPACE_AFTER.sub(r"\1", sentence)
            paragraphs.append(sentence)
    return "\n\n".join(paragraphs)


def split_long(text: str, limit: int) -> list[str]:
    """`text` in pieces of at most `limit` UTF-8 bytes, cut at blank lines, else lines, else anywhere."""
    if len(text.encode()) <= limit:
        return [text]
    pieces: list[str] = []
    for unit in _units(text, limit):
        if pieces and len(pieces[-1].encode()) + len(unit.encode()) <= limit:
            pieces[-1] += unit
        else:
            pieces.append(unit)
    return [p.strip("\n") for p in pieces if p.strip()]


def _units(text: str, limit: int) -> Iterator[str]:
    for para in re.split(r"(?<=\n\n)", text):
        if len(para.encode()) <= limit:
            yield para
            continue
        for line in para.splitlines(keepends=True):
            data = line.encode()
            while len(data) > limit:
                cut = limit
                while cut > 0 and (data[cut] & 0xC0) == 0x80:  # do not cut inside a character
                    cut -= 1
                yield data[:cut].decode()
                data = data[cut:]
            yield data.decode()


def pack(entries: Iterable[str], limit: int, sep: str = "\n\n") -> Iterator[str]:
    """Short entries joined into documents of about `limit` bytes (an entry is never split)."""
    batch: list[str] = []
    size = 0
    for entry in entries:
        n = len(entry.encode()) + len(sep)
        if batch and size + n > limit:
            yield sep.join(batch)
            batch, size = [], 0
        batch.append(entry)
        size += n
    if batch:
        yield sep.join(batch)
