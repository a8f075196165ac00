"""Data atlas: cluster purity against the domain labels at k = number of domains, and embedding
throughput in documents/s, for each --method, on a built dataset (the demo corpus: five domains).

  python bench/atlas.py /tmp/demo            # after: glassroom data build experiments/data-demo.yaml --out /tmp/demo

Targets (issue 8): purity >= 0.8 at k=5 on the demo corpus; >= 1,000 documents/s on 2 cores.
Throughput is wall time of embedding the sampled texts (decoding tokens back to text is timed
apart; imports and model loading are excluded). These machines are shared and noisy, so the CPU
time of the process is printed too: documents per CPU-second is what one uncontended core does.
Purity is printed for seeds 0, 1, 2 of the clustering (seed 0 is the command's default).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np

from glassroom.data import cluster, embed
from glassroom.data.atlas import document_texts, purity, sample_documents
from glassroom.data.mixture import Dataset


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--sample", type=int, default=20_000)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--methods", default=",".join(embed.METHODS))
    args = ap.parse_args()

    ds = Dataset(args.dataset)
    k = len(ds.domains)
    smp, _ = sample_documents(ds, args.sample, "uniform", 0)
    t = time.perf_counter()
    texts = document_texts(ds, smp, args.max_tokens)
    decode_s = time.perf_counter() - t
    n = len(texts)
    print(f"dataset {ds.path} ({ds.manifest.get('name')}): {n:,} documents, {k} domains, first {args.max_tokens} tokens of each "
          f"(mean {np.mean([len(x) for x in texts]):,.0f} characters); decode {n / decode_s:,.0f} docs/s; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"{'method':<8}{'docs/s':>9}{'docs/CPU-s':>12}{'dims':>6}   purity at k={k} (seeds 0, 1, 2)   target: >= 0.8, >= 1,000 docs/s")
    for method in args.methods.split(","):
        embed.prepare(method)
        t, c = time.perf_counter(), cpu_seconds()
        vectors = embed.embed(texts, method, seed=0)
        wall, cpu = time.perf_counter() - t, cpu_seconds() - c
        scores = [purity(cluster.spherical_kmeans(vectors, k, seed=s)[0], smp.domain) for s in range(3)]
        print(f"{method:<8}{n / wall:>9,.0f}{n / cpu:>12,.0f}{vectors.shape[1]:>6}   "
              + "  ".join(f"{p:.3f}" for p in scores) + f"   (mean {np.mean(scores):.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
