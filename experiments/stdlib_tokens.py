"""Example experiment: what the Python standard library's own source is made of, token by token.

Real data that every machine has (the stdlib of the Python running glassroom), five steps:

  stdlib-files    snapshot the selected stdlib sources into the workspace (with sha256s)
  token-counts    tokenize every file with Python's tokenizer: token kinds, keywords, names
  line-stats      line lengths, blank and comment lines                   (independent of the two
  bpe-tokenizer   train a byte-level BPE and measure bytes per token       around it: run in parallel)
  stdlib-report   a markdown report that combines the three

    glassroom run experiments/stdlib_tokens.py --dry-run
    glassroom run experiments/stdlib_tokens.py
    glassroom show workspace/stats/stdlib-report-<version>

Change one value below (say the BPE vocab_size) and rerun: only bpe-tokenizer and stdlib-report
run again. docs/run.md walks through it.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import keyword
import statistics
import sys
import sysconfig
import tokenize
from pathlib import Path

from glassroom.pipeline import Resources, Step, StepContext


def snapshot_sources(ctx: StepContext) -> dict:
    """Copy the selected stdlib .py files into the output, listing each with its size and sha256."""
    cfg = ctx.config
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for pattern in cfg["patterns"]:
        files += [p for p in root.glob(pattern) if p.is_file()]
    skip = set(cfg["exclude"])
    files = sorted({p for p in files if not skip.intersection(p.relative_to(root).parts)})
    if not files:
        raise FileNotFoundError(f"no stdlib sources match {cfg['patterns']} under {root}")
    sources = ctx.path("sources")
    listing = []
    for i, path in enumerate(files):
        rel = path.relative_to(root)
        data = path.read_bytes()
        target = sources / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        listing.append({"path": str(rel), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        ctx.progress(i + 1, len(files), unit="files")
    ctx.write_text("files.jsonl", "".join(json.dumps(row) + "\n" for row in listing))
    return {"stdlib": str(root), "files": len(listing), "bytes": sum(r["bytes"] for r in listing)}


def _listing(files_jsonl: str) -> tuple[Path, list[dict]]:
    path = Path(files_jsonl)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    return path.parent / "sources", rows


def count_tokens(ctx: StepContext) -> dict:
    """Python tokenizer statistics: tokens by kind, keyword and identifier frequencies."""
    sources, rows = _listing(ctx.config["files"])
    kinds: collections.Counter = collections.Counter()
    keywords: collections.Counter = collections.Counter()
    names: collections.Counter = collections.Counter()
    total_bytes = unreadable = 0
    for i, row in enumerate(rows):
        data = (sources / row["path"]).read_bytes()
        total_bytes += len(data)
        try:
            for tok in tokenize.tokenize(io.BytesIO(data).readline):
                kind = tokenize.tok_name[tok.exact_type if tok.type == tokenize.OP else tok.type]
                kinds[kind] += 1
                if tok.type == tokenize.NAME:
                    (keywords if keyword.iskeyword(tok.string) else names)[tok.string] += 1
        except (tokenize.TokenError, SyntaxError):
            unreadable += 1
        ctx.progress(i + 1, len(rows), unit="files")
    total = sum(kinds.values())
    top = ctx.config["top"]
    counts = {
        "files": len(rows), "unreadable_files": unreadable, "bytes": total_bytes, "tokens": total,
        "bytes_per_token": round(total_bytes / total, 4),
        "kinds": dict(kinds.most_common()),
        "keywords": keywords.most_common(top),  # [name, count] pairs, most used first
        "names": names.most_common(top),
        "distinct_names": len(names),
    }
    ctx.write_json("counts.json", counts)
    return {k: counts[k] for k in ("files", "tokens", "bytes_per_token", "distinct_names")}


def line_stats(ctx: StepContext) -> dict:
    """Line lengths (percentiles), blank lines and comment-only lines."""
    sources, rows = _listing(ctx.config["files"])
    lengths: list[int] = []
    blank = comment = 0
    for i, row in enumerate(rows):
        for line in (sources / row["path"]).read_text(encoding="utf-8", errors="replace").splitlines():
            stripped = line.strip()
            lengths.append(len(line))
            blank += not stripped
            comment += stripped.startswith("#")
        ctx.progress(i + 1, len(rows), unit="files")
    cuts = statistics.quantiles(lengths, n=100)
    limit = ctx.config["long_line"]
    stats = {
        "lines": len(lengths), "blank": blank, "comment_only": comment,
        "mean_length": round(statistics.fmean(lengths), 2),
        "p50": cuts[49], "p90": cuts[89], "p99": cuts[98], "max": max(lengths),
        f"over_{limit}": sum(n > limit for n in lengths),
    }
    ctx.write_json("lines.json", stats)
    return stats


def train_bpe(ctx: StepContext) -> dict:
    """Train a byte-level BPE on most files; bytes per token on every `heldout_every`-th file."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    cfg = ctx.config
    sources, rows = _listing(cfg["files"])
    train = [r for i, r in enumerate(rows) if i % cfg["heldout_every"]]
    heldout = [r for i, r in enumerate(rows) if not i % cfg["heldout_every"]]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=cfg["vocab_size"], min_frequency=cfg["min_frequency"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    texts = [(sources / r["path"]).read_text(encoding="utf-8", errors="replace") for r in train]
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    ctx.progress(1, 2, unit="phases", message="trained")
    tmp = ctx.path("tokenizer.json.tmp")
    tokenizer.save(str(tmp))
    tmp.replace(ctx.path("tokenizer.json"))
    held_bytes = held_tokens = 0
    for r in heldout:
        text = (sources / r["path"]).read_text(encoding="utf-8", errors="replace")
        held_bytes += len(text.encode())
        held_tokens += len(tokenizer.encode(text).ids)
    ctx.progress(2, 2, unit="phases", message="measured")
    result = {"vocab_size": tokenizer.get_vocab_size(), "train_files": len(train), "heldout_files": len(heldout),
              "heldout_bytes": held_bytes, "heldout_tokens": held_tokens,
              "heldout_bytes_per_token": round(held_bytes / held_tokens, 4)}
    ctx.write_json("bpe.json", result)
    return result


def write_report(ctx: StepContext) -> dict:
    cfg = ctx.config
    counts = json.loads(Path(cfg["counts"]).read_text())
    lines = json.loads(Path(cfg["lines"]).read_text())
    bpe = json.loads(Path(cfg["bpe"]).read_text())
    kinds = counts["kinds"]
    share = lambda k: 100 * kinds.get(k, 0) / counts["tokens"]  # noqa: E731
    out = [
        f"# What the Python {sys.version_info.major}.{sys.version_info.minor} standard library is made of",
        "",
        f"{counts['files']} files, {counts['bytes']:,} bytes, {lines['lines']:,} lines, "
        f"{counts['tokens']:,} Python tokens ({counts['bytes_per_token']} bytes per token).",
        "",
        f"- identifiers (NAME, keywords included): {share('NAME'):.1f}% of tokens; "
        f"{counts['distinct_names']:,} distinct names",
        f"- comments: {share('COMMENT'):.1f}% of tokens, {lines['comment_only']:,} comment-only lines; "
        f"{lines['blank']:,} blank lines",
        f"- line length: median {lines['p50']:.0f}, p99 {lines['p99']:.0f}, longest {lines['max']}",
        f"- a {bpe['vocab_size']}-token byte-level BPE reads held-out files at "
        f"{bpe['heldout_bytes_per_token']} bytes per token, "
        f"{counts['bytes_per_token'] / bpe['heldout_bytes_per_token']:.2f}x as many tokens as Python's tokenizer",
        "",
        "| most used names | count | | keywords | count |",
        "|---|---|---|---|---|",
    ]
    for (n, c), (k, kc) in zip(counts["names"][:10], counts["keywords"][:10]):
        out.append(f"| `{n}` | {c:,} | | `{k}` | {kc:,} |")
    ctx.write_text("report.md", "\n".join(out) + "\n")
    return {"tokens": counts["tokens"], "lines": lines["lines"],
            "bpe_bytes_per_token": bpe["heldout_bytes_per_token"], "python_bytes_per_token": counts["bytes_per_token"]}


PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"  # another Python has another stdlib

files = Step("stdlib-files", snapshot_sources, kind="data",
             config={"python": PYTHON, "patterns": ["*.py", "json/*.py"], "exclude": ["test", "tests"]})
tokens = Step("token-counts", count_tokens, kind="stats", config={"files": files / "files.jsonl", "top": 30})
lines = Step("line-stats", line_stats, kind="stats", config={"files": files / "files.jsonl", "long_line": 79})
bpe = Step("bpe-tokenizer", train_bpe, kind="data", resources=Resources(cpus=1),
           config={"files": files / "files.jsonl", "vocab_size": 4096, "min_frequency": 2, "heldout_every": 10})
report = Step("stdlib-report", write_report, kind="stats",
              config={"counts": tokens / "counts.json", "lines": lines / "lines.json", "bpe": bpe / "bpe.json"})

steps = [report]
