"""The natural language of sampled documents, by py3langid (a maintained port of langid.py: 97
languages, its model inside the wheel, numpy only, BSD). The atlas reports each domain's languages
with it, so a domain's label can be checked against its text: the Debian Handbook's translations are
partial, and their untranslated pages are English whatever folder they sit in. Code is identified by
its comments and strings, so a code domain's languages say little about it."""

from __future__ import annotations

from typing import Callable

import numpy as np

IDENTIFIER = "py3langid"
TOP = 5          # languages named per domain; the rest are summed as OTHER
OTHER = "other"
UNDETERMINED = "und"   # ISO 639-2's code for no language: a text without a letter (py3langid would say "en")
BATCH = 1_000


def identify(texts: list[str], tick: Callable[[int], None] = lambda n: None) -> list[str]:
    """ISO 639-1 code of each text's language (py3langid's most likely of its 97), or UNDETERMINED for
    a text with no letter at all (empty, digits, punctuation, emoji)."""
    import py3langid  # lazy: its model loads on first use, and only the atlas needs it

    out: list[str] = []
    for start in range(0, len(texts), BATCH):
        batch = texts[start: start + BATCH]
        out += [str(py3langid.classify(t)[0]) if any(c.isalpha() for c in t) else UNDETERMINED for t in batch]
        tick(len(batch))
    return out


def shares_by_group(languages: list[str], groups: np.ndarray, weights: np.ndarray, names: list[str]) -> dict[str, dict[str, float]]:
    """For each group (e.g. a domain) with members: each language's share of the group's weight, largest
    first (ties by code); past the TOP largest, the rest are summed as OTHER."""
    langs = np.asarray(languages)
    out = {}
    for g, name in enumerate(names):
        members = np.flatnonzero(groups == g)
        if len(members) == 0:
            continue
        total = float(weights[members].sum())
        codes, inverse = np.unique(langs[members], return_inverse=True)
        mass = np.bincount(inverse, weights=weights[members], minlength=len(codes))
        order = sorted(range(len(codes)), key=lambda i: (-mass[i], codes[i]))
        shares = {str(codes[i]): float(mass[i] / total) for i in order[:TOP]}
        rest = float(sum(mass[i] for i in order[TOP:]) / total)
        if rest > 0:
            shares[OTHER] = rest
        out[name] = shares
    return out


def describe(shares: dict[str, float], top: int = 3, least: float = 0.01) -> str:
    """'en 19%, de 15%, fr 14%' for a group's shares: its `top` largest named languages of at least `least`."""
    named = [(code, s) for code, s in shares.items() if code != OTHER and s >= least][:top]
    return ", ".join(f"{code} {100 * s:.0f}%" for code, s in named)
