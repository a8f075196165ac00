"""Benchmark of the data build, in one run: end-to-end MB/s local and on a local Ray (and whether the
two outputs are byte-identical), the same local build with datasketch's MinHash signatures instead of
the build's own (the build before dedup.Signer), MinHash signature MB/s and documents/s of
dedup.Signer against datasketch (the reference: crc32 of each shingle, its affine32 permutations) on
the same documents, tokenization MB/s of the build's encoder against single-process `tokenizers`
encode_batch (same ids), and documents/s of dedup, the quality classifier and the decontamination
scan, each on the built dataset's own documents. Timings alternate the two sides, best of repeats.

usage: python bench/data.py [--recipe experiments/data-demo.yaml] [--sample-mb 8] [--repeats 3]
                            [--build-repeats 1] [--no-ray] [--no-reference-build]
The datasketch side needs `pip install datasketch` (a test extra). Prints figures, never asserts a
time (these machines are noisy); appends the signature and build figures to bench/results/data.jsonl.
docs/data-scale.md and docs/data-dedup.md use them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from glassroom.data import clean
from glassroom.data.dedup import words
from glassroom.folders import OWNED

RESULTS = Path(__file__).resolve().parent / "results" / "data.jsonl"


class DatasketchSigner:
    """The reference: datasketch MinHash of each document's shingle set (crc32 of each shingle, datasketch's
    affine32 permutations, seed 1), the signatures the build computed before dedup.Signer."""

    def __init__(self, num_perm: int, shingle_words: int) -> None:
        from datasketch import MinHash  # optional: a test extra

        self.MinHash = MinHash
        self.num_perm, self.k = num_perm, shingle_words
        self.permutations = MinHash(num_perm=num_perm, seed=1, scheme="affine32").permutations

    def signature(self, text: str) -> np.ndarray:
        w = words(text)
        k = min(self.k, max(len(w), 1))
        mh = self.MinHash(num_perm=self.num_perm, seed=1, hashfunc=zlib.crc32, permutations=self.permutations,
                          scheme="affine32")
        mh.update_batch({" ".join(w[i: i + k]).encode() for i in range(max(len(w) - k + 1, 1))})
        return mh.hashvalues

    def signatures(self, texts) -> np.ndarray:
        return np.stack([self.signature(t) for t in texts]) if len(texts) else np.empty((0, self.num_perm), np.uint64)


def _tree(root: Path) -> dict[str, bytes]:
    """The files a build promises to make byte-identical: all but build.json (time, executor) and the
    folder's ownership record (which holds build.json's digest)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in ("build.json", OWNED)}


def _build(recipe, out: Path, ray: str | None, reference: bool = False) -> tuple[dict, float, str]:
    """Build `recipe` into `out`; `reference`: with DatasketchSigner's signatures (the clean workers fork from
    this process after the signer cache is filled, so they use it; local builds only)."""
    from glassroom.data.build import build_dataset

    key = (recipe.dedup.num_perm, recipe.dedup.shingle_words)
    saved = dict(clean._SIGNERS)
    if reference:
        clean._SIGNERS[key] = DatasketchSigner(*key)
    try:
        log = io.StringIO()
        start = time.perf_counter()
        manifest = build_dataset(recipe, out, log=log, progress_interval=1e9, ray=ray)
        return manifest, time.perf_counter() - start, log.getvalue()
    finally:
        clean._SIGNERS.clear()
        clean._SIGNERS.update(saved)


