"""glassroom data build on real text: dedup, filters, split, shards, manifest, stats."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from data_helpers import make_corpus, write_recipe
from glassroom.data.build import build_dataset
from glassroom.data.mixture import Dataset
from glassroom.data.recipe import load_recipe
from glassroom.folders import OWNED


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    planted = make_corpus(root)
    recipe_path = write_recipe(root)
    log = io.StringIO()
    out = root / "dataset"
    manifest = build_dataset(load_recipe(recipe_path), out, workers=2, log=log)
    return {"root": root, "out": out, "manifest": manifest, "planted": planted, "log": log.getvalue(),
            "stats": json.loads((out / "stats.json").read_text())}


def all_ids(out, domain, split):
    return (out / "shards" / domain / f"{split}.ids.txt").read_text().splitlines()


def test_planted_exact_and_near_duplicates_are_removed(built):
    ids = set(all_ids(built["out"], "email", "train")) | set(all_ids(built["out"], "email", "validation"))
    jsonl_ids = {i.rsplit(":", 1)[1] for i in ids if "extra.jsonl" in i}
    for kind in ("exact", "near", "garbled", "short"):
        for planted in built["planted"][kind]:
            assert planted not in jsonl_ids, f"{planted} survived cleaning"
    stats = built["stats"]
    assert stats["exact_dedup"]["email"]["removed"]["exact_duplicate"]["docs"] >= 5
    assert stats["fuzzy_dedup"]["email"]["removed"]["near_duplicate"]["docs"] >= 5
    assert stats["filter"]["email"]["removed"]["garbled"]["docs"] >= 1
    assert stats["filter"]["email"]["removed"]["too_short"]["docs"] >= 1
    # The originals are kept: dedup removes copies, not the first occurrence.
    assert any("pkg_a" in i for i in ids)


def test_malformed_jsonl_lines_are_skipped_counted_and_reported(built):
    stats = built["stats"]
    assert stats["extract"]["email"]["skipped"] == {"malformed_jsonl": 2, "missing_text_field": 1}
    sources = {s["name"]: s for s in built["manifest"]["domains"]["email"]["sources"]}
    jsonl = next(s for name, s in sources.items() if name.startswith("jsonl:"))
    assert jsonl["skipped"] == {"malformed_jsonl": 2, "missing_text_field": 1}
    assert "skipped 2 malformed JSONL lines (first at" in built["log"]
    assert "skipped 1 records without the text field" in built["log"]
    assert "extra.jsonl:4)" in built["log"]  # line numbers are 1-based


def test_no_validation_document_in_train(built):
    out = built["out"]
    ds = Dataset(out)
    tok = ds.tokenizer()
    for domain in ("email", "web"):
        train, val = set(all_ids(out, domain, "train")), set(all_ids(out, domain, "validation"))
        assert val, f"{domain} has no validation documents"
        assert not train & val
        train_texts = {tok.decode(ds.shard(domain, "train").doc_tokens(i).tolist()) for i in range(ds.shard(domain, "train").n_docs)}
        for i in range(ds.shard(domain, "validation").n_docs):
            assert tok.decode(ds.shard(domain, "validation").doc_tokens(i).tolist()) not in train_texts


def test_shards_round_trip_to_the_cleaned_text(built):
    from glassroom.data.clean import normalize
    from data_helpers import STDLIB

    ds = Dataset(built["out"])
    tok = ds.tokenizer()
    checked = 0
    # Both splits: which documents are held out hashes their ids, and the ids hold the temporary
    # path, so the train share of pkg_a changes with pytest's folder number.
    for split in ("train", "validation"):
        shard = ds.shard("email", split)
        for i, doc_id in enumerate(shard.doc_ids()):
            if "pkg_a" not in doc_id:
                continue
            name = doc_id.rsplit("/", 1)[1]
            original = normalize((STDLIB / "email" / name).read_text())
            assert tok.decode(shard.doc_tokens(i).tolist()) == original
            assert shard.doc_bytes[i] == len(original.encode())
            assert shard.tokens[shard.doc_offsets[i + 1] - 1] == ds.eos_id
            checked += 1
    assert checked >= 10


def test_manifest_and_stats_describe_the_dataset(built):
    m = built["manifest"]
    assert m == json.loads((built["out"] / "manifest.json").read_text())
    assert m["dtype"] == "uint16" and m["tokenizer"]["vocab_size"] == 1024 and m["tokenizer"]["eos_id"] == 0
    assert m["recipe_hash"].startswith("sha256:") and m["recipe"]["name"] == "stdlib-test"
    for domain in ("email", "web"):
        for split in ("train", "validation"):
            info = m["domains"][domain][split]
            tokens = np.fromfile(built["out"] / info["tokens_file"], dtype=np.uint16)
            assert len(tokens) == info["tokens"] > 0
            assert info["bytes_per_token"] == pytest.approx(info["bytes"] / info["tokens"], rel=1e-3)
    stats = built["stats"]
    for domain in ("email", "web"):
        # Every stage's output is the next stage's input, and removals account for the difference.
        for before, after in zip(stats["stages"][1:], stats["stages"][2:]):
            assert stats[before][domain]["docs_out"] == stats[after][domain]["docs_in"]
        for stage in stats["stages"]:
            e = stats[stage][domain]
            removed = sum(r["docs"] for r in e["removed"].values())
            assert e["docs_in"] - removed == e["docs_out"]
        split = stats["split"][domain]
        contaminated = stats["decontaminate"][domain]["removed"].get("contaminated", {"docs": 0})["docs"]
        assert split["train_docs"] - contaminated == m["domains"][domain]["train"]["documents"]
        assert split["validation_docs"] == m["domains"][domain]["validation"]["documents"]
    assert not list(built["root"].glob(".dataset.*")), "temporary build folders left behind"


def tree(root):
    """Every file under root (relative path -> bytes), build.json and the ownership manifest (it holds
    build.json's sha256) left out."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in ("build.json", OWNED)}


def test_same_recipe_builds_the_same_bytes_with_any_workers(built, tmp_path):
    """Two local builds (2 workers and 1) write the same bytes in every file but build.json."""
    manifest = build_dataset(load_recipe(built["root"] / "recipe.yaml"), tmp_path / "again", workers=1, log=io.StringIO())
    assert manifest["recipe_hash"] == built["manifest"]["recipe_hash"]
    a, b = tree(built["out"]), tree(tmp_path / "again")
    assert sorted(a) == sorted(b) and "manifest.json" in a and "shards/web/train.idx.npz" in a
    assert [k for k in a if a[k] != b[k]] == []
    info = json.loads((tmp_path / "again" / "build.json").read_text())
    assert info["executor"] == "local" and info["workers"] == 1 and info["seconds"] >= 0 and "created" in info
    assert json.loads((built["out"] / "build.json").read_text())["workers"] == 2


def test_manifest_is_deterministic_and_records_the_new_stages(built):
    """created and build_seconds live in build.json; the manifest has the dedup and decontamination
    entries and the encoder; shard indexes carry doc_quality, doc_bucket and doc_flags."""
    from glassroom.data.shards import Shard

    m = built["manifest"]
    assert "created" not in m and "build_seconds" not in m
    assert m["dedup"]["threshold"] == 0.8 and m["dedup"]["bands"] * m["dedup"]["rows"] <= m["dedup"]["num_perm"]
    assert m["dedup"]["clusters"] >= 5 and m["dedup"]["examples_file"] == "removed/duplicates.jsonl"
    assert m["decontamination"]["ngram"] == 13
    assert m["tokenizer"]["encoder"]["kind"] == "tiktoken" and m["tokenizer"]["encoder"]["checked_documents"] > 0
    records = [json.loads(line) for line in (built["out"] / "removed" / "duplicates.jsonl").read_text().splitlines()]
    assert len(records) == m["dedup"]["clusters"]
    for rec in records:
        assert rec["removed"] and all(r["index"] > rec["kept"]["index"] for r in rec["removed"])
        assert all(r["reason"] in ("exact_duplicate", "near_duplicate") for r in rec["removed"])
    stats = built["stats"]
    assert stats["stages"] == ["extract", "normalize", "filter", "exact_dedup", "fuzzy_dedup", "split",
                               "decontaminate", "quality", "tokenize"]
    shard = Shard(built["out"], "web", "train", m["dtype"])
    assert shard.doc_flags is not None and len(shard.doc_flags) == shard.n_docs
    assert not (shard.doc_flags & 1).any()  # action remove: nothing contaminated stays in train
    overlaps = (m["decontamination"] or {}).get("documents_overlapping_kept", 0)
    assert int(((shard.doc_flags & 2) > 0).sum()) <= overlaps  # documents that only overlap are marked, in train
    assert shard.doc_bucket is not None and len(shard.doc_bucket) == shard.n_docs
    if m["quality"] is None:
        assert (shard.doc_bucket == -1).all() and "cells" not in m["domains"]["web"]["train"]
    else:
        assert (np.diff(shard.doc_bucket) >= 0).all(), "documents are not ordered by quality bucket"
        cells = m["domains"]["web"]["train"]["cells"]
        assert sum(c["documents"] for c in cells) == shard.n_docs
        for c in cells:
            lo, hi = c["doc_range"]
            assert (shard.doc_bucket[lo:hi] == c["bucket"]).all()
            assert c["token_range"] == [int(shard.doc_offsets[lo]), int(shard.doc_offsets[hi])]


def test_an_existing_tokenizer_can_be_reused(built, tmp_path):
    recipe = load_recipe(built["root"] / "recipe.yaml", [f"tokenizer.path={built['out'] / 'tokenizer.json'}"])
    manifest = build_dataset(recipe, tmp_path / "reuse", workers=1, log=io.StringIO())
    assert manifest["tokenizer"]["origin"] == "loaded"
    assert (tmp_path / "reuse" / "tokenizer.json").read_bytes() == (built["out"] / "tokenizer.json").read_bytes()
    assert manifest["domains"]["web"]["train"]["tokens"] == built["manifest"]["domains"]["web"]["train"]["tokens"]


def test_a_tokenizer_without_eos_is_refused(built, tmp_path):
    from glassroom.data.tokenizer import load_tokenizer
    from glassroom.errors import GlassroomError

    data = json.loads((built["out"] / "tokenizer.json").read_text())
    data["added_tokens"] = []
    data["model"]["vocab"].pop("<|endoftext|>")
    (tmp_path / "noeos.json").write_text(json.dumps(data))
    with pytest.raises(GlassroomError, match="has no <\\|endoftext\\|> token"):
        load_tokenizer(tmp_path / "noeos.json")
