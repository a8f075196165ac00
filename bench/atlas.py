"""Data atlas: cluster purity against the domain labels at k = number of domains, and embedding
throughput in documents/s, on the demo corpus and on five-domain corpora the method was NOT tuned on.

  python bench/atlas.py DATASET              # a built dataset (the demo's: tuned on this one)
  python bench/atlas.py --heldout            # the demo's sources and held-out corpora a, b, c, d at 2 KB and 8 KB documents
  python bench/atlas.py DATASET --heldout --methods fast
  python bench/atlas.py DATASET --parts      # also wordllama's embed and np.add.at against what replaced them
  python bench/atlas.py --random 12 --sizes 8192   # 12 corpora of sources drawn at random per domain

Targets (docs/data-atlas.md): purity >= 0.85 at k=5 for seeds 0, 1, 2 on the demo corpus and on the held-out
corpora at 2 KB and 8 KB documents; >= 1,000 documents/s on 2 cores. Purity is scored twice: against
the source labels, and on the language-checked documents (the multilingual domain's English pages,
untranslated handbook pages, set aside; py3langid decides), whose labels say what the text is.

A built dataset is sampled as `glassroom data atlas` samples it and its documents decoded as the
atlas decodes them (spread windows of --max-tokens tokens). The held-out corpora are read with the
build's own extractors (glassroom.data.sources.iter_source, the recipe's chunk_bytes at 2 KB or 8 KB:
real text, cut and packed as a recipe would) without tokenizing; each document is then cut to the
same spread windows in characters (CHARS_PER_TOKEN per token). The same number of bytes is taken
from each domain. Sources already in the demo are skipped past the demo's caps (`skip`), so no
held-out document is one the method was tuned on; the held-out sources are listed below.

Throughput is wall time of embedding (imports and model loading excluded); documents per CPU-second
is printed too, since these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np

from glassroom.data import cluster, embed, languages
from glassroom.data.atlas import purity

CHARS_PER_TOKEN = 3   # the bench's stand-in for a tokenizer: a window of T tokens is 3 T characters
DOMAIN_BYTES = 1_500_000   # taken from each domain of a held-out corpus

# Held-out corpora: five domains each, none of the demo's documents. `skip`: raw bytes of a source
# passed over first (the demo takes the first max_bytes of these sources).
HELDOUT = {
    "a": {
        "prose": [{"kind": "fortunes", "name": "fortunes-en", "exclude": ["off"]}],
        "reference": [{"kind": "dictd", "names": ["gcide"], "skip": 4_000_000}],
        "docs": [{"kind": "files", "name": "handbook-en", "path": "/usr/share/doc/debian-handbook/html/en-US/*.html", "format": "html"},
                 {"kind": "man", "sections": "2,3,7", "max_bytes": 600_000}],
        "code": [{"kind": "files", "name": "c-headers", "path": "/usr/include/**/*.h", "max_bytes": 800_000},
                 {"kind": "files", "name": "perl-modules", "path": "/usr/share/perl/5.36.0/**/*.pm"}],
        "multilingual": [{"kind": "files", "name": "handbook-de", "path": "/usr/share/doc/debian-handbook/html/de-DE/*.html", "format": "html", "max_bytes": 400_000},
                         {"kind": "files", "name": "handbook-pl", "path": "/usr/share/doc/debian-handbook/html/pl-PL/*.html", "format": "html", "max_bytes": 400_000},
                         {"kind": "fortunes", "name": "fortunes-it", "path": "/usr/share/games/fortunes/it", "max_bytes": 400_000},
                         {"kind": "man", "lang": "es", "max_bytes": 400_000}],
    },
    "b": {
        "prose": [{"kind": "austen", "skip": 2_000_000, "max_bytes": 800_000},
                  {"kind": "shakespeare", "skip": 3_000_000}],
        "reference": [{"kind": "dictd", "names": ["wn"], "skip": 2_000_000}],
        "docs": [{"kind": "files", "name": "git-docs", "path": "/usr/share/doc/git-doc/*.txt", "skip": 1_000_000, "max_bytes": 700_000},
                 {"kind": "files", "name": "postgresql-docs", "path": "/usr/share/doc/postgresql-doc-15/html/*.html", "format": "html", "skip": 1_500_000}],
        "code": [{"kind": "files", "name": "go-stdlib", "path": "/usr/share/go-1.19/src/**/*.go", "exclude": ["*_test.go", "*/testdata/*"],
                  "skip": 4_000_000, "max_bytes": 700_000},
                 {"kind": "files", "name": "python-dist-packages", "path": "/usr/lib/python3/dist-packages/**/*.py"}],
        "multilingual": [{"kind": "files", "name": "handbook-ru", "path": "/usr/share/doc/debian-handbook/html/ru-RU/*.html", "format": "html", "max_bytes": 400_000},
                         {"kind": "files", "name": "handbook-sv", "path": "/usr/share/doc/debian-handbook/html/sv-SE/*.html", "format": "html", "max_bytes": 400_000},
                         {"kind": "fortunes", "name": "fortunes-es", "path": "/usr/share/games/fortunes/es", "max_bytes": 400_000},
                         {"kind": "man", "lang": "pl", "max_bytes": 400_000}],
    },
    # c and d were built after the default method was chosen (on the demo's sources, a and b) and used for no choice.
    "c": {
        "prose": [{"kind": "brown", "skip": 3_500_000}, {"kind": "bible", "skip": 3_200_000}],
        "reference": [{"kind": "dictd", "names": ["foldoc"], "skip": 1_000_000}],
        "docs": [{"kind": "files", "name": "kernel-docs", "path": "/usr/share/doc/linux-doc-6.1/Documentation/**/*.rst.gz"},
                 {"kind": "files", "name": "rust-books", "path": "/usr/src/rustc-1.63.0/src/doc/**/*.md"}],
        "code": [{"kind": "files", "name": "rust-lib", "path": "/usr/src/rustc-1.63.0/library/**/*.rs"},
                 {"kind": "files", "name": "elisp", "path": "/usr/share/emacs/28.2/lisp/**/*.el.gz"}],
        "multilingual": [{"kind": "files", "name": "handbook-cs", "path": "/usr/share/doc/debian-handbook/html/cs-CZ/*.html", "format": "html", "max_bytes": 400_000},
                         {"kind": "files", "name": "handbook-tr", "path": "/usr/share/doc/debian-handbook/html/tr-TR/*.html", "format": "html", "max_bytes": 400_000},
                         {"kind": "files", "name": "handbook-zh", "path": "/usr/share/doc/debian-handbook/html/zh-CN/*.html", "format": "html", "max_bytes": 400_000},
                         {"kind": "man", "lang": "it", "max_bytes": 400_000}],
    },
    "d": {
        "prose": [{"kind": "shakespeare", "skip": 5_000_000}, {"kind": "austen", "skip": 3_000_000},
                  {"kind": "files", "name": "jargon-file", "path": "/usr/share/doc/jargon-text/jargon.txt.gz", "skip": 1_000_000}],
        "reference": [{"kind": "dictd", "names": ["gcide"], "skip": 20_000_000}],
        "docs": [{"kind": "files", "name": "python-docs", "path": "/usr/share/doc/python3.11/html/_sources/**/*.txt", "skip": 4_000_000},
                 {"kind": "man", "sections": "4,6", "max_bytes": 600_000}],
        "code": [{"kind": "python-stdlib", "skip": 6_000_000},
                 {"kind": "files", "name": "go-stdlib", "path": "/usr/share/go-1.19/src/**/*.go", "exclude": ["*_test.go", "*/testdata/*"], "skip": 9_000_000}],
        "multilingual": [{"kind": "files", "name": "handbook-da", "path": "/usr/share/doc/debian-handbook/html/da-DK/*.html", "format": "html", "max_bytes": 400_000},
                         {"kind": "files", "name": "handbook-ko", "path": "/usr/share/doc/debian-handbook/html/ko-KR/*.html", "format": "html", "max_bytes": 400_000},
                         {"kind": "fortunes", "name": "fortunes-it", "path": "/usr/share/games/fortunes/it", "skip": 400_000},
                         {"kind": "man", "lang": "ru", "max_bytes": 400_000}],
    },
}


def english_in_multilingual(texts: list[str], classes: np.ndarray, domains: list[str]) -> np.ndarray:
    """True for the documents of a domain named multilingual that py3langid calls English: the
    Debian Handbook's translations are partial, and their untranslated pages are English
    documentation whatever folder they sit in (13-53% of a corpus's multilingual documents)."""
    if "multilingual" not in domains:
        return np.zeros(len(texts), dtype=bool)
    return (classes == domains.index("multilingual")) & (np.asarray(languages.identify(texts)) == "en")


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def demo_sources() -> dict:
    """The demo recipe's sources by domain (experiments/data-demo.yaml), as bench specs."""
    import dataclasses
    from pathlib import Path

    from glassroom.data.recipe import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[1] / "experiments" / "data-demo.yaml")
    return {d: [{k: v for k, v in dataclasses.asdict(s).items() if v not in (None, []) and k != "chunk_bytes"}
                for s in cfg.sources] for d, cfg in recipe.domains.items()}


