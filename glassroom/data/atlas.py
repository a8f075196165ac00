"""The data composition atlas: what a built dataset holds, as clusters of documents on a map.

`build_atlas(DATA_DIR)` samples documents (uniformly over documents, or the same number from each
domain), decodes at most `max_tokens` tokens of each back to text with the dataset's tokenizer
(spread windows from its start to its end: embed.spread_windows), embeds them offline (glassroom.data.embed), clusters them with spherical k-means (optionally
fine-to-coarse), labels each cluster by class-based TF-IDF, picks the documents nearest each centre
as excerpts, estimates each cluster's share of the corpus's documents and tokens (each sampled
document weighs as many documents of its domain as it stands for), and places the sample on a 2-D
map. Beside that it keeps what the page shows about the build: the processing funnel (stats.json),
the mixture at a planned budget, the tokenizer, and the build's quality cells (domain x quality
bucket: shares and examples, each point's bucket), dedup and decontamination entries and the paths
of its removed-document records (read defensively: an older dataset gives null). All of it goes into DATA_DIR/atlas/atlas.json,
written under a temporary name and renamed. The same seed gives the same file, timings aside.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

import numpy as np

from glassroom.data import cluster, embed, languages
from glassroom.data.embed import spread_windows
from glassroom.data.mixture import Dataset, check_weights
from glassroom.data.progress import Progress
from glassroom.data.shards import SPLITS
from glassroom.data.staging import COMMAND
from glassroom.errors import GlassroomError
from glassroom.folders import record_owned, replace_file

FORMAT = "glassroom-atlas/1"
SAMPLINGS = ("uniform", "per-domain")
EXCERPTS = 5            # documents nearest each centre
EXCERPT_CHARS = 500
HOVER_CHARS = 160       # text kept per map point for the hover card


@dataclass
class Sample:
    """Sampled documents: where each lives, its size, and how many corpus documents it stands for."""

    domain: np.ndarray      # index into dataset.domains
    split: np.ndarray       # index into SPLITS
    doc: np.ndarray         # index within the shard
    source: np.ndarray      # index into the global source list
    tokens: np.ndarray      # tokens of the whole document (without EOS)
    weight: np.ndarray      # inverse inclusion probability
    population: dict        # domain -> documents in the dataset


def sample_documents(ds: Dataset, n: int, sampling: str, seed: int) -> tuple[Sample, list[dict]]:
    """n documents over both splits (all of them if the dataset has fewer); returns the sample and
    the global source list [{name, domain}]."""
    if sampling not in SAMPLINGS:
        raise GlassroomError(f"--sampling: expected one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if n < 1:
        raise GlassroomError(f"--sample: must be at least 1 document, got {n}")
    sources, pool = [], []   # pool: per domain, arrays (split, doc, source, tokens)
    for d in ds.domains:
        base = len(sources)
        sources += [{"name": s["name"], "domain": d} for s in ds.manifest["domains"][d]["sources"]]
        cols = []
        for si, split in enumerate(SPLITS):
            shard = ds.shard(d, split)
            m = shard.n_docs
            cols.append(np.stack([np.full(m, si), np.arange(m), shard.doc_source.astype(np.int64) + base,
                                  np.diff(shard.doc_offsets) - 1]) if m else np.zeros((4, 0), dtype=np.int64))
        pool.append(np.concatenate(cols, axis=1))
    sizes = np.array([p.shape[1] for p in pool])
    if sizes.sum() == 0:
        raise GlassroomError(f"{ds.path}: the dataset has no documents to sample; rebuild it with more text")
    if sampling == "uniform":
        take_total = min(n, int(sizes.sum()))
        rng = np.random.default_rng([seed, 1])
        chosen = np.sort(rng.choice(int(sizes.sum()), take_total, replace=False))
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        take = [chosen[(chosen >= bounds[i]) & (chosen < bounds[i + 1])] - bounds[i] for i in range(len(pool))]
    else:
        quota = np.zeros(len(pool), dtype=np.int64)
        left = min(n, int(sizes.sum()))
        while left > 0:   # water-filling: equal shares, a small domain's unused share goes to the others
            open_ = np.flatnonzero(quota < sizes)
            share = max(1, left // len(open_))
            for i in open_:
                add = min(share, sizes[i] - quota[i], left)
                quota[i] += add
                left -= add
                if left == 0:
                    break
        take = [np.sort(np.random.default_rng([seed, 2, i]).choice(sizes[i], quota[i], replace=False)) for i in range(len(pool))]
    rows, dom, weight = [], [], []
    for i, t in enumerate(take):
        rows.append(pool[i][:, t])
        dom.append(np.full(len(t), i))
        weight.append(np.full(len(t), sizes[i] / max(len(t), 1), dtype=np.float64))
    rows = np.concatenate(rows, axis=1)
    sample = Sample(domain=np.concatenate(dom), split=rows[0], doc=rows[1], source=rows[2], tokens=rows[3],
                    weight=np.concatenate(weight), population={d: int(s) for d, s in zip(ds.domains, sizes)})
    if len(sample.doc) == 0:
        raise GlassroomError(f"{ds.path}: the sample is empty; raise --sample")
    return sample, sources


def document_texts(ds: Dataset, sample: Sample, max_tokens: int, tick=lambda n: None,
                   windows: int = embed.WINDOWS) -> list[str]:
    """At most max_tokens tokens of each sampled document, decoded to text: the whole document when it
    fits, else `windows` equal windows spread from its start to its end (embed.spread_windows),
    joined by newlines."""
    tok = ds.tokenizer()
    texts: list[str] = []
    for start in range(0, len(sample.doc), 1000):
        seqs, owner = [], []
        rows = zip(sample.domain[start: start + 1000], sample.split[start: start + 1000], sample.doc[start: start + 1000])
        for j, (d, s, i) in enumerate(rows):
            shard = ds.shard(ds.domains[d], SPLITS[s])
            lo, hi = int(shard.doc_offsets[i]), int(shard.doc_offsets[i + 1]) - 1   # without the EOS
            for a, b in spread_windows(hi - lo, max_tokens, windows) or [(0, 0)]:
                seqs.append(np.asarray(shard.tokens[lo + a: lo + b]).tolist())
                owner.append(j)
        decoded = tok.decode_batch(seqs)
        parts: list[list[str]] = [[] for _ in range(max(owner, default=-1) + 1)]
        for j, text in zip(owner, decoded):
            parts[j].append(text)
        texts += ["\n".join(p) for p in parts]
        tick(len(parts))
    return texts


def _excerpt(text: str, n: int) -> str:
    text = text.strip()
    return text if len(text) <= n else text[:n].rstrip() + "…"


def _funnel(path: Path) -> dict | None:
    try:
        return json.loads((path / "stats.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def mixture_report(manifest: dict, weights: dict[str, float] | None, total_tokens: float | None) -> dict:
    """Weight, tokens drawn and epochs of each domain's train split at a planned budget. Without
    weights: the natural mixture (weights proportional to train tokens); without a budget: one pass
    over all train tokens."""
    train = {d: e["train"]["tokens"] for d, e in manifest["domains"].items()}
    given = weights is not None
    w = check_weights(weights, list(train)) if given else {d: t / max(sum(train.values()), 1) for d, t in train.items()}
    budget = float(total_tokens) if total_tokens else float(sum(train.values()))
    return {"weights": "given" if given else "natural (proportional to train tokens)", "total_tokens": budget,
            "domains": {d: {"weight": w.get(d, 0.0), "tokens": w.get(d, 0.0) * budget, "train_tokens": train[d],
                            "epochs": w.get(d, 0.0) * budget / train[d] if train[d] else None} for d in train}}


def _stage_removed(funnel: dict | None, *stages: str) -> dict:
    """{domain: documents removed} over the given stages of stats.json (a removed document counts in
    its own domain); {} when the funnel lacks them."""
    out: dict = {}
    for stage in stages:
        entry = (funnel or {}).get(stage)
        if not isinstance(entry, dict):
            continue
        for d, row in entry.items():
            if isinstance(row, dict) and isinstance(row.get("docs_in"), int) and isinstance(row.get("docs_out"), int):
                out[d] = out.get(d, 0) + row["docs_in"] - row["docs_out"]
    return out


def _removed_files(path: Path) -> dict:
    """Paths (relative to the dataset) of the build's removed-document records, or None each."""
    return {key: (f"removed/{name}" if (path / "removed" / name).is_file() else None)
            for key, name in (("duplicates", "duplicates.jsonl"), ("contaminated", "contaminated.jsonl"))}


