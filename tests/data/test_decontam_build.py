"""Decontamination inside `glassroom data build`: a training document holding a passage of an evaluation file
is removed and counted (stats.json stage decontaminate, removed/contaminated.jsonl, manifest), or kept and
flagged in its shard index with action: flag; a document sharing only shorter runs survives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from data_helpers import error_line, run_cli, stdlib_files
from glassroom.data import ngrams
from glassroom.data.mixture import Dataset

LICENCE = Path("/usr/share/common-licenses/GPL-3")


def licence_words(start: int, count: int) -> list[str]:
    return ngrams.WORDS.findall(LICENCE.read_text())[start: start + count]


def with_passage(text: str, words: list[str]) -> str:
    cut = text.find("\n", len(text) // 2)
    return text[:cut] + "\n# " + " ".join(words) + "\n" + text[cut:]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Real stdlib sources in two domains; four planted leaks (30 licence words each, in different files, so the
    split puts some in train), two near misses (the licence in runs of 12 words), an evaluation file."""
    root = tmp_path_factory.mktemp("decontam-corpus")
    code, more = root / "code", root / "more"
    code.mkdir()
    more.mkdir()
    for p in stdlib_files("email"):
        shutil.copy(p, code / p.name)
    for pkg in ("json", "http"):
        for p in stdlib_files(pkg):
            shutil.copy(p, more / f"{pkg}_{p.name}")
    hosts = sorted(p for p in code.glob("*.py") if p.stat().st_size > 3000)
    for k, host in enumerate(hosts[:4]):
        host.with_name(f"leak{k}_{host.name}").write_text(with_passage(host.read_text(), licence_words(300 + 40 * k, 30)))
        host.unlink()
    for k, host in enumerate(hosts[4:6]):
        runs = [w for j in range(5) for w in licence_words(1500 + 100 * k + 13 * j, 12) + [f"zz{j}"]]
        host.with_name(f"miss{k}_{host.name}").write_text(with_passage(host.read_text(), runs))
        host.unlink()
    (root / "eval.txt").write_text(LICENCE.read_text())
    return root


def recipe(root: Path, **decontaminate) -> Path:
    data = {
        "name": "decontam-test",
        "domains": {"code": {"sources": [{"kind": "files", "path": str(root / "code" / "*.py")}]},
                    "more": {"sources": [{"kind": "files", "path": str(root / "more" / "*.py")}]}},
        "split": {"validation_fraction": 0.1},
        "tokenizer": {"vocab_size": 512, "sample_bytes": "300K"},
        "quality": {"enabled": False},
        "decontaminate": {"validation": False, "files": [str(root / "eval.txt")], **decontaminate},
    }
    path = root / f"recipe-{decontaminate.get('action', 'remove')}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def build(root: Path, out: Path, capsys, **decontaminate) -> dict:
    code, _, err = run_cli(["data", "build", recipe(root, **decontaminate), "--out", out, "--workers", "1"], capsys)
    assert code == 0, err
    stats = json.loads((out / "stats.json").read_text())
    if "decontaminate" not in stats:
        pytest.skip("the build does not run the decontaminate stage yet (part D's wiring)")
    return stats


def ids(out: Path, split: str) -> list[str]:
    return (out / "shards" / "code" / f"{split}.ids.txt").read_text().split("\n")


def test_planted_leak_removed_counted_listed_and_near_miss_kept(corpus, tmp_path, capsys):
    out = tmp_path / "ds"
    stats = build(corpus, out, capsys)
    train, validation = ids(out, "train"), ids(out, "validation")
    leaks_in_validation = [i for i in validation if "/leak" in i or i.startswith("leak")]
    removed = json.loads((out / "manifest.json").read_text())["decontamination"]
    records = [json.loads(line) for line in (out / "removed" / "contaminated.jsonl").read_text().splitlines()]
    leaked = sorted(r["id"] for r in records)
    assert len(leaked) == 4 - len(leaks_in_validation) >= 2  # every planted leak in train, nothing else
    assert all("leak" in i for i in leaked) and not any("leak" in i for i in train)
    assert sum("miss" in i for i in train + validation) == 2  # the 12-word runs survive
    entry = stats["decontaminate"]["code"]
    assert entry["removed"] == {"contaminated": {"docs": len(leaked), "bytes": entry["removed"]["contaminated"]["bytes"]}}
    assert entry["docs_in"] - entry["docs_out"] == len(leaked)
    assert stats["decontaminate"]["more"]["removed"] == {}
    assert removed["documents_removed"] == len(leaked) and removed["domains"]["code"]["removed"] == len(leaked)
    assert removed["eval_sources"][0]["name"] == f"file:{corpus / 'eval.txt'}" and removed["ngram"] == 13
    for r in records:
        assert r["action"] == "removed" and r["matches"] == 18 and r["eval_sources"] == [f"file:{corpus / 'eval.txt'}"]
        assert len(r["ngrams"]) == 1 and len(r["ngrams"][0].split()) == 30 and r["ngrams"][0] in r["text"]
        assert r["domain"] == "code"


def test_flag_keeps_the_document_and_marks_its_shard_index(corpus, tmp_path, capsys):
    out = tmp_path / "ds"
    stats = build(corpus, out, capsys, action="flag")
    assert stats["decontaminate"]["code"]["removed"] == {}
    shard = Dataset(out).shard("code", "train")
    train = shard.doc_ids()
    flagged = {train[i] for i in np.flatnonzero(shard.doc_flags & 1)}
    assert flagged and all("leak" in i for i in flagged)
    assert flagged == {i for i in train if "leak" in i}
    records = [json.loads(line) for line in (out / "removed" / "contaminated.jsonl").read_text().splitlines()]
    assert {r["id"] for r in records} == flagged and {r["action"] for r in records} == {"flagged"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["decontamination"]["documents_flagged"] == len(flagged)


def test_a_missing_evaluation_file_is_one_line_and_writes_nothing(corpus, tmp_path, capsys):
    out = tmp_path / "ds"
    path = recipe(corpus, files=[str(corpus / "eval.txt"), str(corpus / "no-such-eval.jsonl")])
    code, _, err = run_cli(["data", "build", path, "--out", out], capsys)
    assert code == 2
    assert "decontaminate.files[1]" in error_line(err) and "no-such-eval.jsonl" in err
    assert not out.exists() and not list(tmp_path.glob(".ds.building-*"))