def heldout_documents(name: str, chunk_bytes: int, domain_bytes: int = DOMAIN_BYTES) -> tuple[list[str], np.ndarray, list[str]]:
    """(texts, domain index per text, domain names) of corpus `name` (a, b, c, d, or demo: the demo
    recipe's own sources), documents cut at chunk_bytes."""
    return corpus_documents(demo_sources() if name == "demo" else HELDOUT[name], chunk_bytes, domain_bytes)


def random_corpus(rng: np.random.Generator) -> dict:
    """A five-domain corpus of one to three sources per domain, drawn from every source the named
    corpora use for that domain (the demo's and a-d's)."""
    pools: dict[str, list] = {}
    for corpus in [demo_sources(), *HELDOUT.values()]:
        for domain, sources in corpus.items():
            pool = pools.setdefault(domain, [])
            pool += [spec for spec in sources if spec not in pool]
    return {domain: [pool[i] for i in sorted(rng.choice(len(pool), min(len(pool), int(rng.integers(1, 4))), replace=False))]
            for domain, pool in pools.items()}


def describe_corpus(corpus: dict) -> str:
    """'prose: bible, austen; reference: dictd:gcide; ...' (man pages by language or sections, skips in MB)."""
    def name(spec: dict) -> str:
        label = spec.get("name") or spec["kind"]
        if spec["kind"] == "dictd":
            label += ":" + ",".join(spec["names"])
        elif spec["kind"] == "man":
            label += ":" + (spec.get("lang") or spec.get("sections") or "en")
        return label + (f" after {spec['skip'] / 1e6:g} MB" if spec.get("skip") else "")
    return "; ".join(f"{domain}: " + ", ".join(name(s) for s in sources) for domain, sources in corpus.items())


