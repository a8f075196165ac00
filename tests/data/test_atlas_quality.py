"""The atlas's quality, dedup and decontamination sections (the contract F's browser reads): points
carry split, doc, id and quality bucket; cells of domain x bucket with the manifest's shares and
examples; the classifier's entry; null on a dataset built before quality; the removed-record paths
when the build wrote them."""

from __future__ import annotations

import io
import json
import shutil

import numpy as np
import pytest

from glassroom.data import shards
from glassroom.data.atlas import build_atlas
from glassroom.data.mixture import Dataset
from glassroom.data.shards import SPLITS


@pytest.fixture(scope="module")
def copy(tiny_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("atlas-quality") / "tiny"
    shutil.copytree(tiny_dataset, out)
    return out


def test_quality_cells_and_points(copy):
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest.get("quality"), "the build now scores quality by default"
    atlas = build_atlas(copy, k=3, log=io.StringIO(), write=False)
    q, pts = atlas["quality"], atlas["points"]
    n_buckets = manifest["quality"]["buckets"]
    assert q["buckets"] == n_buckets and q["shares"] == "manifest"
    assert "cutoffs" not in q["classifier"] and q["classifier"]["file"] == manifest["quality"]["file"]
    assert len(q["cells"]) == n_buckets * len(atlas["domains"])
    assert abs(sum(c["doc_share"] for c in q["cells"]) - 1) < 1e-9 and abs(sum(c["token_share"] for c in q["cells"]) - 1) < 1e-9
    # The shares are the manifest's cells over both splits.
    total = sum(e[s]["documents"] for e in manifest["domains"].values() for s in SPLITS)
    for c in q["cells"]:
        docs = sum(x["documents"] for s in SPLITS for x in manifest["domains"][c["domain"]][s].get("cells", []) if x["bucket"] == c["bucket"])
        assert c["doc_share"] == pytest.approx(docs / total)
        assert len(c["examples"]) == min(5, c["documents"]) and all(len(x["text"]) <= 501 and x["domain"] == c["domain"] for x in c["examples"])
    assert sum(c["documents"] for c in q["cells"]) == atlas["sampling"]["sampled"]
    # Each point's bucket is its own document's, read from its shard by (domain, split, doc).
    ds = Dataset(copy)
    want = [int(ds.shard(ds.domains[d], SPLITS[s]).doc_bucket[i]) for d, s, i in zip(pts["domain"], pts["split"], pts["doc"])]
    assert pts["quality"] == want and len(set(want)) == n_buckets
    ids = {d: {s: ds.shard(d, s).doc_ids() for s in SPLITS} for d in ds.domains}
    assert pts["id"] == [ids[ds.domains[d]][SPLITS[s]][i] for d, s, i in zip(pts["domain"], pts["split"], pts["doc"])]
    assert set(atlas["dedup"]["removed_by_domain"]) == set(atlas["domains"]) and "threshold" in atlas["dedup"]
    assert set(atlas["removed"]) == {"duplicates", "contaminated"}
    for path in atlas["removed"].values():
        assert path is None or (copy / path).is_file()


def test_an_older_dataset_has_no_quality(copy, tmp_path, monkeypatch):
    old = tmp_path / "old"
    shutil.copytree(copy, old)
    manifest = json.loads((old / "manifest.json").read_text())
    for key in ("quality", "dedup", "decontamination"):
        manifest.pop(key, None)
    for e in manifest["domains"].values():
        for s in SPLITS:
            e[s].pop("cells", None)
    (old / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(old / "removed", ignore_errors=True)
    stats = json.loads((old / "stats.json").read_text())
    stats.pop("decontaminate", None)
    stats.pop("quality", None)
    (old / "stats.json").write_text(json.dumps(stats))
    monkeypatch.setattr(shards, "_read_extras", lambda path, n: (None, None, None))   # an index without them
    atlas = build_atlas(old, k=3, log=io.StringIO(), write=False)
    assert atlas["quality"] is None and set(atlas["points"]["quality"]) == {None}
    assert atlas["removed"] == {"duplicates": None, "contaminated": None} and atlas["decontamination"] is None
    assert len(atlas["points"]["id"]) == len(atlas["points"]["x"])


def test_buckets_without_manifest_cells_are_estimated(copy, tmp_path, monkeypatch):
    est = tmp_path / "est"
    shutil.copytree(copy, est)
    manifest = json.loads((est / "manifest.json").read_text())
    for e in manifest["domains"].values():
        for s in SPLITS:
            e[s].pop("cells", None)
    (est / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(shards, "_read_extras", lambda path, n: (None, (np.arange(n) % 2).astype(np.int8), None))
    q = build_atlas(est, k=3, log=io.StringIO(), write=False)["quality"]
    assert q["shares"] == "estimated from the sample"
    assert abs(sum(c["doc_share"] for c in q["cells"]) - 1) < 1e-9
    assert all(c["documents"] == 0 and c["doc_share"] == 0 for c in q["cells"] if c["bucket"] >= 2)


def test_a_hand_edited_manifest_is_no_traceback(copy, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(copy, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["quality"].update(heldout_accuracy=float("nan"), buckets=True)
    manifest["dedup"] = {"threshold": float("inf"), "curve": [[0.8, float("nan")]]}
    domain = next(iter(manifest["domains"]))
    manifest["domains"][domain]["train"]["cells"] = [{"bucket": 0, "documents": "many", "tokens": None}, "junk", {"bucket": True}]
    manifest["domains"][domain]["validation"]["cells"] = {"not": "a list"}
    (bad / "manifest.json").write_text(json.dumps(manifest))
    atlas = build_atlas(bad, k=2, log=io.StringIO())   # written with allow_nan=False: no NaN left
    written = json.loads((bad / "atlas" / "atlas.json").read_text())
    assert written["quality"]["classifier"]["heldout_accuracy"] is None
    assert written["dedup"]["threshold"] is None and written["dedup"]["curve"] == [[0.8, None]]
    assert atlas["quality"]["buckets"] == max(b for b in atlas["points"]["quality"] if b is not None) + 1
    assert atlas["quality"]["shares"] == "estimated from the sample"
