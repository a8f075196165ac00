"""The atlas's document browser (glassroom/web/atlas_docs.py, frontend/atlas-docs.js): collections of a
real built dataset (clusters, quality buckets and cells, duplicate clusters, contaminated documents),
paged and searched through the live API and the published pages, with planted secrets that never
come out, hostile requests, and one Chromium pass over the published atlas."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from data_helpers import STDLIB, near_copy
from web_helpers import Chromium, chromium_path, free_port

# Token shapes the redaction must catch; each is planted in documents that end up in a cluster,
# a duplicate cluster and the contaminated set.
SECRET_GH = "ghp_" + "Zq8" * 12
SECRET_HF = "hf_" + "Kx7Lm2Pq9" * 3
SECRETS = (SECRET_GH, SECRET_HF, SECRET_GH[4:20], SECRET_HF[3:20])   # nor any long piece of them
LEAK = ("the lighthouse keeper counted every ship that passed the northern rocks at night and wrote "
        "each name into a ledger bound in green cloth")


def _planted_docs() -> list[dict]:
    """Documents of real text (stdlib module sources cut into pieces) with planted cases: an exact
    copy and a near copy (each carrying a secret), and one that quotes the evaluation file."""
    texts = []
    for path in sorted((STDLIB / "email").glob("*.py"))[:30]:
        body = path.read_text(encoding="utf-8")
        if len(body) > 3000:
            texts.append(body[:6000])
    docs = [{"id": f"doc-{i}", "text": t} for i, t in enumerate(texts)]
    secret_doc = texts[0] + f"\n# deploy with token {SECRET_GH} and {SECRET_HF}\n"
    docs[0]["text"] = secret_doc
    docs.append({"id": "copy-exact", "text": secret_doc})
    docs.append({"id": "copy-near", "text": near_copy(secret_doc)})
    other = (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8")[:5000]   # like no other document
    docs.append({"id": "leaky", "text": other + "\n" + LEAK + f"\nAPI token {SECRET_GH}\n"})
    return docs


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    """A lab folder holding data/small: bible prose, stdlib code and the planted documents, built
    with dedup, quality and decontamination against an evaluation file, and its atlas (k=3)."""
    from glassroom.data.atlas import build_atlas
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe

    root = tmp_path_factory.mktemp("browser")
    src = root / "src"
    src.mkdir()
    (src / "planted.jsonl").write_text("".join(json.dumps(d) + "\n" for d in _planted_docs()))
    (src / "eval.txt").write_text("A question from the evaluation set: " + LEAK + ".\n")
    recipe = {
        "name": "small",
        "domains": {
            "prose": {"sources": [{"kind": "bible", "max_bytes": "400K"}]},
            "code": {"sources": [{"kind": "python-stdlib", "max_bytes": "400K"},
                                 # Pinned to train: a document's id holds the temporary path, so a hash split
                                 # would put a planted case in validation (never scanned) for some pytest-N.
                                 {"kind": "jsonl", "path": str(src / "planted.jsonl"), "id_field": "id",
                                  "split": "train"}]},
        },
        "split": {"validation_fraction": 0.05},
        "tokenizer": {"vocab_size": 1024, "sample_bytes": "600K"},
        "quality": {"sample_docs": 400},
        "decontaminate": {"files": [str(src / "eval.txt")]},
    }
    (src / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    (root / "lab" / "data").mkdir(parents=True)
    out = root / "lab" / "data" / "small"
    build_dataset(load_recipe(src / "recipe.yaml"), out, workers=1, log=io.StringIO())
    build_atlas(out, k=3, sample=20_000, log=io.StringIO())
    return root / "lab"


@pytest.fixture(scope="module")
def docs(lab):
    from glassroom.web.atlas_docs import DatasetDocs

    return DatasetDocs(lab, lab / "data" / "small", "data/small")


@pytest.fixture(scope="module")
def server(lab):
    """`glassroom serve` over the lab (the live path: its JSON errors, CSP, host guard)."""
    from web_helpers import Server

    with Server(lab) as s:
        yield s


def _get(url: str) -> tuple[int, dict | bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            body = r.read()
            return r.status, json.loads(body) if r.headers.get("content-type", "").startswith("application/json") else body
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body
    except urllib.error.URLError:   # not listening yet
        return None, b""


def _api(server, **params) -> tuple[int, dict]:
    return _get(server.url + "/api/atlas/docs?" + urllib.parse.urlencode({"dataset": "data/small", **params}))


def _all_pages(server, collection: str, **params) -> list[dict]:
    status, first = _api(server, collection=collection, **params)
    assert status == 200, first
    out = list(first["docs"])
    for page in range(2, first["pages"] + 1):
        status, body = _api(server, collection=collection, page=page, **params)
        assert status == 200 and body["page"] == page
        out += body["docs"]
    assert len(out) == first["total"]
    return out


@pytest.mark.slow
def test_collections_and_planted_cases(docs, lab):
    have = docs.collections()
    n = have["all"]
    assert n > 100 and sum(have[f"cluster:{j}"] for j in range(3)) == n
    assert sum(have[f"quality:{q}"] for q in range(5)) == n
    assert sum(v for k, v in have.items() if k.startswith("cell:")) == n
    # The exact and near copies of doc-0 form one duplicate cluster: doc-0 kept (first in build order).
    dup = [d for d in (docs.page("duplicates", p)["docs"] for p in range(1, 2 + have["duplicates"] // 20)) for d in d]
    ours = [d for d in dup if d["kept"]["id"].endswith(":doc-0")]
    assert len(ours) == 1, [d["kept"]["id"] for d in dup]
    removed = {m["id"].rsplit(":", 1)[-1]: m for m in ours[0]["removed"]}
    assert {"copy-exact", "copy-near"} <= set(removed)
    assert removed["copy-exact"]["reason"] == "exact_duplicate" and removed["copy-near"]["jaccard"] >= 0.8
    # The document quoting the evaluation file is contaminated; its leaked n-grams are marked in the text.
    cont = docs.page("contaminated", 1, "lighthouse")["docs"]
    assert [d["id"].rsplit(":", 1)[-1] for d in cont] == ["leaky"]
    text = cont[0]["text"]
    assert cont[0]["ngrams"] and any(text[a:b].lower().startswith("the lighthouse") or "lighthouse" in text[a:b].lower()
                                     for a, b in cont[0]["marks"])
    # A point document: decoded whole from its shard, with its quality bucket and score.
    page = docs.page("cluster:0", 1)
    d = page["docs"][0]
    assert page["total"] == have["cluster:0"] and d["cluster"] == 0 and d["quality"] in range(5) and 0 <= d["score"] <= 1
    assert len(d["text"]) > 200 and not d["text"].startswith(" ")


def test_text_is_the_whole_document(docs):
    """A document's text is its whole decoded shard document (when under 64 KB), not the atlas excerpt."""
    from glassroom.data.mixture import Dataset

    ds = Dataset(docs.folder)
    tok = ds.tokenizer()
    d = max(docs.page("all", 1)["docs"], key=lambda x: x["tokens"])
    shard = ds.shard(d["domain"], d["split"])
    whole = tok.decode(shard.doc_tokens(d["doc"]).tolist())
    assert d["text"] == whole and not d["cut"] and len(whole) > 1000


