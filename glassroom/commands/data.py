"""`glassroom data ...`: build a dataset from a recipe, and report what a mixture would draw from it.

`data` is a group: each sub-subcommand is a (register, run) pair in SUBCOMMANDS below; later
layers (the atlas) add theirs the same way.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from glassroom import numbers
from glassroom.commands import new_command, positive_count, whole, number
from glassroom.commands.chatset import register_chatset, run_chatset
from glassroom.errors import GlassroomError
from glassroom.units import format_count

DESCRIPTION = """\
Turn raw text into a dataset that `glassroom train` reads, and report on it.

  build    RECIPE.yaml --out DIR [--ray local|ADDRESS]: extract, clean, dedup, split, decontaminate,
           score quality, train a tokenizer, write shards
  mixture  DIR --weights ...: tokens and epochs per domain that a weighted mixture would draw
  atlas    DIR [--k 40]: embed, cluster and map a sample of documents (docs/data-atlas.md)
  tasks    DIR: lm-eval tasks over the validation split, for glassroom eval (docs/data-build.md)
  chatset  --out DIR: questions and answers from man pages, Python docstrings, dictionaries (docs/chatset.md)

docs/data-build.md explains every recipe key, what DIR holds and the cleaning thresholds.

example:
  scripts/install-corpora.sh            # once, as root: the real corpora of the five domains
  glassroom data build experiments/data-demo.yaml --out data/demo
  glassroom data mixture data/demo --weights prose=0.3,reference=0.1,docs=0.2,code=0.3,multilingual=0.1 --tokens 200M
