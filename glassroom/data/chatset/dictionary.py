"""Questions from the dictd dictionaries: what a word means, answered by its first definition in
GCIDE (Webster's 1913 revised, GPL) or WordNet, cleaned of pronunciation, etymology, citations and
cross-reference braces. Only lower-case single words (hyphens allowed) are asked about, and only
definitions that survive cleaning whole (no transliterated Greek, no accent codes like [`e]).
"""

from __future__ import annotations

import gzip
import re
from collections import Counter
from pathlib import Path

from glassroom.data.chatset.common import Fact, Kind, squash
from glassroom.errors import GlassroomError

DICTIONARIES = {
    "gcide": ("GCIDE", "GPL-2.0-or-later: see /usr/share/doc/dict-gcide/copyright"),
    "wn": ("WordNet", "WordNet 3.0 licence: see /usr/share/doc/dict-wn/copyright"),
}
_WORD = re.compile(r"[a-z]{3,}(-[a-z]+)?")
_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_POS = {"n": "noun", "v": "verb", "adj": "adjective", "adv": "adverb", "a": "adjective", "v. t": "transitive verb",
        "v. i": "intransitive verb", "prep": "preposition", "conj": "conjunction", "interj": "interjection",
        "pron": "pronoun", "p. p": "past participle", "p. a": "participial adjective", "pl": "plural noun"}

MEANING = Kind(
    "meaning",
    ("What does the word '{word}' mean?", "Define '{word}'.", "What is the meaning of '{word}'?",
     "What does '{word}' mean?", "Could you give me a definition of '{word}'?"),
    ("'{word}' ({pos}): {body}.", "As {a_pos}, '{word}' means: {body}.", "{dictionary} defines '{word}' ({pos}) as: {body}."),
    ("You are a helpful assistant who explains the meaning of English words.",
     "Answer with a dictionary definition."),
)


def _number(text: str) -> int | None:
    """A dictd index number (base 64), or None for text that is not one."""
    value = 0
    for c in text:
        if c not in _B64:
            return None
        value = value * 64 + _B64[c]
    return value if text else None


def entries(folder: Path, name: str, skipped: Counter | None = None) -> list[tuple[str, str]]:
    """(index word, entry text) for the single lower-case words of one dictd database, first entry per
    word; an index line whose offset or size is not a dictd number is skipped (counted in `skipped`)."""
    path = folder / f"{name}.dict.dz"
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise GlassroomError(f"{path}: cannot be read ({' '.join(str(exc).split())[:100]}); reinstall dict-{name} "
                             "or leave the source out (--sources)") from None
    out, seen = [], set()
    for line in (folder / f"{name}.index").read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        word = parts[0].lower() if len(parts) >= 3 else ""
        if not _WORD.fullmatch(word) or word in seen:
            continue
        start, size = _number(parts[1]), _number(parts[2])
        if start is None or size is None:
            if skipped is not None:
                skipped[f"{name}: index line with a bad offset or size"] += 1
            continue
        seen.add(word)
        out.append((word, data[start: start + size].decode("utf-8", "replace")))
    return out


def _clean(text: str) -> str | None:
    if re.search(r"\[[^\]\s]{0,3}\]|[?\\]|\{[^}]*$", text):
        return None  # accent codes, transliterated Greek, a cut cross-reference
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\s--\s?[A-Z][\w. ]*$", "", squash(text))
    text = squash(text.replace("{", "").replace("}", "")).rstrip(" .;:,")
    if re.match(r"^[,;.:&]", text):  # what came before the definition (", sing. & pl.") was not all cut
        return None
    if len(text.split()) < 3 or len(text) > 300 or "[" in text or "]" in text:
        return None
    return text


def wordnet_sense(word: str, entry: str) -> tuple[str, str] | None:
    """(part of speech, first definition) of a WordNet entry."""
    lines = entry.splitlines()
    if not lines or lines[0].strip().lower() != word:
        return None
    sense, pos = [], None
    for line in lines[1:]:
        m = re.match(r"^\s+(n|v|adj|adv)\s+(?:\d+\s*)?:\s*(.*)$", line)
        if pos is None:
            if m:
                pos, sense = m.group(1), [m.group(2)]
            continue
        if not line.strip() or re.match(r"^\s+(\d+\s*:|(n|v|adj|adv)\s)", line):
            break
        sense.append(line)
    if pos is None:
        return None
    text = re.sub(r"\[(syn|ant|also|see|pertainym|derivation|domain|region|usage)[^\]]*\]", "", " ".join(sense))
    text = re.split(r';\s*"', text)[0]
    body = _clean(text)
    return (_POS[pos], body) if body else None


def gcide_sense(word: str, entry: str) -> tuple[str, str] | None:
    """(part of speech, first definition) of a GCIDE entry: `Word \\pron\\, n. [etym] 1. text [1913 Webster]`."""
    m = re.match(r"^([^\\\n]+?)\s*\\[^\\\n]*\\,?\s*", entry)
    if not m or m.group(1).strip().lower() != word:
        return None
    rest = entry[m.end():]
    pm = re.match(r"((?:[a-z]+\.\s*){1,3})", rest)
    if not pm:
        return None
    pos = _POS.get(pm.group(1).strip().rstrip(".").strip())
    rest = rest[pm.end():].lstrip()
    if rest.startswith("["):  # etymology, brackets nested
        depth = 0
        for i, c in enumerate(rest):
            depth += (c == "[") - (c == "]")
            if depth == 0:
                rest = rest[i + 1:]
                break
        else:
            return None
    rest = re.sub(r"^\s*;\s*pl\.\s*[^.;]*[.;]", "", rest)  # a plural form before the definition
    rest = re.sub(r"^\s*1\.\s+", "", rest.lstrip())
    text = re.split(r"\n\s*\n|\[1913 Webster\]|\[WordNet|\[PJC\]|\n\s*\d+\.\s|\n\s*(?:Syn|Note):", rest)[0]
    body = _clean(text)
    return (pos or "word", body) if body and pos else None


def facts(seed: int, folder: Path, names: list[str], skipped: Counter) -> list[Fact]:
    out: list[Fact] = []
    for name in names:
        title, lic = DICTIONARIES[name]
        sense = gcide_sense if name == "gcide" else wordnet_sense
        for word, entry in entries(folder, name, skipped):
            found = sense(word, entry)
            if found is None:
                skipped[f"{name}: entry without a clean first definition"] += 1
                continue
            pos, body = found
            out.append(Fact(name, MEANING, f"word:{word}", word, body, lic, dict(word=word, pos=pos, a_pos=("an " if pos[0] in "aeiou" else "a ") + pos, dictionary=title)))
    return out