def test_api_paging_search_and_equal_to_published(server, docs, lab, tmp_path):
    from glassroom.web.atlas_page import publish_atlases
    from glassroom.web.atlas_docs_serve import STATIC_DOC_CHARS

    status, body = _api(server, collection="cluster:1")
    assert status == 200 and body["collection"] == "cluster:1" and body["page_size"] == 20
    live = _all_pages(server, "cluster:1")
    assert [d["n"] for d in live] == sorted(d["n"] for d in live) and all(d["cluster"] == 1 for d in live)
    # Search: every hit contains the text, and every document of the collection that contains it is a hit.
    word = "jacob"
    hits = _all_pages(server, "all", q="Jacob")
    every = _all_pages(server, "all")
    assert hits and {d["n"] for d in hits} == {d["n"] for d in every if word in d["text"].lower() or word in d["id"].lower()}
    status, body = _api(server, collection="all", q="Jacob")
    assert body["scan"] == {"from": 0, "to": len(every), "of": len(every), "complete": True}
    # Published pages hold the same documents as the live API, texts cut at STATIC_DOC_CHARS.
    site = tmp_path / "site"
    assert publish_atlases(lab, site) == ["data/small"]
    base = site / "atlas" / "d" / "data" / "small" / "docs"
    index = json.loads((base / "index.json").read_text())
    assert index["collections"]["all"]["total"] == len(every)
    published = [d for p in range(1, index["clusters"]["1"]["pages"] + 1) for d in json.loads((base / f"cluster-1-{p}.json").read_text())]
    for a, b in zip(live, published, strict=True):
        assert {k: v for k, v in a.items() if k not in ("text", "cut")} == {k: v for k, v in b.items() if k not in ("text", "cut")}
        assert b["text"] == a["text"] if len(a["text"]) <= STATIC_DOC_CHARS else b["text"] == a["text"][:STATIC_DOC_CHARS].rstrip() + "…"
    for kind in ("duplicates", "contaminated"):
        live = _all_pages(server, kind)
        pub = [d for p in range(1, index["collections"][kind]["pages"] + 1) for d in json.loads((base / f"{kind}-{p}.json").read_text())]
        assert [d["n"] for d in live] == [d["n"] for d in pub] and live
    total = sum(p.stat().st_size for p in base.iterdir())
    print(f"published documents: {total:,} bytes for {index['collections']['all']['total']} sampled documents")