"""

BUILD_DESCRIPTION = """\
Build the dataset described by RECIPE into DIR: documents from each domain's sources (within
their size caps), Unicode NFC, quality filters, exact and near-duplicate removal (verified,
clustered), a held-out validation split per domain, removal of train documents sharing 13-word
n-grams with evaluation text, a quality classifier and 5 quality buckets per domain, a byte-level
BPE tokenizer, and token shards per domain and split ordered by quality bucket. DIR gets
tokenizer.json, shards/, manifest.json, stats.json (what every stage kept and removed), removed/
(duplicate clusters and contaminated documents with their text), quality/classifier.npz and
build.json (time, executor). Every file but build.json is byte-identical between two builds of the
same recipe, whatever --workers, locally or on Ray (--ray local starts Ray here; --ray ADDRESS
joins a cluster whose nodes see the sources and DIR's parent at the same paths).
The build happens in a temporary folder renamed into place at the end: a failed build leaves an
existing DIR as it was. Progress lines go to stderr, the summary to stdout.

DIR may be new or an empty folder; an existing dataset is replaced only with --force, and only when
every file in it is listed, unchanged, in the .glassroom-manifest.json a build wrote there: a
folder holding anything else (your notes, a .git/, a file edited since) never (move it out first).
One build at a time per DIR (a lock beside it, .DIR.lock); folders left by killed builds
(.DIR.building-<pid>) are removed by the next build. Text in a document that spells a special
token (<|endoftext|>) is encoded as ordinary text; only the builder ends documents with EOS.

Conversation data: a recipe with task: sft (sources of kind conversations: JSONL or Parquet with a
messages list) or task: dpo (kind preferences: prompt, chosen, rejected) renders each conversation
with the chat template (<|im_start|>/<|im_end|>, added to the tokenizer when missing) and writes
shards/<domain>/<split>.mask.bin beside each shard (1 on assistant tokens); a malformed line is one
error naming file:line, conversations without an assistant answer and pairs with identical answers
are skipped and counted. See "Conversation and preference data" in docs/data-build.md.

example:
  glassroom data build experiments/data-tiny.yaml --out data/tiny --set tokenizer.vocab_size=4096
  glassroom data build experiments/data-demo.yaml --out data/demo --ray local
"""

MIXTURE_DESCRIPTION = """\
For domain weights and a planned number of training tokens: the tokens each domain would give and
how many epochs of its train split that is, with a warning for domains past --max-epochs.
A key may be a quality cell, domain:qN (bucket N of the domain, q0 lowest; datasets built with
quality, docs/data-quality.md); a domain and its own cells cannot both be given.

example:
  glassroom data mixture data/demo --weights prose=0.4,code=0.4,docs=0.2 --tokens 100M
  glassroom data mixture data/demo --weights prose:q4=0.3,prose:q3=0.2,code=0.5 --tokens 100M
"""


def register(sub) -> None:
    p = new_command(sub, "data", "build datasets from raw text; report mixtures", DESCRIPTION)
    p.set_defaults(run=lambda args: _no_subcommand(p))
    data_sub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    for reg, _ in SUBCOMMANDS:
        reg(data_sub)


def _no_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def register_build(sub) -> None:
    p = new_command(sub, "build", "build a dataset from a recipe", BUILD_DESCRIPTION)
    p.add_argument("recipe", metavar="RECIPE", help="recipe YAML (see experiments/data-*.yaml)")
    p.add_argument("--out", required=True, metavar="DIR", help="dataset folder to create")
    p.add_argument("--force", action="store_true", help="replace DIR if it holds a glassroom dataset and nothing else (never any other folder)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe value, e.g. dedup.threshold=0.7")
    p.add_argument("--workers", type=whole, help="local processes for the per-document stages (default: one per core)")
    p.add_argument("--ray", metavar="ADDRESS", help="run the per-document stages on Ray: `local` starts Ray on this "
                   "machine, an address (auto, host:6379, ray://host:10001) joins a cluster whose nodes see the "
                   "sources and DIR's parent at the same paths; the output is byte-identical to a local build")
    p.add_argument("--progress-every", type=number, default=5.0, metavar="S", help="seconds between progress lines (default 5)")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON instead of the summary")
    p.set_defaults(run=run_build)


def run_build(args: argparse.Namespace) -> int:
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe

    if args.workers is not None and args.workers < 1:
        raise GlassroomError(f"--workers: must be at least 1, got {args.workers}")
    if args.ray is not None and args.workers is not None:
        raise GlassroomError("--workers and --ray: give one (on Ray every CPU of the cluster works)")
    if args.ray is not None and not args.ray.strip():
        raise GlassroomError("--ray: give `local` or a cluster address (auto, host:6379, ray://host:10001)")
    if not (math.isfinite(args.progress_every) and args.progress_every > 0):
        raise GlassroomError(f"--progress-every: must be a positive number of seconds, got {args.progress_every}")
    recipe = load_recipe(args.recipe, args.set)
    # SIGTERM keeps its default action here: a Python handler inherited by the forked workers would
    # keep a worker stuck in a lock from dying, and the pool's shutdown would wait for it for ever.
    # What a killed build leaves is removed by the next build (docs/data-build.md, Safety rules).
    manifest = build_dataset(recipe, args.out, force=args.force, workers=args.workers, recipe_file=args.recipe,
                             progress_interval=args.progress_every, ray=args.ray)
    if args.json:
        print(json.dumps(manifest, indent=2))
    else:
        print(format_summary(args.out, manifest))
    return 0


def _build_info(out: str) -> dict:
    """DIR/build.json (time, executor) when readable; {} otherwise (datasets built before it existed)."""
    from pathlib import Path

    try:
        data = json.loads((Path(out) / "build.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def format_summary(out: str, m: dict) -> str:
    tok = m["tokenizer"]
    info = _build_info(out)
    seconds = info.get("seconds", m.get("build_seconds"))
    took = f" in {seconds:.0f} s" if isinstance(seconds, (int, float)) else ""
    where = f" on {info['executor']}" if isinstance(info.get("executor"), str) and info["executor"] != "local" else ""
    lines = [
        f"{out}: dataset {m['name']!r} built{took}{where}; tokenizer vocabulary {tok['vocab_size']} "
        f"(EOS id {tok['eos_id']}), tokens stored as {m['dtype']}",
        f"  {'domain':<14}{'documents':>11}{'MB':>9}{'train tokens':>14}{'val tokens':>12}{'bytes/token':>13}",
    ]
    for name, d in m["domains"].items():
        docs = d["train"]["documents"] + d["validation"]["documents"]
        mb = (d["train"]["bytes"] + d["validation"]["bytes"]) / 1e6
        lines.append(f"  {name:<14}{docs:>11,}{mb:>9.1f}{format_count(d['train']['tokens']):>14}"
                     f"{format_count(d['validation']['tokens']):>12}{d['train']['bytes_per_token'] or 0:>13.2f}")
    t = m["totals"]
    lines.append(f"  {'total':<14}{t['train']['documents'] + t['validation']['documents']:>11,}"
                 f"{(t['train']['bytes'] + t['validation']['bytes']) / 1e6:>9.1f}{format_count(t['train']['tokens']):>14}"
                 f"{format_count(t['validation']['tokens']):>12}")
    lines.extend(_funnel(m))
    lines.append(f"  what each cleaning stage removed: {out}/stats.json")
    return "\n".join(lines)


def _funnel(m: dict) -> list[str]:
    """A few lines on dedup, decontamination and the quality classifier (what the manifest recorded)."""
    lines = []
    dd = m.get("dedup")
    if isinstance(dd, dict):
        clusters = dd.get("clusters")
        removed = sum(dd.get(k) or 0 for k in ("exact_duplicates", "near_duplicates"))
        banding = f" (bands {dd['bands']} x rows {dd['rows']}, threshold {dd['threshold']})" if "bands" in dd else ""
        if clusters is not None:
            lines.append(f"  dedup: {clusters} duplicate clusters, {removed} documents removed{banding}")
    dc = m.get("decontamination")
    if isinstance(dc, dict):
        verb = "removed" if dc.get("action") == "remove" else "flagged"
        kept = dc.get("documents_overlapping_kept")
        lines.append(f"  decontamination: {dc.get(f'documents_{verb}', 0)} train documents {verb}"
                     + (f", {kept} kept that share less" if kept is not None else "")
                     + f" ({dc.get('ngram')}-word n-grams shared with evaluation text; removed/contaminated.jsonl says why)")
    q = m.get("quality")
    if isinstance(q, dict):
        acc = q.get("heldout_accuracy")
        lines.append(f"  quality: {q.get('buckets')} buckets per domain"
                     + (f", classifier held-out accuracy {acc:.3f}" if isinstance(acc, (int, float)) else ""))
    return lines


def register_mixture(sub) -> None:
    p = new_command(sub, "mixture", "tokens and epochs per domain for weights and a token budget", MIXTURE_DESCRIPTION)
    p.add_argument("dataset", metavar="DIR", help="a built dataset")
    p.add_argument("--weights", required=True, help="domain=weight or domain:qN=weight (a quality cell, "
                   "docs/data-quality.md),... (normalised; omitted ones get 0)")
    p.add_argument("--tokens", required=True, help="planned training tokens, e.g. 200M")
    p.add_argument("--seq-len", type=whole, default=512, help="sequence length (default 512)")
    p.add_argument("--max-epochs", type=number, default=4.0, help="warn for domains repeated more than this (default 4)")
    p.set_defaults(run=run_mixture)


def parse_weights(text: str) -> dict[str, float]:
    weights = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise GlassroomError(f"--weights: expected domain=weight,..., got {item!r}")
        if name.strip() in weights:
            raise GlassroomError(f"--weights: domain {name.strip()} is given twice; give each domain once")
        try:
            weights[name.strip()] = numbers.option_float(value)
        except numbers.NumberError:
            raise GlassroomError(f"--weights: {numbers.shown(name.strip())} has weight {numbers.shown(value)}, "
                                 "expected a number (finite)") from None
    return weights


def run_mixture(args: argparse.Namespace) -> int:
    from glassroom.data.build import require_dataset
    from glassroom.data.mixture import Mixture

    require_dataset(args.dataset)
    tokens = positive_count(args.tokens, "--tokens")
    if args.seq_len < 1:
        raise GlassroomError(f"--seq-len: must be at least 1, got {args.seq_len}")
    if not (math.isfinite(args.max_epochs) and args.max_epochs > 0):
        raise GlassroomError(f"--max-epochs: must be a positive number, got {args.max_epochs}")
    mixture = Mixture(args.dataset, parse_weights(args.weights), seq_len=args.seq_len, batch_size=1, max_epochs=args.max_epochs)
    print(f"{'domain':<14}{'weight':>8}{'tokens':>10}{'train tokens':>14}{'epochs':>8}")
    for name, r in mixture.epochs(tokens).items():
        print(f"{name:<14}{r['weight']:>8.3f}{format_count(r['tokens']):>10}{format_count(r['train_tokens']):>14}{r['epochs']:>8.2f}")
    for line in mixture.epoch_warnings(tokens):
        print(f"warning: {line}", file=sys.stderr)
    return 0


ATLAS_DESCRIPTION = """\
What is in a built dataset: a sample of its documents embedded offline, clustered by spherical
k-means into K topics, each labelled by its distinctive terms (class-based TF-IDF) with the
documents nearest its centre as excerpts and its share of documents and tokens by domain and
source, on a 2-D map. DIR/atlas/atlas.json also carries the build's funnel (stats.json), the mixture
at a planned budget, the tokenizer and each domain's languages (py3langid); `glassroom serve` and
`glassroom publish` show it as a page.

  --method better  (default) word statistics of the corpus (hashed TF-IDF + truncated SVD, a
                   function-word profile, typographic features) joined with wordllama's static
                   embeddings (a model inside its wheel, loaded offline)
  --method fast    the word statistics alone: about twice as fast, clusters domains less well

example:
  glassroom data atlas data/demo --k 40
  glassroom data atlas data/demo --k 5 --sampling per-domain --method fast --weights prose=0.4,code=0.6 --tokens 1B
"""


def register_atlas(sub) -> None:
    p = new_command(sub, "atlas", "cluster and map what a dataset holds (DIR/atlas/atlas.json)", ATLAS_DESCRIPTION)
    p.add_argument("dataset", metavar="DIR", help="a built dataset")
    p.add_argument("--k", type=whole, default=40, help="clusters (default 40)")
    p.add_argument("--sample", type=whole, default=20_000, metavar="N", help="documents to sample (default 20000)")
    p.add_argument("--sampling", choices=["uniform", "per-domain"], default="uniform",
                   help="uniform over documents, or the same number from each domain (default uniform)")
    p.add_argument("--method", choices=["fast", "better"], default=None,
                   help="embedding: better (default: word statistics joined with wordllama's static embeddings) or fast (word statistics only)")
    p.add_argument("--fine", type=whole, default=0, metavar="F", help="cluster into F first, then merge to K (e.g. 1000)")
    p.add_argument("--max-tokens", type=whole, default=512, help="tokens of each document to embed (default 512)")
    p.add_argument("--seed", type=whole, default=0, help="sampling and clustering seed (default 0)")
    p.add_argument("--weights", help="domain=weight,... for the mixture panel (default: proportional to train tokens)")
    p.add_argument("--tokens", help="planned training tokens for the mixture panel, e.g. 1B (default: one pass)")
    p.add_argument("--json", action="store_true", help="print atlas.json's summary fields as JSON instead of the table")
    p.set_defaults(run=run_atlas)


def run_atlas(args: argparse.Namespace) -> int:
    from glassroom.data.atlas import build_atlas, summary
    from glassroom.data.build import require_dataset

    require_dataset(args.dataset)
    tokens = positive_count(args.tokens, "--tokens")
    atlas = build_atlas(args.dataset, k=args.k, sample=args.sample, sampling=args.sampling, method=args.method,
                        fine=args.fine, seed=args.seed, max_tokens=args.max_tokens,
                        weights=parse_weights(args.weights) if args.weights else None, total_tokens=tokens)
    if args.json:
        print(json.dumps({key: v for key, v in atlas.items() if key not in ("points", "funnel")}, indent=2))
    else:
        print(summary(atlas))
    return 0


TASKS_DESCRIPTION = """\
Write lm-evaluation-harness tasks over the dataset's held-out (validation) split into DIR/tasks,
for `glassroom eval`, `train.eval_tasks` and `lm_eval --include_path DIR/tasks` alike (offline):

  glassroom_mc_<domain>   multiple choice (HellaSwag-style): a passage of a validation document, its
                          true continuation against --choices - 1 passages of the same length range
                          from other documents of the domain; acc and acc_norm (group glassroom_mc)
  glassroom_bpb_<domain>  rolling log-likelihood over the validation tokens [0 : N*L] (L = --seq-len,
                          N = --windows): its bits_per_byte equals the trainer's eval/<domain>/bpb for
                          train.seq_len = L and train.eval_sequences = N (group glassroom_bpb)

DIR/tasks holds a YAML per task and group, a JSONL of documents per task, utils.py and
manifest.json (tasks, items, seed, the sources of the documents). It is written into a temporary
folder and renamed into place: running again replaces DIR/tasks and nothing else (and clears what a
killed run left beside it). The same --seed gives the same items. glassroom eval loads only a tasks
folder whose YAML and utils.py are exactly what this command writes (lm-eval runs the code a task
folder names). docs/data-build.md has the details.

example:
  glassroom data tasks data/tiny --seq-len 32 --windows 4 --items 100
"""


def register_tasks(sub) -> None:
    p = new_command(sub, "tasks", "write local lm-eval tasks over the validation split (DIR/tasks)", TASKS_DESCRIPTION)
    p.add_argument("dataset", metavar="DIR", help="a built dataset")
    p.add_argument("--seq-len", type=whole, default=512, metavar="L", help="window of the bits-per-byte tasks: the run's train.seq_len (default 512)")
    p.add_argument("--windows", type=whole, default=32, metavar="N", help="windows per domain: the run's train.eval_sequences (default 32)")
    p.add_argument("--items", type=whole, default=200, metavar="N", help="multiple-choice items per domain (default 200)")
    p.add_argument("--choices", type=whole, default=4, metavar="K", help="choices per item, the true one included: 2 to 26 (default 4)")
    p.add_argument("--seed", type=whole, default=0, metavar="S", help="seed of the items and distractors (default 0)")
    p.add_argument("--json", action="store_true", help="print the tasks manifest as JSON instead of the summary")
    p.set_defaults(run=run_tasks)


def run_tasks(args: argparse.Namespace) -> int:
    from glassroom.data.build import require_dataset
    from glassroom.data.tasks import write_tasks

    require_dataset(args.dataset)
    manifest = write_tasks(args.dataset, seq_len=args.seq_len, windows=args.windows, items=args.items,
                           choices=args.choices, seed=args.seed)
    if args.json:
        print(json.dumps(manifest, indent=2))
        return 0
    print(f"{args.dataset}/tasks: {len(manifest['tasks'])} tasks (seed {manifest['seed']})")
    for name, t in manifest["tasks"].items():
        what = (f"{t['items']} items of {t['choices']} choices" if t["kind"] == "multiple_choice"
                else f"{t['windows']} windows of {t['seq_len']} tokens, {t['n_bytes']:.0f} bytes")
        print(f"  {name:<28}{what}")
    for group, members in manifest["groups"].items():
        print(f"  {group:<28}group of {len(members)}")
    for note in manifest["notes"]:
        print(f"note: {note}", file=sys.stderr)
    return 0


SUBCOMMANDS = [(register_build, run_build), (register_mixture, run_mixture), (register_atlas, run_atlas),
               (register_tasks, run_tasks), (register_chatset, run_chatset)]
