"""The maintained secret rule set redaction applies: Kingfisher's (the `kingfisher-bin` package,
MongoDB's scanner), which carries the Betterleaks rules (the gitleaks rule set, kept by gitleaks'
author) and Google's Veles rules: about 490 token shapes of some 300 services, each a regex.

The rules are read from the installed binary (`kingfisher rules list -f json`) once per version and
cached under ~/.cache/glassroom/secret-rules/ (GLASSROOM_SECRET_RULES_DIR), so a new release of
the package brings its new shapes with it. Nothing is fetched from the network (`--no-update-check`).

Adapted as they are read (`adapt`), to the places a lab's secrets stand:
- `\\b` counts `_` as a separator, so a token inside a name (`sweep_glpat-...`, `run_dop_v1_...`)
  is found as one after `-`, `/` or a space is;
- the rules' closing "then a quote, a space, `;` or the end" becomes "then no letter or digit", so
  a token followed by `/` (a path), `-` or `_` (a name) is found too, and an opening "at the start
  or after none (or one) of these" accepts a `/`, `-` or `_` before the token (`runs/<token>`).
Rules that find identifiers, not credentials (client ids, tenant ids, user and account names,
addresses), are not applied (SKIPPED). A rule matches only where one of its literal words stands:
each rule's required literals are taken from its parsed pattern and found in one pass over the text
(an Aho-Corasick automaton, pyahocorasick), so a text is searched only by the rules whose words it
holds (rules without a literal of three characters run on every text).

`spans(text)` gives (start, end) of each secret found: the rule's first group of 8 or more
characters, else its whole match.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Optional

import ahocorasick
import regex

from glassroom.errors import GlassroomError
from glassroom.folders import replace_file

with warnings.catch_warnings():   # the standard library's regex parser: read-only use, no replacement module
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _C
    import sre_parse as _parse

# The regex module warns, when a V1 pattern is first used, that `[[` may be a nested set: in the
# rules' dialect (Rust's) it is one.
warnings.filterwarnings("ignore", message="Possible nested set", category=FutureWarning)
# Rules whose match is an identifier (who or where), not a credential.
SKIPPED = regex.compile(r"client-id|tenant-id|account-name|username|-address|application-id|-id(?:\.\d+)?$"
                        r"|hcpclientcredentials-client-id|-repository$|instance-url")
_WORD_EDGE = r"(?:(?<![A-Za-z0-9])(?=[A-Za-z0-9])|(?<=[A-Za-z0-9])(?![A-Za-z0-9]))"
_CLOSING = r"""(?:\\?['"\x60]|[\s;]|\\[nr]|$)"""
_MIN_LITERAL = 3
MATCH_TIMEOUT_S = 2.0   # a rule still searching one text after this: the whole text is taken as secret


def rules_dir() -> Path:
    return Path(os.environ.get("GLASSROOM_SECRET_RULES_DIR", "~/.cache/glassroom/secret-rules")).expanduser()


def _binary() -> tuple[str, str]:
    try:
        import kingfisher   # lazy: a platform without its build gets this one line, not an ImportError on import
        return kingfisher.get_binary_path(), kingfisher.__version__
    except (ImportError, FileNotFoundError, OSError) as exc:
        raise GlassroomError(f"the secret rules cannot be read: kingfisher-bin is not installed for this platform "
                             f"({exc}); reinstall glassroom (pip install -e .) so redaction has its rules") from None


def read_rules() -> list[dict]:
    """[{"id", "pattern", "confidence", ...}] as the installed Kingfisher lists them (cached per version)."""
    binary, version = _binary()
    cache = rules_dir() / f"kingfisher-{version}.json"
    try:
        rules = json.loads(cache.read_text(encoding="utf-8"))
        if isinstance(rules, list) and rules:
            return rules
    except (OSError, ValueError):
        pass
    try:
        out = subprocess.run([binary, "rules", "list", "-f", "json", "--no-update-check"], capture_output=True,
                             timeout=120, check=True, stdin=subprocess.DEVNULL).stdout
        rules = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise GlassroomError(f"the secret rules cannot be read from {binary} ({type(exc).__name__}: {str(exc)[:200]}); "
                             "reinstall kingfisher-bin") from None
    if not isinstance(rules, list) or not rules:
        raise GlassroomError(f"{binary} listed no secret rules; reinstall kingfisher-bin")
    try:
        replace_file(cache, json.dumps(rules))
    except OSError:
        pass   # a read-only home: read them again next time
    return rules


def adapt(pattern: str) -> str:
    """The rule as redaction applies it (module docstring): `_` a separator, any non-alphanumeric an end."""
    pattern = pattern.replace(_CLOSING, r"(?![A-Za-z0-9])")
    # "at the start or after none of these / one of these": a `/`, `-` or `_` before a token is a
    # separator of a path or a name (`runs/<token>`, `exp-<token>`)
    pattern = regex.sub(r"\(\?:\^\|\[\^([^\]]*)\]\)",
                        lambda m: "(?:^|[^" + regex.sub(r"\\?[/_]|(?<!\\)-$|\\-", "", m.group(1)) + "])", pattern)
    pattern = regex.sub(r"\(\?:\^\|\[(?!\^)([^\]]*)\]\)", lambda m: "(?:^|[" + m.group(1) + "/_\\-])", pattern)
    # "then the end or one of these": a `/` after a token ends it too (`runs/<token>/store.sqlite`)
    pattern = regex.sub(r"\(\?:\$\|\[(?!\^)([^\]]*)\]\)", lambda m: "(?:$|[" + m.group(1) + "/])", pattern)
    return regex.sub(r"(?<!\\)((?:\\\\)*)\\b", lambda m: m.group(1) + _edge(pattern, m.start(), m.end()), pattern)


def _edge(pattern: str, start: int, end: int) -> str:
    """`\\b` with `_` a separator: a token's start (the pattern's start, or after `(`, `(?:`, `|` or
    flags) needs no letter or digit before it, its end none after it; one lookaround each is 15x
    faster than the two-sided test, which stays for a `\\b` anywhere else."""
    before = regex.sub(r"\(\?[a-zA-Z]+\)$", "", pattern[:start])
    if before == "" or before.endswith(("(", "(?:", "|")):
        return r"(?<![A-Za-z0-9])"
    if end == len(pattern) or pattern[end] in ")|":
        return r"(?![A-Za-z0-9])"
    return _WORD_EDGE


def literals(pattern: str) -> Optional[set[str]]:
    """Lower-case literals one of which every match holds (None: no literal of three characters)."""
    flat = "(?i)" + regex.sub(r"\(\?[a-zA-Z]+\)", "", pattern)   # flags anywhere (Rust allows it) -> one, case-free
    try:
        tree = _parse.parse(flat)
    except Exception:   # a construct the standard parser lacks: the rule runs on every text
        return None
    found = _sequence(list(tree))
    return found if found and min(map(len, found)) >= _MIN_LITERAL else None


def _sequence(items: list) -> Optional[set[str]]:
    run, candidates = "", []
    for op, arg in items + [(None, None)]:
        if op is _C.LITERAL:
            run += chr(arg)
            continue
        if len(run) >= _MIN_LITERAL:
            candidates.append({run.lower()})
        run = ""
        found = None
        if op is _C.SUBPATTERN:
            found = _group(list(arg[-1]))
        elif op is _C.BRANCH:
            found = _branches(arg[1])
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT) and arg[0] >= 1:
            found = _sequence(list(arg[2]))
        if found:
            candidates.append(found)
    return max(candidates, key=lambda s: min(map(len, s))) if candidates else None


def _branches(branches) -> Optional[set[str]]:
    out: set[str] = set()
    for branch in branches:
        found = _sequence(list(branch))
        if not found:
            return None
        out |= found
    return out


def _group(items: list) -> Optional[set[str]]:
    if len(items) == 1 and items[0][0] is _C.BRANCH:
        return _branches(items[0][1][1])
    return _sequence(items)


class RuleSet:
    """Compiled rules with their literal index."""

    def __init__(self, rules: list[dict]):
        self.ids: list[str] = []
        self.compiled: list = []
        self.always: list[int] = []
        self.by_literal: dict[str, list[int]] = {}
        for rule in rules:
            rid, pattern = str(rule.get("id", "")), rule.get("pattern")
            if not isinstance(pattern, str) or SKIPPED.search(rid):
                continue
            try:
                with warnings.catch_warnings():   # "possible nested set": in V1 (Rust's rules) `[[` is one
                    warnings.simplefilter("ignore", FutureWarning)
                    compiled = regex.compile(adapt(pattern), regex.V1)
            except regex.error:
                continue   # a construct Python's regex lacks: counted by bench/redaction_rules.py
            index = len(self.compiled)
            self.ids.append(rid)
            self.compiled.append(compiled)
            found = literals(pattern)
            if found is None:
                self.always.append(index)
            else:
                for word in found:
                    self.by_literal.setdefault(word, []).append(index)
        self._words = ahocorasick.Automaton()   # every literal found in one pass over the text
        for word in self.by_literal:
            self._words.add_word(word, word)
        if self.by_literal:
            self._words.make_automaton()

    def candidates(self, text: str) -> list[int]:
        chosen = set(self.always)
        if self.by_literal:
            for _, word in self._words.iter(text.lower()):
                chosen.update(self.by_literal[word])
        return sorted(chosen)

    def matches(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, rule id) of each secret: the first group of 8 or more characters, else the match."""
        out = []
        for index in self.candidates(text):
            try:
                for m in self.compiled[index].finditer(text, timeout=MATCH_TIMEOUT_S):
                    group = next((g for g in range(1, (m.re.groups or 0) + 1) if m.group(g) and len(m.group(g)) >= 8), 0)
                    start, end = m.span(group)
                    if end > start:
                        out.append((start, end, self.ids[index]))
            except TimeoutError:   # a text built to make a rule backtrack: none of it is shown
                return [(0, len(text), self.ids[index])]
        return out


@lru_cache(maxsize=1)
def rule_set() -> RuleSet:
    return RuleSet(read_rules())


def spans(text: str) -> list[tuple[int, int]]:
    return [(a, b) for a, b, _ in rule_set().matches(text)]