def test_secrets_never_come_out(server, lab, tmp_path):
    """A planted token in documents (a cluster's, a duplicate cluster's, a contaminated one's) is
    redacted in every response and published file, and searching for it finds nothing."""
    from glassroom.web.atlas_page import publish_atlases

    bodies = []
    for collection in ("all", "cluster:0", "cluster:1", "cluster:2", "quality:0", "quality:4", "duplicates", "contaminated"):
        status, body = _api(server, collection=collection)
        bodies.append(json.dumps(body))
        for page in range(2, body["pages"] + 1):
            bodies.append(json.dumps(_api(server, collection=collection, page=page)[1]))
    joined = "\n".join(bodies)
    assert "<redacted>" in joined and "deploy with token" in joined
    for secret in SECRETS:
        assert secret not in joined
        for collection in ("all", "duplicates", "contaminated"):
            status, body = _api(server, collection=collection, q=secret)
            assert status == 200 and body["total"] == 0, (collection, secret)
            assert secret not in json.dumps(body["docs"])   # (body["q"] echoes the query, redacted)
    site = tmp_path / "site"
    publish_atlases(lab, site)
    for path in site.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(s.encode() in data for s in SECRETS), path


@pytest.mark.parametrize("query, status, message", [
    ({"collection": "all"}, 400, "dataset="),
    ({"dataset": "data/small", "dataset2": "x"}, 200, None),
    ({"dataset": "../../etc", "collection": "all"}, 404, "no dataset"),
    ({"dataset": "data/small/shards", "collection": "all"}, 404, "no dataset"),
    ({"dataset": "data/small", "collection": "cluster:3"}, 404, "no collection"),
    ({"dataset": "data/small", "collection": "cluster:-1"}, 404, "no collection"),
    ({"dataset": "data/small", "collection": "cluster:../../x"}, 404, "no collection"),
    ({"dataset": "data/small", "collection": "quality:5"}, 404, "no collection"),
    ({"dataset": "data/small", "collection": "cell:nope:1"}, 404, "no collection"),
    ({"dataset": "data/small", "collection": "cell:prose:9"}, 404, "no collection"),
    ({"dataset": "data/small", "collection": "x" * 301}, 400, "longer than 300"),
    ({"dataset": "data/small", "page": "0"}, 400, "numbered from 1"),
    ({"dataset": "data/small", "page": "-1"}, 400, "whole number"),
    ({"dataset": "data/small", "page": "1.5"}, 400, "whole number"),
    ({"dataset": "data/small", "page": "²"}, 400, "whole number"),
    ({"dataset": "data/small", "page": "9" * 30}, 400, "whole number"),
    ({"dataset": "data/small", "page": "999999999"}, 404, "page 999999999"),
    ({"dataset": "data/small", "q": "x" * 201}, 400, "longer than 200"),
    ({"dataset": "data/small", "q": "a\x00b"}, 400, "NUL"),
    ({"dataset": "data/small", "q": "the", "from": "999999999"}, 404, "from="),
    ({"dataset": "data/small", "q": "the", "from": "-5"}, 400, "whole number"),
])
def test_hostile_requests(server, query, status, message):
    got, body = _get(server.url + "/api/atlas/docs?" + urllib.parse.urlencode(query))
    assert got == status, body
    if message:
        assert message in body["error"] and "\n" not in body["error"] and "Traceback" not in body["error"]
    got, body = _get(server.url + "/api/atlas/docs?dataset=data/small&page=1&page=2")
    assert got == 400 and "at most one page=" in body["error"]