def _has_datasketch() -> bool:
    try:
        import datasketch  # noqa: F401
    except ImportError:
        print("datasketch is not installed (pip install datasketch): no reference signatures nor reference build")
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="experiments/data-demo.yaml")
    parser.add_argument("--sample-mb", type=float, default=8.0, help="text for the stage comparisons")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--build-repeats", type=int, default=1,
                        help="local builds with each signer, alternating (best of); 1 by default (a build is minutes)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray build")
    parser.add_argument("--no-reference-build", action="store_true", help="skip the build with datasketch signatures")
    args = parser.parse_args()

    from glassroom.data import dedup, decontam, fast_tokens, quality
    from glassroom.data.executor import LocalExecutor
    from glassroom.data.mixture import Dataset
    from glassroom.data.recipe import load_recipe

    recipe = load_recipe(args.recipe)
    cores = os.cpu_count() or 1
    reference = _has_datasketch()
    record = {"recipe": args.recipe, "cores": cores, "machine": platform.machine(), "time": time.time()}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dataset"
        own_runs, ref_runs = [], []
        for _ in range(max(args.build_repeats, 1)):  # alternating: the build's own (first: cold caches), the reference
            if out.exists():
                shutil.rmtree(out)
            manifest, t, log = _build(recipe, out, None)
            own_runs.append(t)
            if reference and not args.no_reference_build:
                _, t, _ = _build(recipe, Path(tmp) / "reference", None, reference=True)
                ref_runs.append(t)
                shutil.rmtree(Path(tmp) / "reference")
        seconds, ref_seconds = min(own_runs), min(ref_runs, default=float("inf"))
        raw = sum(s["bytes"] for d in manifest["domains"].values() for s in d["sources"])
        kept = manifest["totals"]["train"]["bytes"] + manifest["totals"]["validation"]["bytes"]
        tokens = manifest["totals"]["train"]["tokens"] + manifest["totals"]["validation"]["tokens"]
        print(f"recipe {args.recipe}: {raw / 1e6:.1f} MB raw -> {kept / 1e6:.1f} MB kept -> {tokens / 1e6:.2f}M tokens "
              f"({kept / max(tokens, 1):.3f} bytes/token); {cores} cores")
        for line in log.splitlines():
            if line.startswith(("clean:", "dedup:", "decontaminate:", "quality:", "tokenize:", "tokenizer: trained")):
                print("  " + line)
        print(f"end-to-end local: {raw / 1e6 / seconds:.2f} MB raw/s into shards ({seconds:.1f} s); "
              f"encoder {manifest['tokenizer'].get('encoder', {}).get('kind')}")
        record.update(raw_mb=round(raw / 1e6, 3), build_repeats=args.build_repeats,
                      build_mb_per_s=round(raw / 1e6 / seconds, 3))
        if ref_seconds < float("inf"):
            print(f"end-to-end local with datasketch signatures (before): {raw / 1e6 / ref_seconds:.2f} MB raw/s "
                  f"({ref_seconds:.1f} s); dedup.Signer (after): {raw / 1e6 / seconds:.2f} MB raw/s; "
                  f"ratio {ref_seconds / seconds:.2f}x (best of {args.build_repeats}, alternating; seconds: "
                  f"datasketch {', '.join(f'{t:.1f}' for t in ref_runs)}, dedup.Signer {', '.join(f'{t:.1f}' for t in own_runs)})")
            record.update(build_datasketch_mb_per_s=round(raw / 1e6 / ref_seconds, 3),
                          build_ratio=round(ref_seconds / seconds, 3),
                          build_seconds=[round(t, 2) for t in own_runs], build_datasketch_seconds=[round(t, 2) for t in ref_runs])
        if not args.no_ray:
            _, ray_seconds, _ = _build(recipe, Path(tmp) / "ray", "local")
            here, there = _tree(out), _tree(Path(tmp) / "ray")
            differ = sorted(k for k in here.keys() | there.keys() if here.get(k) != there.get(k))
            print(f"end-to-end on local Ray: {raw / 1e6 / ray_seconds:.2f} MB raw/s ({ray_seconds:.1f} s); "
                  f"byte-identical to the local build: {'yes' if not differ else 'NO: ' + ', '.join(differ[:8])}")
            record.update(ray_mb_per_s=round(raw / 1e6 / ray_seconds, 3), ray_identical=not differ)

        ds = Dataset(out)
        tok = ds.tokenizer()
        texts, eval_texts, size = [], [], 0
        per_domain = args.sample_mb * 1e6 / len(ds.domains)
        for domain in ds.domains:
            shard, taken = ds.shard(domain, "train"), 0
            for i in range(shard.n_docs):
                if taken >= per_domain:
                    break
                texts.append(tok.decode(shard.doc_tokens(i).tolist()))
                taken += shard.doc_bytes[i]
            size += taken
            val = ds.shard(domain, "validation")
            eval_texts += [(f"validation:{domain}", tok.decode(val.doc_tokens(i).tolist())) for i in range(val.n_docs)]
        mb = size / 1e6
        dtype = manifest["dtype"]
        tok.encode_special_tokens = True
        spec = ("tiktoken", tok.to_str())
        batches = [texts[i: i + 64] for i in range(0, len(texts), 64)]

        def plain():
            return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]

        def mirror_one():
            return [fast_tokens.encode_batch(spec, b, dtype) for b in batches]

        with LocalExecutor(cores) as ex:
            list(ex.map(fast_tokens.encode_batch, ((spec, b[:1], dtype) for b in batches[:cores])))  # warm the cache

            def build_encoder():
                return list(ex.map(fast_tokens.encode_batch, ((spec, b, dtype) for b in batches)))

            best = {}
            for _ in range(args.repeats):
                for name, fn in (("plain", plain), ("one", mirror_one), ("build", build_encoder)):
                    t = time.perf_counter()
                    result = fn()
                    best[name] = min(best.get(name, float("inf")), time.perf_counter() - t)
                    if name == "build":
                        ids = np.concatenate([r[0] for r in result]).astype(np.int64)
        eos = ds.eos_id
        expected = np.concatenate([np.append(np.asarray(x, dtype=np.int64), eos) for x in plain()])
        same_ids = np.array_equal(ids, expected)
        rate = {k: mb / v for k, v in best.items()}
        print(f"tokenization on {mb:.1f} MB ({len(texts)} documents, best of {args.repeats}): build encoder "
              f"({cores} processes, tiktoken mirror) {rate['build']:.2f} MB/s, one process {rate['one']:.2f} MB/s, "
              f"tokenizers encode_batch {rate['plain']:.2f} MB/s; ratio {rate['build'] / rate['plain']:.2f}x "
              f"({rate['one'] / rate['plain']:.2f}x in one process); same ids: {'yes' if same_ids else 'NO'}")

        cfg = recipe.dedup
        signers = {"signer": dedup.Signer(cfg.num_perm, cfg.shingle_words)}
        if reference:
            signers["datasketch"] = DatasketchSigner(cfg.num_perm, cfg.shingle_words)
        sig_best, sigs = {}, {}
        for _ in range(args.repeats):
            for name, signer in signers.items():
                t = time.perf_counter()
                sigs[name] = signer.signatures(texts)
                sig_best[name] = min(sig_best.get(name, float("inf")), time.perf_counter() - t)
        new = sig_best["signer"]
        print(f"MinHash signatures (one process, {cfg.num_perm} values, {cfg.shingle_words}-word shingles) on {mb:.1f} MB "
              f"({len(texts)} documents, best of {args.repeats}): dedup.Signer {mb / new:.2f} MB/s, "
              f"{len(texts) / new:.0f} documents/s", end="")
        record.update(signature_mb=round(mb, 3), signature_documents=len(texts), repeats=args.repeats,
                      signer_mb_per_s=round(mb / new, 3), signer_docs_per_s=round(len(texts) / new, 1))
        if reference:
            old = sig_best["datasketch"]
            print(f"; datasketch {mb / old:.2f} MB/s, {len(texts) / old:.0f} documents/s; ratio {old / new:.2f}x")
            record.update(datasketch_mb_per_s=round(mb / old, 3), datasketch_docs_per_s=round(len(texts) / old, 1),
                          signature_ratio=round(old / new, 3))
        else:
            print()
        d = dedup.benchmark(texts, recipe.dedup)
        print(f"dedup (one process): {d['docs_per_second']:.0f} documents/s over {d['documents']} documents "
              f"(signatures {d['signature_seconds']} s, LSH + verification {d['dedup_seconds']} s; bands {d['bands']} "
              f"x rows {d['rows']}, {d['candidate_pairs']} candidate pairs, {d['verified_pairs']} verified)")
        q = quality.benchmark(texts)
        print(f"quality classifier (one process): {q['docs_per_s']:.0f} documents/s, {q['mb_per_s']:.2f} MB/s scoring; "
              f"trained in {q['train_seconds']} s, held-out accuracy {q['heldout_accuracy']}")
        c = decontam.benchmark(texts, eval_texts, recipe.decontaminate)
        print(f"decontamination scan (one process): {c['scan_docs_per_s']:.0f} documents/s, {c['scan_mb_per_s']} MB/s "
              f"against {c['eval_ngrams']} evaluation n-grams (Bloom {c['bloom']['bytes']} bytes); "
              f"Python set baseline {c['baseline_docs_per_s']:.0f} documents/s; agree: {c['agree']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS, "a") as fh:
        fh.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
