"""Planted leaks and distinct documents for the decontamination tests, generated from real documentation
pages: an evaluation page copied whole, in half or lightly edited into a training page (or standing alone),
and distinct pages (pairwise word-shingle Jaccard under 0.3) that share only what such pages share."""

from __future__ import annotations

import glob
import random
import re
from dataclasses import dataclass
from functools import lru_cache

from glassroom.data.dedup import jaccard, shingle_set

PAGES = "/usr/share/doc/python3.11/html/_sources/**/*.txt"
KINDS = ("whole", "half", "edited", "edited_half")
PLACES = ("inside", "alone")
TOKEN = re.compile(r"\S+")


@lru_cache(maxsize=1)
def _pages() -> tuple[str, ...]:
    texts = (open(p, encoding="utf-8").read() for p in sorted(glob.glob(PAGES, recursive=True)))
    return tuple(t for t in texts if 2_000 <= len(t) <= 40_000)


def distinct_pages(count: int, seed: int, most_jaccard: float = 0.3) -> list[str]:
    """`count` documentation pages in a seeded order, each with word-shingle Jaccard under most_jaccard
    against every page taken before it."""
    pages = list(_pages())
    random.Random(seed).shuffle(pages)
    chosen: list[str] = []
    sets: list[frozenset] = []
    for page in pages:
        s = shingle_set(page, 5)
        if all(jaccard(s, o) < most_jaccard for o in sets):
            chosen.append(page)
            sets.append(s)
            if len(chosen) == count:
                break
    return chosen


def edit(text: str, rng: random.Random, every: int = 20) -> str:
    """text with about one whitespace-separated token in `every` replaced, dropped or doubled."""
    out = []
    for tok in TOKEN.findall(text):
        roll = rng.random() * every
        if roll < 1 / 3:
            out.append(f"edit{rng.randrange(10**6)}")
        elif roll < 2 / 3:
            continue
        elif roll < 1:
            out.extend([tok, tok])
        else:
            out.append(tok)
    return " ".join(out)


def half(text: str, rng: random.Random) -> str:
    """The first or the second half of text, cut at the line nearest its middle."""
    cut = text.find("\n", len(text) // 2)
    cut = len(text) // 2 if cut < 0 else cut
    return text[:cut] if rng.random() < 0.5 else text[cut:]


def copy_of(page: str, kind: str, rng: random.Random) -> str:
    if kind == "whole":
        return page
    if kind == "half":
        return half(page, rng)
    if kind == "edited":
        return edit(page, rng)
    return edit(half(page, rng), rng)


@dataclass(frozen=True)
class Planted:
    evals: list[str]  # evaluation texts
    train: list[str]  # training documents
    leaks: frozenset[int]  # positions in train holding a planted copy
    how: dict[int, str]  # position -> "kind/place"


@lru_cache(maxsize=8)
def planted_set(seed: int, pages: int = 150, evals: int = 30, kinds=KINDS) -> Planted:
    """`evals` of `pages` distinct pages are evaluation text; each is copied (a kind drawn in turn) into a
    training page it is put inside (at a line break) or as a document of its own."""
    rng = random.Random(seed)
    chosen = distinct_pages(pages, seed)
    ev, train = chosen[:evals], list(chosen[evals:])
    hosts = rng.sample(range(len(train)), evals)
    leaks, how = set(), {}
    for k, page in enumerate(ev):
        kind, place = kinds[k % len(kinds)], PLACES[(k // len(kinds)) % len(PLACES)]
        copy = copy_of(page, kind, rng)
        if place == "inside":
            at = hosts[k]
            host = train[at]
            cut = host.find("\n", rng.randrange(len(host)))
            cut = len(host) if cut < 0 else cut
            train[at] = host[:cut] + "\n" + copy + "\n" + host[cut:]
        else:
            at = len(train)
            train.append(copy)
        leaks.add(at)
        how[at] = f"{kind}/{place}"
    return Planted(ev, train, frozenset(leaks), how)