def test_damaged_and_old_files(lab, tmp_path):
    """An atlas from before the browser, a damaged atlas, a removed file with a broken line, and a
    removed file that is a symlink out of the root: one-line answers, the rest still readable."""
    from glassroom.web.atlas_docs import BrowseError, DatasetDocs

    root = tmp_path / "root"
    shutil.copytree(lab / "data" / "small", root / "small", ignore=shutil.ignore_patterns("shards"))
    (root / "small" / "shards").symlink_to(lab / "data" / "small" / "shards")   # outside root: not read
    atlas = json.loads((root / "small" / "atlas" / "atlas.json").read_text())
    d = DatasetDocs(root, root / "small", "small")
    entry = d.page("all", 1)["docs"][0]
    assert entry["text"] == "" and "not in the dataset's shard" in entry["error"]
    # Old atlas: no split/doc columns.
    old = {**atlas, "points": {k: v for k, v in atlas["points"].items() if k not in ("split", "doc", "id", "quality")}}
    (root / "small" / "atlas" / "atlas.json").write_text(json.dumps(old))
    with pytest.raises(BrowseError, match="before the document browser") as exc:
        DatasetDocs(root, root / "small", "small").page("cluster:0")
    assert exc.value.status == 404
    assert DatasetDocs(root, root / "small", "small").page("duplicates")["total"] >= 1
    # Damaged atlas: points out of range, or not JSON.
    bad = {**atlas, "points": {**atlas["points"], "domain": [99] * len(atlas["points"]["domain"])}}
    (root / "small" / "atlas" / "atlas.json").write_text(json.dumps(bad))
    with pytest.raises(BrowseError, match="out of range") as exc:
        DatasetDocs(root, root / "small", "small")
    assert exc.value.status == 503
    for hostile in ({**atlas, "k": 10**12}, {**atlas, "k": "3"}, {**atlas, "quality": {**atlas["quality"], "buckets": 10**12}}):
        (root / "small" / "atlas" / "atlas.json").write_text(json.dumps(hostile))
        with pytest.raises(BrowseError, match="not a number") as exc:
            DatasetDocs(root, root / "small", "small")
        assert exc.value.status == 503
    (root / "small" / "atlas" / "atlas.json").write_text("{not json")
    with pytest.raises(BrowseError, match="cannot be read as JSON"):
        DatasetDocs(root, root / "small", "small")
    (root / "small" / "atlas" / "atlas.json").write_text(json.dumps(atlas))
    # A broken line and a record of the wrong shape in contaminated.jsonl: shown as errors, the rest read.
    path = root / "small" / "removed" / "contaminated.jsonl"
    path.write_text(path.read_text() + '{"cut off\n[1, 2]\n{"text": 5, "ngrams": "x", "matches": 1e999}\n')
    page = DatasetDocs(root, root / "small", "small").page("contaminated")
    assert "not readable JSON" in page["docs"][-3]["error"] and "not a JSON object" in page["docs"][-2]["error"]
    assert page["docs"][-1]["text"] == "" and page["docs"][-1]["ngrams"] == [] and page["docs"][-1]["matches"] is None
    # removed/duplicates.jsonl as a symlink leaving the root: treated as absent.
    dup = root / "small" / "removed" / "duplicates.jsonl"
    dup.unlink()
    dup.symlink_to(lab / "data" / "small" / "removed" / "duplicates.jsonl")
    with pytest.raises(BrowseError, match="has no removed/duplicates.jsonl"):
        DatasetDocs(root, root / "small", "small").page("duplicates")


needs_chromium = pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)")