def corpus_documents(corpus: dict, chunk_bytes: int, domain_bytes: int = DOMAIN_BYTES) -> tuple[list[str], np.ndarray, list[str]]:
    """(texts, domain index per text, domain names) of a corpus ({domain: [source spec, ...]})."""
    from glassroom.data.recipe import SourceConfig
    from glassroom.data.sources import iter_source

    texts, labels, domains = [], [], list(corpus)
    for d, (domain, sources) in enumerate(corpus.items()):
        share = domain_bytes // len(sources)
        taken = 0
        for i, spec in enumerate(sources):
            spec = dict(spec)
            skip = spec.pop("skip", 0)
            limit = spec.pop("max_bytes", share)
            cap = min(limit, share) if i < len(sources) - 1 else domain_bytes - taken
            cfg = SourceConfig(**spec, chunk_bytes=chunk_bytes, max_bytes=skip + cap)
            seen = 0
            for doc in iter_source(cfg, domain):
                size = len(doc["text"].encode())
                seen += size
                if seen <= skip or len(doc["text"].strip()) < 64:
                    continue
                texts.append(doc["text"])
                labels.append(d)
                taken += size
    return texts, np.asarray(labels), domains


def dataset_documents(path: str, max_tokens: int) -> tuple[list[str], np.ndarray, list[str]]:
    from glassroom.data.atlas import document_texts, sample_documents
    from glassroom.data.mixture import Dataset

    ds = Dataset(path)
    smp, _ = sample_documents(ds, 20_000, "uniform", 0)
    return document_texts(ds, smp, max_tokens), smp.domain, ds.domains