def shard_column(shard, name: str) -> np.ndarray | None:
    """A per-document array of the shard index (doc_bucket, doc_quality, doc_flags), or None on
    datasets built before it existed."""
    value = getattr(shard, name, None)
    return None if value is None else np.asarray(value)


def point_buckets(ds: Dataset, smp: "Sample") -> list:
    """Each sampled document's quality bucket (an int), or None where its shard has none."""
    out: list = []
    for d, s, i in zip(smp.domain, smp.split, smp.doc):
        col = shard_column(ds.shard(ds.domains[d], SPLITS[s]), "doc_bucket")
        b = int(col[i]) if col is not None and i < len(col) else -1
        out.append(b if b >= 0 else None)
    return out


def quality_section(ds: Dataset, smp: "Sample", buckets: list, texts: list[str], sources: list[dict]) -> dict | None:
    """Cells of domain x quality bucket: their share of the dataset's documents and tokens (from the
    manifest's cells where it has them, else estimated from the sample), the sampled documents in
    each and up to EXCERPTS examples; the classifier's manifest entry. None without quality."""
    info = ds.manifest.get("quality")
    if not isinstance(info, dict):
        return None
    n_buckets = info.get("buckets")
    if not isinstance(n_buckets, int) or isinstance(n_buckets, bool) or not 1 <= n_buckets <= 100:
        known = [b for b in buckets if b is not None]
        n_buckets = max(known) + 1 if known else 0
    docs = np.zeros((len(ds.domains), n_buckets))
    toks = np.zeros((len(ds.domains), n_buckets))
    from_manifest = True
    def number(value) -> float:   # a hand-edited manifest: anything but a finite count counts as 0
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) and value >= 0
        return float(value) if ok else 0.0

    for di, d in enumerate(ds.domains):
        for split in SPLITS:
            entry = ds.manifest["domains"][d].get(split)
            cells = entry.get("cells") if isinstance(entry, dict) else None
            if not isinstance(cells, list):
                from_manifest = False
                continue
            for c in cells:
                q = c.get("bucket") if isinstance(c, dict) else None
                if isinstance(q, int) and not isinstance(q, bool) and 0 <= q < n_buckets:
                    docs[di, q] += number(c.get("documents"))
                    toks[di, q] += number(c.get("tokens"))
    sampled = np.zeros((len(ds.domains), n_buckets), dtype=np.int64)
    for i, b in enumerate(buckets):
        if b is not None and b < n_buckets:
            sampled[smp.domain[i], b] += 1
    if not from_manifest or docs.sum() == 0:   # estimate from the sample, each document for those it stands for
        docs[:], toks[:] = 0, 0
        for i, b in enumerate(buckets):
            if b is not None and b < n_buckets:
                docs[smp.domain[i], b] += smp.weight[i]
                toks[smp.domain[i], b] += smp.weight[i] * smp.tokens[i]
    cells_out = []
    for di, d in enumerate(ds.domains):
        for q in range(n_buckets):
            members = [i for i, b in enumerate(buckets) if b == q and smp.domain[i] == di][:EXCERPTS]
            cells_out.append({"domain": d, "bucket": q, "doc_share": float(docs[di, q] / max(docs.sum(), 1e-12)),
                              "token_share": float(toks[di, q] / max(toks.sum(), 1e-12)), "documents": int(sampled[di, q]),
                              "examples": [{"id": _doc_id(ds, smp, i), "domain": d, "source": sources[smp.source[i]]["name"],
                                            "text": _excerpt(texts[i], EXCERPT_CHARS)} for i in members]})
    classifier = _finite({k: v for k, v in info.items() if k != "cutoffs"})
    return {"buckets": n_buckets, "shares": "manifest" if from_manifest and docs.sum() > 0 else "estimated from the sample",
            "cells": cells_out, "classifier": classifier}


