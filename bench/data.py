"""Benchmark of the data build: end-to-end MB of raw text per second into shards, and tokenization
MB/s of glassroom's encoder against plain `tokenizers` encode_batch on the same text in the same run.

usage: python bench/data.py [--recipe experiments/data-demo.yaml] [--sample-mb 8] [--repeats 3]
Prints ratios, never asserts a time (these machines are noisy).
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="experiments/data-demo.yaml")
    parser.add_argument("--sample-mb", type=float, default=8.0, help="text for the tokenization comparison")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from glassroom.data.build import build_dataset
    from glassroom.data.mixture import Dataset
    from glassroom.data.recipe import load_recipe
    from glassroom.data.tokenizer import encode_documents

    recipe = load_recipe(args.recipe)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dataset"
        log = io.StringIO()
        start = time.perf_counter()
        manifest = build_dataset(recipe, out, log=log, progress_interval=1e9)
        seconds = time.perf_counter() - start
        raw = sum(s["bytes"] for d in manifest["domains"].values() for s in d["sources"])
        kept = manifest["totals"]["train"]["bytes"] + manifest["totals"]["validation"]["bytes"]
        tokens = manifest["totals"]["train"]["tokens"] + manifest["totals"]["validation"]["tokens"]
        print(f"recipe {args.recipe}: {raw / 1e6:.1f} MB raw -> {kept / 1e6:.1f} MB kept -> {tokens / 1e6:.1f}M tokens")
        for line in log.getvalue().splitlines():
            if line.startswith(("clean:", "tokenize:", "tokenizer:")):
                print("  " + line)
        print(f"end-to-end: {raw / 1e6 / seconds:.2f} MB raw/s into shards ({seconds:.1f} s)")

        ds = Dataset(out)
        tok = ds.tokenizer()
        texts, size = [], 0
        per_domain = args.sample_mb * 1e6 / len(ds.domains)
        for domain in ds.domains:
            shard, taken = ds.shard(domain, "train"), 0
            for i in range(shard.n_docs):
                if taken >= per_domain:
                    break
                texts.append(tok.decode(shard.doc_tokens(i).tolist()))
                taken += shard.doc_bytes[i]
            size += taken
        dtype = np.dtype(manifest["dtype"])

        def plain():
            return [e.ids for e in tok.encode_batch(texts)]

        def ours():
            return encode_documents(tok, texts, dtype)

        best = {"plain": float("inf"), "glassroom": float("inf")}
        for _ in range(args.repeats):
            for name, fn in (("plain", plain), ("glassroom", ours)):
                t = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t)
        ids, _ = ours()
        expected = np.concatenate([np.append(np.asarray(x, dtype=np.int64), ds.eos_id) for x in plain()])
        if not np.array_equal(ids.astype(np.int64), expected):
            raise SystemExit("glassroom's encoder and encode_batch gave different ids")
        mbs = {k: size / 1e6 / v for k, v in best.items()}
        print(f"tokenization on {size / 1e6:.1f} MB ({len(texts)} documents, best of {args.repeats}): "
              f"glassroom {mbs['glassroom']:.2f} MB/s, tokenizers encode_batch {mbs['plain']:.2f} MB/s, "
              f"ratio {mbs['glassroom'] / mbs['plain']:.2f}x (same ids)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
