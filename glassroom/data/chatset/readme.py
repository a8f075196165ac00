"""The README.md of a chat set folder: what it holds, how it was made, examples and licences."""

from __future__ import annotations

import json

_ABOUT = {
    "man": "man pages of sections 1 and 8 (roff source): what a command does (NAME line), what an option "
           "does and which option does a thing (option lists)",
    "python": "the Python standard library's docstrings (read with ast): what a module, class, function or "
              "method does (first paragraph), how a function is called (its parameters)",
    "gcide": "GCIDE (dictd): what a word means (first definition, cleaned)",
    "wn": "WordNet (dictd): what a word means (first sense, without examples and synonyms)",
}


def _example(made: dict, source: str) -> str | None:
    for r in made["sft"]["train"]:
        if r["source"] == source:
            return json.dumps(r["messages"], ensure_ascii=False, indent=1)
    return None


def readme(info: dict, made: dict) -> str:
    t = info["totals"]
    lines = [
        "# Chat set: questions and answers from text on this machine",
        "",
        f"Written by `glassroom data chatset --seed {info['seed']} --max-per-source {info['max_per_source']}` "
        "(docs/chatset.md). Every answer is text taken verbatim from its source, in a sentence that names the "
        "subject; the question and the answer's framing are drawn from a few templates per kind by the seed, and "
        "about 30% of conversations start with a system message.",
        "",
        f"- `sft/train.jsonl` ({t['sft']['train']:,}), `sft/heldout.jsonl` ({t['sft']['heldout']:,}): "
        '`{"id", "source", "subject", "licence", "messages": [...]}` per line',
        f"- `dpo/train.jsonl` ({t['dpo']['train']:,}), `dpo/heldout.jsonl` ({t['dpo']['heldout']:,}): "
        '`{"id", "source", "subject", "licence", "prompt", "chosen", "rejected"}`; rejected is the same answer framing '
        "around the text of another question of the same source and kind, about another subject",
        "- `domains/<domain>/{sft,dpo}-{train,heldout}.jsonl`: the same records by domain, for the recipes",
        "- `sft.yaml`, `dpo.yaml`: recipes for `glassroom data build` (one domain per source kind; heldout is "
        "the validation split)",
        "- `chatset.json`: counts, kinds, skips and licences per source, the seed",
        "",
        "The held-out split is by subject: every question about one command, function or word is in the same "
        f"split; {info['heldout']}. Held-out scores measure answers about subjects never trained on.",
        "",
        "| source | domain | what | conversations train | held out | pairs train | held out | subjects held out |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, e in info["sources"].items():
        c, p, s = e["conversations"], e["pairs"], e["subjects"]
        lines.append(f"| {name} | {e['domain']} | {_ABOUT[name]} | {c['train']:,} | {c['heldout']:,} | "
                     f"{p['train']:,} | {p['heldout']:,} | {s['heldout']:,} |")
    for name, why in info["skipped_sources"].items():
        lines.append(f"| {name} | - | skipped: {why} | 0 | 0 | 0 | 0 | 0 |")
    lines += ["", "## Licences", ""]
    for name, e in info["sources"].items():
        if name == "man":
            lines.append(f"- man: each page keeps its Debian package's licence ({len(e['licences'])} packages): "
                         "`see /usr/share/doc/<package>/copyright`, named in each record's `licence` and in chatset.json")
        else:
            lines.append(f"- {name}: {', '.join(e['licences'])}")
    lines += ["", "## Examples", ""]
    for name in info["sources"]:
        example = _example(made, name)
        if example:
            lines += [f"{name}:", "", "```json", example, "```", ""]
    lines += ["## Skipped", ""]
    for e in info["sources"].values():  # each reason names its source ("gcide: entry without ...")
        for reason, n in e["skipped"].items():
            lines.append(f"- {reason}: {n:,}")
    return "\n".join(lines) + "\n"