def run(label: str, texts: list[str], classes: np.ndarray, methods: list[str], domains: list[str]) -> dict[str, tuple[float, float]]:
    """Purity against the source labels, and on the language-checked documents: those left when the
    English pages of the multilingual domain are set aside and the rest clustered again."""
    k = int(classes.max()) + 1
    n = len(texts)
    lowest = {}
    english = english_in_multilingual(texts, classes, domains)
    checked = [t for t, e in zip(texts, english) if not e]
    print(f"\n{label}: {n:,} documents, {k} domains ({', '.join(str(int(c)) for c in np.bincount(classes))} per domain), "
          f"mean {np.mean([len(t) for t in texts]):,.0f} characters embedded; load average {os.getloadavg()[0]:.1f}; "
          f"{int(english.sum())} multilingual documents are English (language-checked: {len(checked):,})")
    print(f"  {'method':<8}{'docs/s':>9}{'docs/CPU-s':>12}{'dims':>6}   purity at k={k}, seeds 0, 1, 2: source labels | language-checked")
    for method in methods:
        embed.prepare(method)
        t, c = time.perf_counter(), cpu_seconds()
        vectors = embed.embed(texts, method, seed=0)
        wall, cpu = time.perf_counter() - t, cpu_seconds() - c
        scores = [purity(cluster.spherical_kmeans(vectors, k, seed=s)[0], classes) for s in range(3)]
        vectors = embed.embed(checked, method, seed=0)
        clean = [purity(cluster.spherical_kmeans(vectors, k, seed=s)[0], classes[~english]) for s in range(3)]
        print(f"  {method:<8}{n / wall:>9,.0f}{n / cpu:>12,.0f}{vectors.shape[1]:>6}   "
              + "  ".join(f"{p:.3f}" for p in scores) + " | " + "  ".join(f"{p:.3f}" for p in clean)
              + f"   (min {min(scores):.3f} | {min(clean):.3f})", flush=True)
        lowest[method] = (min(scores), min(clean))
    return lowest


