"""Shared setup for the data tests: small recipes over real text (the Python stdlib's own sources)."""

from __future__ import annotations

import json
import shutil
import sysconfig
from pathlib import Path

import yaml

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(package: str) -> list[Path]:
    return sorted((STDLIB / package).glob("*.py"))


def near_copy(text: str) -> str:
    """A near duplicate: every 40th line dropped and one word changed (Jaccard of shingles ~0.9)."""
    lines = [line for i, line in enumerate(text.split("\n")) if i % 40 != 17]
    return "\n".join(lines).replace("return", "return  # changed", 1)


def make_corpus(root: Path) -> dict:
    """Copies real stdlib files into `root` and plants duplicates; returns what was planted."""
    a, b = root / "pkg_a", root / "pkg_b"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    for path in stdlib_files("email"):
        shutil.copy(path, a / path.name)
    for pkg in ("json", "http", "logging", "urllib"):
        for path in stdlib_files(pkg):
            shutil.copy(path, b / f"{pkg}_{path.name}")
    big = sorted((p for p in a.glob("*.py") if 4000 < p.stat().st_size < 200_000), key=lambda p: p.name)
    records, planted = [], {"exact": [], "near": [], "garbled": [], "short": []}
    for i, path in enumerate(big[:5]):
        records.append({"text": path.read_text(), "doc": f"exact-{i}"})
        planted["exact"].append(f"exact-{i}")
    for i, path in enumerate(big[5:10]):
        records.append({"text": near_copy(path.read_text()), "doc": f"near-{i}"})
        planted["near"].append(f"near-{i}")
    text = big[10].read_text()
    records.append({"text": text[:3000].replace(" ", "\x00"), "doc": "garbled-0"})
    planted["garbled"].append("garbled-0")
    records.append({"text": text[:40], "doc": "short-0"})
    planted["short"].append("short-0")
    lines = [json.dumps(r) for r in records]
    lines.insert(3, '{"text": "a line cut off in the mid')  # malformed
    lines.insert(7, "not json at all")  # malformed
    lines.insert(9, json.dumps({"body": "no text field"}))  # missing field
    (root / "extra.jsonl").write_text("\n".join(lines) + "\n")
    planted["malformed"] = 2
    planted["missing_field"] = 1
    return planted


def write_recipe(root: Path, **overrides) -> Path:
    recipe = {
        "name": "stdlib-test",
        "domains": {
            "email": {"sources": [
                {"kind": "files", "path": str(root / "pkg_a" / "*.py")},
                {"kind": "jsonl", "path": str(root / "extra.jsonl"), "id_field": "doc"},
            ]},
            "web": {"sources": [{"kind": "files", "path": str(root / "pkg_b" / "*.py")}]},
        },
        "split": {"validation_fraction": 0.1},
        "tokenizer": {"vocab_size": 1024, "sample_bytes": "1M"},
    }
    for key, value in overrides.items():
        recipe[key] = value
    path = root / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def run_cli(args, capsys) -> tuple[int, str, str]:
    """`glassroom ARGS` in process: (exit code, stdout, stderr)."""
    from glassroom.cli import main

    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_line(err: str) -> str:
    """The one `error:` line of stderr (asserted: exactly one, no traceback)."""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]
