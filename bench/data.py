"""Benchmark of the data build, in one run: end-to-end MB/s local and on a local Ray (and whether the
two outputs are byte-identical), tokenization MB/s of the build's encoder against single-process
`tokenizers` encode_batch (same ids), and documents/s of dedup, the quality classifier and the
decontamination scan, each on the built dataset's own documents.

usage: python bench/data.py [--recipe experiments/data-demo.yaml] [--sample-mb 8] [--repeats 3] [--no-ray]
Prints figures, never asserts a time (these machines are noisy). docs/data-scale.md uses them.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "build.json"}


def _build(recipe, out: Path, ray: str | None) -> tuple[dict, float, str]:
    from glassroom.data.build import build_dataset

    log = io.StringIO()
    start = time.perf_counter()
    manifest = build_dataset(recipe, out, log=log, progress_interval=1e9, ray=ray)
    return manifest, time.perf_counter() - start, log.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="experiments/data-demo.yaml")
    parser.add_argument("--sample-mb", type=float, default=8.0, help="text for the stage comparisons")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray build")
    args = parser.parse_args()

    from glassroom.data import dedup, decontam, fast_tokens, quality
    from glassroom.data.executor import LocalExecutor
    from glassroom.data.mixture import Dataset
    from glassroom.data.recipe import load_recipe

    recipe = load_recipe(args.recipe)
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dataset"
        manifest, seconds, log = _build(recipe, out, None)
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
        if not args.no_ray:
            _, ray_seconds, _ = _build(recipe, Path(tmp) / "ray", "local")
            same = _tree(out) == _tree(Path(tmp) / "ray")
            print(f"end-to-end on local Ray: {raw / 1e6 / ray_seconds:.2f} MB raw/s ({ray_seconds:.1f} s); "
                  f"byte-identical to the local build: {'yes' if same else 'NO'}")

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
