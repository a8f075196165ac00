"""Which rule source finds the secrets a lab leaks, and which blanks ordinary values: detect-secrets'
plugins (its regex plugins, its KeywordDetector, its two high-entropy plugins), Kingfisher's rules
alone (Betterleaks and Veles, as glassroom.observe.secret_rules adapts them), the hand list
glassroom.observe.redact had before it read detect-secrets (the file at BEFORE, read with git), and
the redactor as it is now.

    python bench/redaction_rules.py [--n 10] [--seed 0] [--before COMMIT]

Planted: one instance of every Kingfisher rule made from its own regex (row "rule-generated"), and
every shape of tests/secret_shapes.py, --n random instances each (seeded), in every
position (standalone, after `-`, `_`, `/`, `=`, inside a run, metric and folder name, a domain, a URL,
prose, JSON). A redactor covers an instance when no 12 characters in a row of the secret part are
left in its output; detect-secrets (which reports, not rewrites) covers one when a regex plugin
reports anything on the text, or a keyword or entropy plugin reports a value sharing 12 characters
in a row with the secret part. Controls (the demo's MoE config, model and metric keys, sha256
digests, commit shas, UUIDs, paths, plain URLs, metric names, numbers, prose from the demo sources):
a false hit is a control a redactor changes, or on which a detect-secrets plugin reports anything.
Prints one table: coverage per shape, false hits per kind of control, in percent.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.settings import default_settings

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from secret_shapes import HARMLESS_CONFIG, flat, controls, from_rules, leaked, planted, real_config  # noqa: E402

from glassroom.observe import redact as after, secret_rules  # noqa: E402

BEFORE = "d872fa1"   # the last commit whose redact.py was the hand list alone


def load_before(commit: str):
    """glassroom/observe/redact.py as it was at `commit`, as a module."""
    try:
        source = subprocess.run(["git", "show", f"{commit}:glassroom/observe/redact.py"], cwd=REPO, check=True,
                                capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.exit(f"error: --before {commit}: cannot read redact.py at that commit with git ({exc})")
    path = Path(tempfile.mkdtemp()) / "redact_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("redact_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plugin_groups() -> dict[str, list]:
    """detect-secrets' plugins, one instance each, grouped: regex, keyword, entropy."""
    groups: dict[str, list] = defaultdict(list)
    for _, cls in sorted(get_mapping_from_secret_type_to_class().items()):
        if issubclass(cls, RegexBasedDetector):
            groups["ds regex"].append(cls())
        elif cls.__name__ == "KeywordDetector":
            groups["ds keyword"].append(cls())
        else:
            groups["ds entropy"].append(cls())
    return groups


def findings(plugins: list, text: str, filename: str) -> list[str]:
    out = []
    for line in text.splitlines() or [text]:
        for plugin in plugins:
            out += [s.secret_value or "" for s in plugin.analyze_line(filename=filename, line=line, line_number=1)]
    return out


def kingfisher_alone(text: str) -> str:
    """`text` with only what Kingfisher's rules find (as redaction adapts them) replaced."""
    out, pos = [], 0
    for start, end in sorted(secret_rules.spans(text)):
        if start >= pos:
            out.append(text[pos:start] + after.REDACTED)
            pos = end
    return "".join(out) + text[pos:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10, help="random instances per shape and position (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--before", default=BEFORE, help=f"commit of the hand list to compare (default {BEFORE})")
    args = ap.parse_args(argv)
    if args.n < 1:
        print("error: --n must be at least 1", file=sys.stderr)
        return 2
    before = load_before(args.before)
    groups = plugin_groups()
    columns = [*groups, "ds all", "kingfisher", "before", "after"]
    redactors = (("kingfisher", kingfisher_alone), ("before", before.redact_text), ("after", after.redact_text))
    covered: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    with default_settings():
        rows = planted(args.seed, args.n)
        rows += [("rule-generated", position, text, secret) for _, position, text, secret in from_rules(args.seed)]
        for shape, _, text, secret in rows:
            row = covered[shape]
            hit_any = False
            for name, plugins in groups.items():
                found = findings(plugins, text, "notes.txt")
                hit = bool(found) if name == "ds regex" else any(leaked(secret, v) for v in found)
                hit_any |= hit
                row[name][0] += hit
                row[name][1] += 1
            row["ds all"][0] += hit_any
            row["ds all"][1] += 1
            for name, fn in redactors:
                row[name][0] += not leaked(secret, fn(text))
                row[name][1] += 1
        false_hits: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        for kind, texts in controls(args.seed + 1, max(50, args.n * 5)).items():
            filename = "config.yaml" if kind.startswith("config") else "notes.txt"
            for text in texts:
                row = false_hits[kind]
                hit_any = False
                for name, plugins in groups.items():
                    hit = bool(findings(plugins, text, filename))
                    hit_any |= hit
                    row[name][0] += hit
                    row[name][1] += 1
                row["ds all"][0] += hit_any
                row["ds all"][1] += 1
                for name, fn in redactors:
                    row[name][0] += fn(text) != text
                    row[name][1] += 1
    width = max(len(k) for k in [*covered, *false_hits]) + 2
    head = f"{'':{width}s}" + "".join(f"{c:>12s}" for c in columns)

    def line(label: str, cells: dict[str, list[int]]) -> str:
        return f"{label:{width}s}" + "".join(f"{100 * cells[c][0] / max(1, cells[c][1]):11.1f}%" for c in columns)

    print(f"coverage: planted secrets found, percent ({args.n} per shape and position, seed {args.seed})")
    print(head)
    total: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for shape, cells in covered.items():
        print(line(shape, cells))
        for c in columns:
            total[c][0] += cells[c][0]
            total[c][1] += cells[c][1]
    print(line("ALL SHAPES", total))
    print("\nfalse hits: controls changed or reported, percent")
    print(head)
    total = defaultdict(lambda: [0, 0])
    for kind, cells in false_hits.items():
        print(line(kind, cells))
        for c in columns:
            total[c][0] += cells[c][0]
            total[c][1] += cells[c][1]
    print(line("ALL CONTROLS", total))
    tree = {"demo": real_config(), "more": HARMLESS_CONFIG}
    leaves = flat(tree)
    for name, module in (("before", before), ("after", after)):
        changed = [k for (k, v), (_, w) in zip(leaves, flat(module.redact(tree))) if v != w]
        print(f"\nconfig tree through redact() ({name}): {len(changed)} of {len(leaves)} values blanked"
              + (f": {', '.join(changed)}" if changed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