@pytest.mark.browser
@needs_chromium
def test_published_browser_in_chromium(lab, tmp_path):
    """The published atlas: open a cluster, read a document, page, search, open the duplicates and
    a quality cell; the live page shares this code (its API is tested over HTTP above)."""
    from glassroom.web.atlas_page import publish_atlases
    from web_helpers import REPO

    site = tmp_path / "site"
    publish_atlases(lab, site)
    shutil.copytree(REPO / "glassroom" / "web" / "frontend", site / "static", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("node_modules", "*.html", "package*.json"))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_docs = "ATLAS_DOCS.loads > {n} && !ATLAS_DOCS.busy"
    try:
        deadline = time.time() + 20
        while _get(f"http://127.0.0.1:{port}/atlas/index.html")[0] != 200:
            assert time.time() < deadline
            time.sleep(0.1)
        with Chromium(width=1440, height=1000) as b:
            b.navigate(f"http://127.0.0.1:{port}/atlas/d/data/small/index.html", ready="window.ATLAS && ATLAS.ready === true", timeout=60)
            assert b.eval("ATLAS.error || null") is None
            atlas = b.eval("ATLAS.data")
            sizes = [sum(1 for c in atlas["points"]["cluster"] if c == j) for j in range(3)]
            j = max(range(3), key=lambda j: sizes[j])
            # A cluster's link opens its first page of documents.
            b.eval(f"document.querySelector('#clusters li.cluster[data-id=\"{j}\"] a.docs-link').click(); 0")
            b.wait_for(wait_docs.format(n=0), timeout=30)
            assert b.eval("ATLAS_DOCS.error") is None and not b.eval("document.getElementById('docs-panel').hidden")
            assert b.eval("ATLAS_DOCS.result.total") == sizes[j] and f"page 1 of {-(-sizes[j] // 20)}" in b.eval("document.getElementById('docs-status').textContent")
            items = b.eval("[...document.querySelectorAll('#docs-list li.doc')].map(li => [li.dataset.id, li.querySelector('pre').textContent.length])")
            assert len(items) == min(20, sizes[j]) and all(n > 0 for _, n in items)
            first = b.eval("document.querySelector('#docs-list li.doc .doc-meta').textContent")
            assert f"cluster #{j}" in first and "quality q" in first
            # Next page.
            b.eval("document.getElementById('docs-next').click(); 0")
            b.wait_for(wait_docs.format(n=1), timeout=30)
            assert b.eval("ATLAS_DOCS.page") == 2 and b.eval("ATLAS_DOCS.result.docs[0].n") != b.eval("ATLAS_DOCS.result.docs[1].n")
            # Search inside the cluster: every listed document holds the text, marked.
            word = "self" if "code" in first else "the"
            b.eval(f"document.getElementById('docs-q').value = '{word}'; document.querySelector('#docs-search button').click(); 0")
            b.wait_for(wait_docs.format(n=2), timeout=60)
            texts = b.eval("ATLAS_DOCS.result.docs.map(d => d.text.toLowerCase())")
            assert texts and all(word in t for t in texts)
            assert b.eval("document.querySelectorAll('#docs-list mark.hit').length") > 0
            # Each text is scrolled to its first match, which is then in view.
            assert b.eval("""[...document.querySelectorAll('#docs-list pre.doc-text')].every(pre => { const m = pre.querySelector('mark');
              return !m || (m.offsetTop >= pre.scrollTop && m.offsetTop < pre.scrollTop + pre.clientHeight); })""")
            # The duplicates row of the funnel: the kept and removed documents of each cluster.
            b.eval("document.getElementById('read-duplicates').click(); 0")
            b.wait_for(wait_docs.format(n=3), timeout=30)
            assert b.eval("ATLAS_DOCS.collection") == "duplicates" and b.eval("ATLAS_DOCS.result.total") >= 1
            assert b.eval("document.querySelectorAll('#docs-list .dup-member.kept').length") >= 1
            assert "copy-exact" in b.eval("document.getElementById('docs-list').textContent")
            # Contaminated: the leaked n-grams marked; a quality cell opens its documents.
            b.eval("document.getElementById('read-contaminated').click(); 0")
            b.wait_for(wait_docs.format(n=4), timeout=30)
            assert b.eval("document.querySelectorAll('#docs-list mark.leak').length") >= 1
            cells = [c for c in atlas["quality"]["cells"]]
            assert b.eval("document.querySelectorAll('#quality a[data-collection^=\"cell:\"]').length") == len(cells)
            assert b.eval("document.querySelectorAll('#quality details.cell-examples').length") == sum(1 for c in cells if c["examples"])
            b.eval("document.querySelector('#quality a[data-collection^=\"cell:\"]').click(); 0")
            b.wait_for(wait_docs.format(n=5), timeout=30)
            assert b.eval("ATLAS_DOCS.error") is None and b.eval("ATLAS_DOCS.collection").startswith("cell:")
            page_text = b.eval("document.body.innerText")
            assert not any(s in page_text for s in SECRETS)
    finally:
        proc.terminate()
        proc.wait(10)


