"""Turning file formats into plain text: HTML, Project Gutenberg wrappers, tagged corpora, packing.

Small pure functions used by the extractors in sources.py; each keeps the words of the original
and drops only markup (HTML tags, Gutenberg licence boilerplate, part-of-speech tags).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Iterable, Iterator

_BLOCK_TAGS = {
    "p", "div", "br", "li", "ul", "ol", "tr", "table", "pre", "h1", "h2", "h3", "h4", "h5", "h6",
    "section", "article", "blockquote", "dt", "dd", "dl", "title", "header", "footer", "hr", "td", "th",
}
_SKIP_TAGS = {"script", "style", "head", "nav", "noscript"}


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        if tag in _SKIP_TAGS:
            self.skip += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n" if tag not in ("br", "td", "th") else "\n")
        if tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag):
        if tag in _SKIP_TAGS and self.skip:
            self.skip -= 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n" if tag not in ("td", "th") else " ")
        if tag == "pre" and self.pre:
            self.pre -= 1

    def handle_data(self, data):
        if self.skip:
            return
        self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> str:
    """Visible text of an HTML page: scripts, styles and navigation dropped, blocks on their own lines."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    lines = [line.strip() if not line.startswith(" ") else line.rstrip() for line in text.split("\n")]
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
