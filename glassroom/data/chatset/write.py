"""Writing a chat set folder: the JSONL files, chatset.json, README.md and the sft/dpo recipes.

The folder is written beside DIR under a temporary name and swapped into place at the end, so a
failed run leaves an existing DIR as it was; runs writing the same DIR take turns (the data build's
lock beside DIR), and the second finds DIR written and needs --force like any other run. An existing DIR that is not empty is replaced only with
--force, and only when every file in it is listed, unchanged, in the ownership manifest this command
wrote there (glassroom.folders.OWNED): a user's file, a .git/ or a stray chatset.json is never deleted.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from pathlib import Path

from glassroom.data.chatset.readme import readme
from glassroom.errors import GlassroomError
from glassroom.folders import check_owned, swap_into_place, write_owned

FORMAT = "glassroom-chatset/1"
SPLITS = {"train": "train", "heldout": "validation"}  # file name -> the recipe's split
COMMAND = "data chatset"   # its name in the ownership manifest


def check_out(out: Path, force: bool) -> None:
    """DIR may be new or empty; with --force, a chat set this command wrote, every file in it listed
    unchanged in its ownership manifest (glassroom.folders.OWNED); nothing else."""
    if out.exists() and not out.is_dir():
        raise GlassroomError(f"--out {out}: is a file; give a folder for the chat set")
    if check_owned(out, COMMAND) is not None and not force:
        raise GlassroomError(f"--out {out}: exists and is not empty; choose a new folder, or --force to replace "
                             "a chat set written earlier")


def _jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")


def _recipe(task: str, final: Path, domains: dict[str, list[str]], tokenizer: str | None, seed: int) -> str:
    """The recipe over the domain files; `domains` names the parts that hold records (an empty file
    would be a build error: a domain whose held-out file is empty has no validation split)."""
    kind = "conversations" if task == "sft" else "preferences"
    lines = [f"# {task.upper()} data from the chat set in this folder (written by glassroom data chatset --seed {seed}).",
             f"# Build: glassroom data build {final / (task + '.yaml')} --out DATA_DIR",
             "# heldout.jsonl is the validation split: whole subjects (commands, functions, words) never seen in train.",
             "# Fuzzy dedup is off: questions share templates, so near-duplicate detection would compare the templates.",
             f"name: chatset-{task}", f"task: {task}", "domains:"]
    for domain, parts in domains.items():
        lines += [f"  {domain}:", "    sources:"]
        for part, split in SPLITS.items():
            if part not in parts:
                continue
            path = final / "domains" / domain / f"{task}-{part}.jsonl"
            lines.append(f"      - {{kind: {kind}, name: {domain}-{part}, path: {json.dumps(str(path))}, "
                         f"id_field: id, split: {split}}}")
    lines += ["dedup:", "  fuzzy: false"]
    if tokenizer:
        lines += ["tokenizer:", f"  path: {json.dumps(tokenizer)}"]
    return "\n".join(lines) + "\n"


def write(out: Path, made: dict, *, seed: int, max_per_source: int, sources: list[str], tokenizer: str | None,
          force: bool) -> dict:
    """Write the set `made` (glassroom.data.chatset.make) into `out`; returns chatset.json's content."""
    from glassroom.data.build import build_lock  # lazy: numpy loads only when this runs

    final = out.resolve()
    check_out(final, force)
    final.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(final):  # one writer of DIR at a time (a data build to DIR takes the same lock)
        check_out(final, force)  # again: another run may have written DIR while this one read its sources
        for stale in final.parent.glob(f".{glob.escape(final.name)}.chatset-*"):
            if stale.is_dir() and not stale.is_symlink():  # left by a killed run: no live one holds the lock
                shutil.rmtree(stale, ignore_errors=True)
        return _write(final, made, seed=seed, max_per_source=max_per_source, sources=sources, tokenizer=tokenizer)


def _write(final: Path, made: dict, *, seed: int, max_per_source: int, sources: list[str],
           tokenizer: str | None) -> dict:
    tmp = final.parent / f".{final.name}.chatset-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        report = made["report"]
        domains = sorted({e["domain"] for e in report["sources"].values()})
        for task in ("sft", "dpo"):
            present: dict[str, list[str]] = {d: [] for d in domains}
            for part in SPLITS:
                records = made[task][part]
                _jsonl(tmp / task / f"{part}.jsonl", records)
                for domain in domains:
                    names = {n for n, e in report["sources"].items() if e["domain"] == domain}
                    mine = [r for r in records if r["source"] in names]
                    _jsonl(tmp / "domains" / domain / f"{task}-{part}.jsonl", mine)
                    if mine:
                        present[domain].append(part)
            present = {d: parts for d, parts in present.items() if parts}
            (tmp / f"{task}.yaml").write_text(_recipe(task, final, present, tokenizer, seed), encoding="utf-8")
        info = {
            "format": FORMAT, "seed": seed, "max_per_source": max_per_source, "sources_asked": sources,
            "heldout": "about 5% of subjects (commands, functions, words), chosen by a hash of (seed, subject)",
            "tokenizer": tokenizer,
            "totals": {task: {part: len(made[task][part]) for part in SPLITS} for task in ("sft", "dpo")},
            **report,
        }
        (tmp / "chatset.json").write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(readme(info, made), encoding="utf-8")
        write_owned(tmp, COMMAND)   # last: every file above; --force later replaces only these
        check_out(final, True)   # again just before the swap: nothing put in DIR since is ever deleted
        swap_into_place(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info