def _finite(node, depth: int = 0):
    """A copy of a manifest section that JSON can write strictly: NaN and infinities become null."""
    if depth > 50:
        return None
    if isinstance(node, dict):
        return {str(k): _finite(v, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        return [_finite(v, depth + 1) for v in node]
    if isinstance(node, float) and not np.isfinite(node):
        return None
    return node


def _with_counts(entry, by_domain: dict):
    """A manifest section (dedup, decontamination) with the funnel's removals per domain added."""
    if not isinstance(entry, dict):
        return None if not by_domain else {"removed_by_domain": by_domain}
    return {**_finite(entry), "removed_by_domain": by_domain}


def purity(labels: np.ndarray, classes: np.ndarray) -> float:
    """Share of documents whose cluster's most common class is their own class."""
    if len(labels) == 0:
        return 0.0
    table = np.zeros((labels.max() + 1, classes.max() + 1), dtype=np.int64)
    np.add.at(table, (labels, classes), 1)
    return float(table.max(axis=1).sum() / len(labels))


def build_atlas(path: str | Path, k: int = 40, sample: int = 20_000, sampling: str = "uniform", method: str | None = None,
                fine: int = 0, seed: int = 0, max_tokens: int = 512, weights: dict[str, float] | None = None,
                total_tokens: float | None = None, log: TextIO | None = None, progress_interval: float = 5.0,
                write: bool = True) -> dict:
    """Compute the atlas of the dataset at `path`; writes DATA_DIR/atlas/atlas.json unless write=False.
    `method` None is embed.DEFAULT_METHOD."""
    method = embed.DEFAULT_METHOD if method is None else method
    log = log if log is not None else sys.stderr
    ds = Dataset(path)
    if k < 1:
        raise GlassroomError(f"--k: must be at least 1, got {k}")
    if fine and fine <= k:
        raise GlassroomError(f"--fine: the fine clusters ({fine}) must outnumber --k ({k}); or leave --fine off")
    if max_tokens < 8:
        raise GlassroomError(f"--max-tokens: must be at least 8, got {max_tokens}")
    if method not in embed.METHODS:
        raise GlassroomError(f"--method: expected one of {', '.join(embed.METHODS)}, got {method!r}")
    mixture = mixture_report(ds.manifest, weights, total_tokens)
    timings = {}
    smp, sources = sample_documents(ds, sample, sampling, seed)
    n = len(smp.doc)
    if k > n:
        raise GlassroomError(f"--k {k} is more than the {n} sampled documents; lower --k or raise --sample")
    print(f"atlas: sampled {n:,} of {sum(smp.population.values()):,} documents ({sampling})", file=log, flush=True)

    t = time.perf_counter()
    embed.prepare(method)
    timings["load_s"] = time.perf_counter() - t
    t0 = time.perf_counter()
    progress = Progress("atlas: decode", total=n, interval=progress_interval, stream=log, scale=1e3, unit="k docs")
    texts = document_texts(ds, smp, max_tokens, progress.update)
    timings["decode_s"] = progress.finish()
    progress = Progress(f"atlas: languages ({languages.IDENTIFIER})", total=n, interval=progress_interval, stream=log,
                        scale=1e3, unit="k docs")
    language = languages.identify(texts, progress.update)
    timings["languages_s"] = progress.finish()
    progress = Progress(f"atlas: embed ({method})", total=n, interval=progress_interval, stream=log, scale=1e3, unit="k docs")
    t_embed = time.perf_counter()
    vectors = embed.embed(texts, method, seed, progress.update)
    timings["embed_s"] = time.perf_counter() - t_embed
    progress.finish(f"{vectors.shape[1]} dimensions")
    timings["embed_docs_per_s"] = n / max(timings["embed_s"], 1e-9)
    timings["decode_and_embed_docs_per_s"] = n / max(time.perf_counter() - t0, 1e-9)

    t = time.perf_counter()
    fine_used = min(fine, n) if fine else 0
    if fine_used > k:
        labels, centroids = cluster.fine_to_coarse(vectors, k, fine_used, seed)
    else:
        labels, centroids = cluster.spherical_kmeans(vectors, k, seed)
    labels, centroids = cluster.order_by_size(labels, centroids, smp.weight * smp.tokens)
    k_out = len(centroids)
    timings["cluster_s"] = time.perf_counter() - t
    print(f"atlas: {k_out} clusters{f' (from {fine_used} fine)' if fine_used > k else ''} in {timings['cluster_s']:.1f} s",
          file=log, flush=True)

    t = time.perf_counter()
    terms = cluster.distinctive_terms(texts, labels, k_out)
    sims = (vectors * centroids[labels]).sum(axis=1)
    xy = cluster.map_2d(vectors, seed)
    timings["label_and_map_s"] = time.perf_counter() - t

    doc_w = smp.weight
    tok_w = smp.weight * smp.tokens
    by_cluster = languages.shares_by_group(language, labels, doc_w, [str(j) for j in range(k_out)])
    clusters = []
    for j in range(k_out):
        members = np.flatnonzero(labels == j)
        nearest = members[np.lexsort((members, -sims[members]))][:EXCERPTS]
        by_domain = {ds.domains[d]: float(tok_w[members][smp.domain[members] == d].sum() / max(tok_w[members].sum(), 1e-12))
                     for d in np.unique(smp.domain[members])}
        by_source = np.bincount(smp.source[members], weights=tok_w[members], minlength=len(sources))
        top_sources = [{"name": sources[s]["name"], "domain": sources[s]["domain"],
                        "share": float(by_source[s] / max(by_source.sum(), 1e-12))}
                       for s in np.argsort(-by_source, kind="stable")[:6] if by_source[s] > 0]
        clusters.append({
            "id": j,
            "terms": terms[j],
            "documents": int(len(members)),
            "doc_share": float(doc_w[members].sum() / doc_w.sum()),
            "token_share": float(tok_w[members].sum() / max(tok_w.sum(), 1e-12)),
            "domains": dict(sorted(by_domain.items(), key=lambda kv: -kv[1])),
            "sources": top_sources,
            "languages": by_cluster.get(str(j), {}),
            "cohesion": float(sims[members].mean()),
            "centre": [round(float(v), 4) for v in xy[members].mean(axis=0)],
            "excerpts": [{"id": _doc_id(ds, smp, i), "domain": ds.domains[smp.domain[i]], "source": sources[smp.source[i]]["name"],
                          "similarity": round(float(sims[i]), 4), "text": _excerpt(texts[i], EXCERPT_CHARS)} for i in nearest],
        })

    manifest = ds.manifest
    funnel = _funnel(ds.path)
    buckets = point_buckets(ds, smp)
    atlas = {
        "format": FORMAT,
        "dataset": manifest.get("name"),
        "dataset_created": manifest.get("created") or _build_created(ds.path),
        "recipe_hash": manifest.get("recipe_hash"),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seed": seed,
        "k": k_out,
        "k_requested": k,
        "fine": fine_used if fine_used > k else None,
        "method": {"name": method, "description": embed.describe(method), "dimensions": int(vectors.shape[1]),
                   "max_tokens_per_document": max_tokens},
        "map": {"projection": "PCA"},
        "sampling": {"mode": sampling, "requested": sample, "sampled": n, "population": smp.population,
                     "sampled_by_domain": {d: int((smp.domain == i).sum()) for i, d in enumerate(ds.domains)}},
        "domain_purity": purity(labels, smp.domain),
        "languages": {"identifier": languages.IDENTIFIER,
                      "by_domain": languages.shares_by_group(language, smp.domain, doc_w, ds.domains)},
        "timings": {key: round(v, 3) for key, v in timings.items()},
        "domains": ds.domains,
        "sources": sources,
        "clusters": clusters,
        "points": {
            "x": [round(float(v), 4) for v in xy[:, 0]],
            "y": [round(float(v), 4) for v in xy[:, 1]],
            "cluster": labels.tolist(),
            "domain": smp.domain.tolist(),
            "source": smp.source.tolist(),
            "tokens": smp.tokens.tolist(),
            "split": smp.split.tolist(),
            "doc": smp.doc.tolist(),
            "id": [_doc_id(ds, smp, i) for i in range(n)],
            "quality": buckets,
            "language": language,
            "text": [_excerpt(" ".join(t[:HOVER_CHARS * 2].split()), HOVER_CHARS) for t in texts],
        },
        "quality": quality_section(ds, smp, buckets, texts, sources),
        "dedup": _with_counts(manifest.get("dedup"), _stage_removed(funnel, "exact_dedup", "fuzzy_dedup")),
        "decontamination": _with_counts(manifest.get("decontamination"), _stage_removed(funnel, "decontaminate")),
        "removed": _removed_files(ds.path),
        "funnel": funnel,
        "mixture": mixture,
        "tokenizer": {**{key: manifest["tokenizer"].get(key) for key in ("vocab_size", "model", "origin", "trained_on_bytes")},
                      "bytes_per_token": {d: {split: e[split]["bytes_per_token"] for split in SPLITS} for d, e in manifest["domains"].items()},
                      "tokens": {d: {split: e[split]["tokens"] for split in SPLITS} for d, e in manifest["domains"].items()}},
    }
    if write:
        write_atlas(ds.path, atlas)
        print(f"atlas: wrote {ds.path / 'atlas' / 'atlas.json'}", file=log, flush=True)
    return atlas


def _build_created(path: Path):
    """When the dataset was built: build.json's `created` (manifest.json no longer holds it)."""
    try:
        info = json.loads((path / "build.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info.get("created") if isinstance(info, dict) else None


def _doc_id(ds: Dataset, smp: Sample, i: int) -> str:
    shard = ds.shard(ds.domains[smp.domain[i]], SPLITS[smp.split[i]])
    if not hasattr(shard, "_atlas_ids"):
        shard._atlas_ids = shard.doc_ids() if shard.paths["ids"].is_file() else []
    ids = shard._atlas_ids
    return ids[smp.doc[i]] if smp.doc[i] < len(ids) else f"{SPLITS[smp.split[i]]}#{smp.doc[i]}"


def write_atlas(path: Path, atlas: dict) -> Path:
    """DATA_DIR/atlas/atlas.json, complete or absent: a temporary name, then a rename."""
    folder = Path(path) / "atlas"
    folder.mkdir(exist_ok=True)
    out = folder / "atlas.json"
    replace_file(out, json.dumps(atlas, separators=(",", ":"), ensure_ascii=False, allow_nan=False))
    record_owned(Path(path), COMMAND, ["atlas/atlas.json"])   # the build's --force may replace it with the dataset
    return out


def summary(atlas: dict) -> str:
    """The clusters as text: share of tokens, top domain and distinctive terms (the command's stdout)."""
    s = atlas["sampling"]
    lines = [f"{atlas['dataset']}: {atlas['k']} clusters of {s['sampled']:,} sampled documents ({s['mode']}, {atlas['method']['name']}); "
             f"domain purity {atlas['domain_purity']:.3f}; embedding {atlas['timings']['embed_docs_per_s']:,.0f} docs/s",
             f"  {'#':>3} {'tokens':>7} {'docs':>7}  {'main domain':<20} terms"]
    if atlas.get("languages"):   # atlases written before languages were identified have none
        lines.insert(1, f"languages ({atlas['languages']['identifier']}, share of each domain's documents): "
                        + "; ".join(f"{d} {languages.describe(sh)}" for d, sh in atlas["languages"]["by_domain"].items()))
    for c in atlas["clusters"]:
        top = next(iter(c["domains"].items()), ("-", 0))
        lines.append(f"  {c['id']:>3} {100 * c['token_share']:>6.1f}% {100 * c['doc_share']:>6.1f}%  "
                     f"{f'{top[0]} {100 * top[1]:.0f}%':<20} {', '.join(c['terms'][:6])}")
    return "\n".join(lines)