def parts(texts: list[str], k: int = 40, repeats: int = 3) -> None:
    """The two parts glassroom replaced, against their references in the same run: wordllama's own
    `embed` against embed.wordllama_vectors (the sparse count matrix), and np.add.at against
    cluster.cluster_sums for one k-means step's sums at k clusters. Best of `repeats`."""
    from glassroom.data import cluster

    embed.prepare("better")
    model = embed.load_wordllama()

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    ours = embed.wordllama_vectors(texts, lambda n: None)
    ref = model.embed(texts, norm=True)
    t_ref, t_ours = best(lambda: model.embed(texts, norm=True)), best(lambda: embed.wordllama_vectors(texts, lambda n: None))
    print(f"\nparts on {len(texts):,} documents (best of {repeats}):")
    print(f"  wordllama vectors: wordllama.embed {len(texts) / t_ref:,.0f} docs/s, sparse counts x matrix {len(texts) / t_ours:,.0f} docs/s "
          f"({t_ref / t_ours:.2f}x); largest difference {np.abs(ours - ref).max():.1e}")
    x = embed.embed(texts, "better", seed=0)
    labels = np.random.default_rng(0).integers(0, k, len(x))

    def add_at():
        sums = np.zeros((k, x.shape[1]), dtype=np.float32)
        np.add.at(sums, labels, x)
        return sums

    t_ref, t_ours = best(add_at), best(lambda: cluster.cluster_sums(labels, x, k))
    print(f"  cluster sums at k={k}, {x.shape[1]} dims: np.add.at {1e3 * t_ref:.1f} ms, sparse one-hot product {1e3 * t_ours:.1f} ms "
          f"({t_ref / t_ours:.1f}x); largest difference {np.abs(add_at() - cluster.cluster_sums(labels, x, k)).max():.1e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="?", help="a built dataset (e.g. the demo's)")
    ap.add_argument("--heldout", action="store_true", help="also the corpora of --corpora at the --sizes")
    ap.add_argument("--corpora", default="demo,a,b,c,d",
                    help="demo (the demo recipe's sources), a, b (held out from the fast method's tuning; the default method was chosen on demo, a and b), c, d (used for no choice)")
    ap.add_argument("--sizes", default="2048,8192", help="chunk_bytes of the held-out documents")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--methods", default=",".join(embed.METHODS))
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="also N corpora of 1-3 sources per domain drawn at random from all the named corpora's sources, at the first of --sizes")
    ap.add_argument("--seed", type=int, default=0, help="seed of --random")
    ap.add_argument("--parts", action="store_true", help="also time the replaced parts against their references (on the first corpus)")
    args = ap.parse_args()
    if not args.dataset and not args.heldout and not args.random:
        ap.error("give a dataset, --heldout, --random N, or more than one")
    timed_parts = not args.parts
    methods = args.methods.split(",")
    print(f"{os.cpu_count()} cores; target: purity >= 0.85 for every seed, >= 1,000 docs/s")
    if args.dataset:
        texts, classes, domains = dataset_documents(args.dataset, args.max_tokens)
        run(f"dataset {args.dataset}", texts, classes, methods, domains)
        if not timed_parts:
            parts(texts)
            timed_parts = True
    if args.heldout:
        for name in args.corpora.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                t = time.perf_counter()
                docs, classes, domains = heldout_documents(name, size)
                texts = [embed.spread_text(x, args.max_tokens * CHARS_PER_TOKEN) for x in docs]
                corpus = demo_sources() if name == "demo" else HELDOUT[name]
                sources = describe_corpus(corpus)
                run(f"{'demo sources' if name == 'demo' else 'held-out ' + name} at {size // 1024} KB (read in {time.perf_counter() - t:.0f} s; {sources})",
                    texts, classes, methods, domains)
                if not timed_parts:
                    parts(texts)
                    timed_parts = True
    if args.random:
        rng, size, results = np.random.default_rng(args.seed), int(args.sizes.split(",")[0]), []
        for i in range(args.random):
            corpus = random_corpus(rng)
            docs, classes, domains = corpus_documents(corpus, size)
            texts = [embed.spread_text(x, args.max_tokens * CHARS_PER_TOKEN) for x in docs]
            results.append(run(f"random corpus {i} at {size // 1024} KB ({describe_corpus(corpus)})", texts, classes, methods, domains))
        print(f"\n{args.random} random corpora at {size // 1024} KB: lowest seed's purity, source labels | language-checked")
        for method in methods:
            src = np.array([r[method][0] for r in results])
            chk = np.array([r[method][1] for r in results])
            print(f"  {method:<8} min {src.min():.3f} median {np.median(src):.3f}, {(src >= 0.85).sum()} of {len(src)} at 0.85 or more | "
                  f"min {chk.min():.3f} median {np.median(chk):.3f}, {(chk >= 0.85).sum()} of {len(chk)} at 0.85 or more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
