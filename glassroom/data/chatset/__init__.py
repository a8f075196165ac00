"""`glassroom data chatset`: a question-answer conversation set and a preference set made offline
from text on this machine (man pages, the Python standard library's docstrings, the dictd
dictionaries), split by subject into train and held-out, written by glassroom.data.chatset.write.

One module per source (man.py, pydoc.py, dictionary.py) yields Facts (common.py); this module caps
each source, splits, phrases the conversations and pairs each answer with a rejected one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from glassroom.data.chatset import dictionary, man, pydoc
from glassroom.data.chatset.common import Fact, answer, question, system, unit
from glassroom.errors import GlassroomError

SOURCES = ("man", "python", "gcide", "wn")
DOMAINS = {"man": "man", "python": "python", "gcide": "dictionary", "wn": "dictionary"}
HELDOUT_FRACTION = 0.05


def missing(name: str, man_dir: Path, dictd_dir: Path) -> str | None:
    """Why source `name` cannot be read here, or None."""
    if name == "man" and not man.page_files(man_dir):
        return f"no man pages in {man_dir}/man1 or {man_dir}/man8 (Debian man-db and the packages' pages)"
    if name in ("gcide", "wn") and not (dictd_dir / f"{name}.index").is_file():
        return f"dictd database {name!r} is not in {dictd_dir} (Debian dict-{name}; scripts/install-corpora.sh)"
    if name == "python" and not pydoc.stdlib_dir().is_dir():
        return f"the Python standard library is not at {pydoc.stdlib_dir()}"
    return None


def read_facts(name: str, seed: int, man_dir: Path, dictd_dir: Path, dpkg_info: Path, skipped: Counter) -> list[Fact]:
    if name == "man":
        return man.facts(seed, man_dir, dpkg_info, skipped)
    if name == "python":
        return pydoc.facts(seed, pydoc.stdlib_dir(), skipped)
    return dictionary.facts(seed, dictd_dir, [name], skipped)


def cap(facts: list[Fact], limit: int, seed: int) -> list[Fact]:
    """Whole subjects, in an order the seed draws, while they fit under `limit` facts."""
    by_subject: dict[str, list[Fact]] = {}
    for f in facts:
        by_subject.setdefault(f.subject, []).append(f)
    kept: list[Fact] = []
    for subject in sorted(by_subject, key=lambda s: (unit(seed, "subject", s), s)):
        group = by_subject[subject]
        if len(kept) + len(group) <= limit:
            kept.extend(group)
        if len(kept) >= limit:
            break
    return kept


def heldout_subjects(kept: dict[str, list[Fact]], seed: int) -> set[str]:
    """The held-out subjects: about HELDOUT_FRACTION of them, by a hash of (seed, subject), so a
    command, a function or a word is wholly in one split (a word in both dictionaries too). A source
    that would have none gives its lowest-hashed subject, so every domain has a validation split."""
    held = set()
    for facts in kept.values():
        subjects = {f.subject for f in facts}
        mine = {s for s in subjects if unit(seed, "heldout", s) < HELDOUT_FRACTION}
        if not mine and len(subjects) > 1:
            mine = {min(subjects, key=lambda s: (unit(seed, "heldout", s), s))}
        held |= mine
    return held


def conversation(fact: Fact, seed: int) -> dict:
    messages = []
    sys_text = system(fact, seed)
    if sys_text:
        messages.append({"role": "system", "content": sys_text})
    messages.append({"role": "user", "content": question(fact, seed)})
    messages.append({"role": "assistant", "content": answer(fact, seed)})
    return {"id": fact.id, "source": fact.source, "subject": fact.subject, "licence": fact.licence, "messages": messages}


def pairs(facts: list[Fact], pool: list[Fact], seed: int, skipped: Counter) -> list[dict]:
    """For each fact, its conversation's prompt, its answer (chosen) and the same framing around the
    text of another fact of `pool` of the same source and kind, about another subject (rejected).
    The rejected text may come from the other split: only the chosen answers are kept apart."""
    groups: dict[tuple[str, str], list[Fact]] = {}
    for f in sorted(pool, key=lambda f: f.id):
        groups.setdefault((f.source, f.kind.name), []).append(f)
    out = []
    for f in facts:
        group = groups[(f.source, f.kind.name)]
        chosen = answer(f, seed)
        start = int(unit(seed, "reject", f.id) * len(group))
        rejected = None
        for step in range(len(group)):
            other = group[(start + step) % len(group)]
            if other.subject != f.subject and other.body != f.body:
                candidate = answer(f, seed, body=other.body)
                if candidate != chosen:
                    rejected = candidate
                    break
        if rejected is None:
            skipped[f"{f.source}: no other subject's answer to reject"] += 1
            continue
        messages = conversation(f, seed)["messages"][:-1]
        prompt = messages[0]["content"] if len(messages) == 1 else messages
        out.append({"id": f.id, "source": f.source, "subject": f.subject, "licence": f.licence, "prompt": prompt,
                    "chosen": chosen, "rejected": rejected})
    return out


def make(seed: int, max_per_source: int, sources: list[str], man_dir: Path, dictd_dir: Path,
         dpkg_info: Path = Path("/var/lib/dpkg/info")) -> dict:
    """Everything the set holds, in memory: {"sft": {split: [...]}, "dpo": {split: [...]}, "report": {...}}."""
    absent = {name: why for name in sources if (why := missing(name, man_dir, dictd_dir))}
    if len(absent) == len(sources):
        name = next(iter(absent))
        raise GlassroomError(f"data chatset: no source to read: {absent[name]}; install it or choose --sources")
    sft = {"train": [], "heldout": []}
    dpo = {"train": [], "heldout": []}
    report: dict = {"sources": {}, "skipped_sources": absent}
    kept, found, skips = {}, {}, {}
    for name in sources:
        if name not in absent:
            skips[name] = Counter()
            facts = read_facts(name, seed, man_dir, dictd_dir, dpkg_info, skips[name])
            found[name], kept[name] = len(facts), cap(facts, max_per_source, seed)
            if len({f.subject for f in kept[name]}) < 2:  # no subject to hold out: no validation split
                few = len({f.subject for f in facts}) < 2
                absent[name] = (f"{len(facts)} usable questions" if few else
                                f"--max-per-source {max_per_source} keeps {len(kept[name])} question(s)") + \
                    " about fewer than 2 subjects, nothing to hold out"
                del kept[name]
    if not kept:
        name = next(iter(absent))
        raise GlassroomError(f"data chatset: no source gave a set: {name}: {absent[name]}; "
                             "check the source or raise --max-per-source")
    held = heldout_subjects(kept, seed)
    for name, facts in kept.items():
        split = {"train": [f for f in facts if f.subject not in held], "heldout": [f for f in facts if f.subject in held]}
        entry = {"domain": DOMAINS[name], "available": found[name], "conversations": {}, "pairs": {}, "subjects": {},
                 "kinds": dict(sorted(Counter(f.kind.name for f in facts).items())), "licences": {}}
        for part, part_facts in split.items():
            part_facts.sort(key=lambda f: (unit(seed, "order", f.id), f.id))
            sft[part].extend(conversation(f, seed) for f in part_facts)
            made = pairs(part_facts, facts, seed, skips[name])
            dpo[part].extend(made)
            entry["conversations"][part] = len(part_facts)
            entry["pairs"][part] = len(made)
            entry["subjects"][part] = len({f.subject for f in part_facts})
        entry["licences"] = dict(sorted(Counter(f.licence for f in facts).items()))
        entry["skipped"] = dict(sorted(skips[name].items()))
        report["sources"][name] = entry
    for records in (*sft.values(), *dpo.values()):  # sources mixed, in an order the seed draws
        records.sort(key=lambda r: (unit(seed, "order", r["id"]), r["id"]))
    return {"sft": sft, "dpo": dpo, "report": report}
