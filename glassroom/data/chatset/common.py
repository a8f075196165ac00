"""What every source of the chat set yields, and the seeded choices made from it.

A source yields Facts: one question about one subject (a command, a Python function, a word) and
the text that answers it, taken verbatim from the source. The question and the answer's framing are
picked from a few templates per kind by a hash of (seed, fact id), so a seed gives the same set
whatever order the facts were read in, and another seed rephrases it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Kind:
    """A kind of question: templates for the question and for the answer (`{body}` is the source text)."""

    name: str
    questions: tuple[str, ...]
    answers: tuple[str, ...]
    systems: tuple[str, ...] = ()  # system messages some conversations of this kind start with


@dataclass(frozen=True)
class Fact:
    source: str  # man, python, gcide, wn
    kind: Kind
    subject: str  # what the question is about: every fact of one subject goes to the same split
    key: str  # unique within the source and kind
    body: str  # the answer's text, verbatim from the source (whitespace joined)
    licence: str
    fields: dict = field(default_factory=dict)  # what the templates name ({cmd}, {opt}, {word}, ...)

    @property
    def id(self) -> str:
        return f"{self.source}/{self.kind.name}/{self.key}"


def unit(*parts) -> float:
    """A number in [0, 1) from a hash of the parts: the seeded choices of the set."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def choose(options, *parts):
    return options[int(unit(*parts) * len(options))]


def answer(fact: Fact, seed: int, body: str | None = None) -> str:
    """The fact's answer; with `body`, the same framing around another fact's text (a rejected answer)."""
    template = choose(fact.kind.answers, seed, "answer", fact.id)
    return template.format(**fact.fields, body=fact.body if body is None else body)


def question(fact: Fact, seed: int) -> str:
    return choose(fact.kind.questions, seed, "question", fact.id).format(**fact.fields)


def system(fact: Fact, seed: int, share: float = 0.3) -> str | None:
    """A system message for about `share` of the conversations of a kind that has some."""
    if not fact.kind.systems or unit(seed, "system?", fact.id) >= share:
        return None
    return choose(fact.kind.systems, seed, "system", fact.id)


def squash(text: str) -> str:
    """Whitespace runs to one space, ends stripped."""
    return " ".join(text.split())