def test_search_is_bounded_and_continues(docs, monkeypatch):
    """A search reads at most SCAN_DOCS documents per request and says where it stopped; `from`
    goes on from there, and the windows together find what one unbounded search finds."""
    from glassroom.web import atlas_docs

    whole = docs.page("all", 1, "the")
    n = docs.collections()["all"]
    assert whole["scan"]["complete"] and whole["scan"]["to"] == n
    monkeypatch.setattr(atlas_docs, "SCAN_DOCS", 30)
    found, start = [], 0
    while True:
        r = docs.page("all", 1, "the", start)
        assert r["scan"]["from"] == start and 0 < r["scan"]["to"] - start <= 30 and r["scan"]["complete"] is False
        found += [d["n"] for p in range(1, r["pages"] + 1) for d in docs.page("all", p, "the", start)["docs"]]
        if r["scan"]["to"] >= n:
            break
        start = r["scan"]["to"]
    assert start > 0 and len(found) == whole["total"]


def test_publish_rewrites_only_what_changed(lab, tmp_path):
    from glassroom.web.atlas_page import publish_atlases

    site = tmp_path / "site"
    (site / "atlas" / "d" / "data" / "small" / ".docs.tmp-1").mkdir(parents=True)   # an interrupted publish's
    publish_atlases(lab, site)
    base = site / "atlas" / "d" / "data" / "small" / "docs"
    page = base / "cluster-0-1.json"
    before = page.stat().st_mtime_ns
    time.sleep(0.01)
    publish_atlases(lab, site)
    assert page.stat().st_mtime_ns == before          # unchanged sources: kept
    removed = lab / "data" / "small" / "removed" / "contaminated.jsonl"
    saved = removed.read_bytes()
    try:
        lines = saved.splitlines(keepends=True)
        removed.write_bytes(b"".join(lines[:1]))
        publish_atlases(lab, site)
        assert json.loads((base / "index.json").read_text())["collections"]["contaminated"]["total"] == 1
        assert not (base / "contaminated-2.json").exists() and page.stat().st_mtime_ns != before
        assert not list(base.parent.glob(".docs*"))   # no temporary folder left
    finally:
        removed.write_bytes(saved)


def test_a_removed_file_with_too_many_lines_is_listed_up_to_the_cap(tmp_path, monkeypatch):
    from glassroom.web import atlas_docs

    monkeypatch.setattr(atlas_docs, "MAX_RECORDS", 1000)
    path = tmp_path / "contaminated.jsonl"
    path.write_bytes(b'{"id": "x", "text": "t"}\n\n' * 50_000)
    f = atlas_docs.RecordFile(path)
    assert len(f) == 1000 and f.record(999) == {"id": "x", "text": "t"}


def test_live_cache_follows_a_rebuilt_atlas(lab, tmp_path):
    """The server keeps one DatasetDocs per dataset until its atlas, manifest or removed files change."""
    import os

    from glassroom.web.atlas_docs_serve import Browser

    root = tmp_path / "root"
    shutil.copytree(lab / "data" / "small", root / "small")
    b = Browser(root)
    first = b.dataset("small", root / "small")
    assert b.dataset("small", root / "small") is first
    path = root / "small" / "atlas" / "atlas.json"
    atlas = json.loads(path.read_text())
    atlas["points"]["cluster"] = [0] * len(atlas["points"]["cluster"])   # a rebuilt atlas: one cluster holds all
    path.write_text(json.dumps(atlas))
    os.utime(path, ns=(1, 1))
    again = b.dataset("small", root / "small")
    assert again is not first and again.page("cluster:0")["total"] == len(atlas["points"]["cluster"])


@pytest.mark.slow
def test_reading_documents_never_imports_torch(lab):
    code = ("import sys; from pathlib import Path; from glassroom.web.atlas_docs import DatasetDocs; "
            f"d = DatasetDocs(Path({str(lab)!r}), Path({str(lab / 'data' / 'small')!r}), 'data/small'); "
            "assert d.page('cluster:0')['docs'][0]['text']; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
