"""`glassroom data chatset`: the parser and the run of the sub-subcommand (glassroom/commands/data.py lists it)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from glassroom.commands import new_command, whole
from glassroom.data.chatset import SOURCES
from glassroom.errors import GlassroomError

DESCRIPTION = """\
Make a conversation set and a preference set offline from text on this machine, split into train
and held-out by subject, with the licence of every record, ready for `glassroom data build`:

  man      man pages of sections 1 and 8: what a command does, what an option does, which option
  python   the standard library's docstrings: what a module/function/class/method does, its signature
  gcide    GCIDE dictionary (dictd): what a word means
  wn       WordNet (dictd): what a word means

DIR gets sft/{train,heldout}.jsonl (messages), dpo/{train,heldout}.jsonl (prompt, chosen, rejected:
the true answer against another subject's answer in the same framing), domains/ (the same records
by domain), sft.yaml and dpo.yaml (recipes; --tokenizer puts a base model's tokenizer in them),
chatset.json (counts, skips, licences, seed) and README.md. The same --seed gives the same bytes.
About 5% of subjects (commands, functions, words) are held out, each subject wholly in one split.

A source that is not installed is skipped and counted (chatset.json skipped_sources); with none
left it is an error. DIR must be new or empty; --force replaces only a set this command wrote: every file listed,
unchanged, in its .glassroom-manifest.json (a file of yours there is refused by name, never deleted).
docs/chatset.md has the details.

example:
  glassroom data chatset --out lab/chat
  glassroom data build lab/chat/sft.yaml --out lab/data/chat-sft
"""


def register_chatset(sub) -> None:
    p = new_command(sub, "chatset", "questions and answers from man pages, Python docstrings, dictionaries", DESCRIPTION)
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write the set into (new or empty)")
    p.add_argument("--seed", type=whole, default=0, help="phrasing, caps, held-out subjects and rejected answers (default 0)")
    p.add_argument("--max-per-source", type=whole, default=4000, metavar="N",
                   help="conversations per source at most, whole subjects (default 4000)")
    p.add_argument("--sources", default=",".join(SOURCES), metavar="LIST",
                   help=f"comma-separated, of {', '.join(SOURCES)} (default all)")
    p.add_argument("--tokenizer", metavar="PATH", help="a base model's tokenizer.json for the recipes (tokenizer: {path: PATH})")
    p.add_argument("--man-dir", default="/usr/share/man", metavar="DIR", help="where man1/ and man8/ are (default /usr/share/man)")
    p.add_argument("--dictd-dir", default="/usr/share/dictd", metavar="DIR", help="where gcide/wn .index and .dict.dz are (default /usr/share/dictd)")
    p.add_argument("--force", action="store_true", help="replace DIR if it holds a chat set written earlier and nothing else")
    p.set_defaults(run=run_chatset)


def parse_sources(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names:
        if n not in SOURCES:
            raise GlassroomError(f"--sources: unknown source {n!r}; choose from {', '.join(SOURCES)}")
    if not names or len(set(names)) != len(names):
        raise GlassroomError(f"--sources: give each of {', '.join(SOURCES)} at most once, at least one")
    return names


def run_chatset(args: argparse.Namespace) -> int:
    from glassroom.data.chatset import make
    from glassroom.data.chatset.write import check_out, write
    from glassroom.data.tokenizer import load_tokenizer

    if args.max_per_source < 1:
        raise GlassroomError(f"--max-per-source: must be at least 1, got {args.max_per_source}")
    sources = parse_sources(args.sources)
    tokenizer = None
    if args.tokenizer is not None:
        path = Path(args.tokenizer).expanduser()
        if not path.is_file():
            raise GlassroomError(f"--tokenizer {args.tokenizer}: no such file; give a tokenizer.json (a base model's)")
        try:   # read now: a file that is not a tokenizer would only be found when a recipe is built
            load_tokenizer(path)
        except GlassroomError as exc:
            raise GlassroomError(f"--tokenizer {args.tokenizer}: {str(exc).partition(': ')[2] or exc}; give a "
                                 "tokenizer.json (a base model's)") from None
        tokenizer = str(path.resolve())
    out = Path(args.out).expanduser()
    check_out(out, args.force)  # before minutes of reading
    started = time.perf_counter()
    made = make(args.seed, args.max_per_source, sources, Path(args.man_dir), Path(args.dictd_dir))
    info = write(out, made, seed=args.seed, max_per_source=args.max_per_source, sources=sources,
                 tokenizer=tokenizer, force=args.force)
    t = info["totals"]
    print(f"{out}: {t['sft']['train'] + t['sft']['heldout']:,} conversations, {t['dpo']['train'] + t['dpo']['heldout']:,} "
          f"preference pairs in {time.perf_counter() - started:.1f} s (seed {args.seed})")
    print(f"  {'source':<8}{'domain':<12}{'train':>8}{'held out':>10}{'pairs':>8}{'subjects out':>14}")
    for name, e in info["sources"].items():
        c = e["conversations"]
        print(f"  {name:<8}{e['domain']:<12}{c['train']:>8,}{c['heldout']:>10,}{sum(e['pairs'].values()):>8,}"
              f"{e['subjects']['heldout']:>14,}")
    for name, why in info["skipped_sources"].items():
        print(f"note: source {name} skipped: {why}", file=sys.stderr)
    print(f"  recipes: {out}/sft.yaml, {out}/dpo.yaml; what it is: {out}/README.md")
    return 0
