"""Local lm-eval tasks written into a dataset (`glassroom data tasks DATASET`): DATASET/tasks/.

Two tasks per domain, both over the held-out (validation) split, both offline:

- `glassroom_mc_<domain>` (group `glassroom_mc`): HellaSwag-style multiple choice. The context is a
  passage of a validation document (about CONTEXT_CHARS characters, cut at whitespace); the true
  ending is the text that follows it (about ENDING_CHARS); the distractors are passages of the same
  length range (0.75x to 1.33x the true ending) from other validation documents of the domain.
  Metrics acc and acc_norm. Deterministic for a given --seed.
- `glassroom_bpb_<domain>` (group `glassroom_bpb`): rolling log-likelihood over the text of the
  validation tokens [0 : N*L] (L = --seq-len, N = --windows capped by the shard), one document.
  With max_length L, lm-eval's rolling windows (EOS as the prefix token) are the trainer's
  evaluation windows (glassroom/train/evaluate.py reads the split after an EOS), token for token;
  the bytes counted are the trainer's (shard.bytes_between), so bits_per_byte equals the trainer's
  eval/<domain>/bpb for the same L and eval_sequences = N.

The folder holds one YAML per task and group, one JSONL of documents per task, utils.py (a copy of
glassroom/data/task_utils.py, which finds the JSONL beside itself: the dataset may move) and
manifest.json. It is written into a temporary folder and renamed over DATASET/tasks at the end.

lm-eval executes the Python a task YAML names with `!function` (here utils.py), so a tasks folder
someone else wrote is their code running in the evaluating process. `verify_folder` is the guard
glassroom eval and train.eval_tasks pass through first: every YAML lm-eval would index must be the
one this module writes for the manifest's tasks and groups, byte for byte, and utils.py must be
task_utils.py. The documents (JSONL) are data: `verify_folder` reads each record (with
glassroom/numbers.py's bounds) and checks the fields the task files use (a multiple-choice record's
context, choices and gold; a rolling record's text and n_bytes), so a damaged record is one line
here instead of a template error inside lm-eval.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import numpy as np

from glassroom.data.mixture import Dataset
from glassroom.data.tokenizer import encode
from glassroom.errors import GlassroomError
from glassroom.numbers import loads as json_loads

# Format 2 names the documents' fields by column ("context"); format 1 wrote them as Jinja templates
# ("{{context}}"), which lm-eval compiles anew for every document (a fifth of an evaluation). Both give
# the same prompts and scores; folders of either format are read, format 2 is written.
FORMAT = "glassroom-tasks/2"
TEMPLATED_FORMAT = "glassroom-tasks/1"
READABLE_FORMATS = (TEMPLATED_FORMAT, FORMAT)
CONTEXT_CHARS = 300
ENDING_CHARS = 80
MAX_CHOICES = 26
MAX_TRIM = 4  # tokens a UTF-8 character's bytes can span at most
LENGTH_RANGE = (0.75, 4 / 3)  # a distractor's length over the true ending's
WHITESPACE = re.compile(r"\s")
TASK_NAME = re.compile(r"glassroom_(mc|bpb)_[\w-]+")  # a domain name as recipes allow it (no / or .)
GROUPS = {"glassroom_mc": ("multiple_choice", ("acc", "acc_norm")),
          "glassroom_bpb": ("loglikelihood_rolling", ("bits_per_byte",))}


def _spans_at(text: str, positions: np.ndarray, start: int, length: int) -> str | None:
    """text[start : the first whitespace at or after start + length], or None if that is too long."""
    i = int(np.searchsorted(positions, start + length))
    if i >= len(positions):
        return None
    end = int(positions[i])
    return text[start:end] if end - start <= 2 * length else None


def _doc_texts(dataset, domain: str, tok) -> list[str]:
    shard = dataset.shard(domain, "validation")
    return [tok.decode(shard.doc_tokens(i).tolist(), skip_special_tokens=False) for i in range(shard.n_docs)]


def mc_items(texts: list[str], items: int, choices: int, rng: np.random.Generator) -> list[dict]:
    """Up to `items` multiple-choice items from the documents `texts` (see the module doc)."""
    spaces = [np.array([m.start() for m in WHITESPACE.finditer(t)], dtype=np.int64) for t in texts]
    usable = [i for i, t in enumerate(texts) if len(t) > CONTEXT_CHARS + 2 * ENDING_CHARS]
    if len(texts) < 2 or not usable:
        return []
    out: list[dict] = []
    for _ in range(items * 20):
        if len(out) == items:
            break
        i = int(rng.choice(usable))
        text, pos = texts[i], spaces[i]
        cands = pos[(pos >= CONTEXT_CHARS) & (pos < len(text) - 2 * ENDING_CHARS)]
        if not len(cands):
            continue
        cut = int(rng.choice(cands))
        first = pos[(pos >= cut - CONTEXT_CHARS) & (pos < cut)]
        context = text[int(first[0]) + 1 if len(first) else cut - CONTEXT_CHARS: cut]
        ending = _spans_at(text, pos, cut, ENDING_CHARS)
        if not context.strip() or ending is None or not ending.strip():
            continue
        others = []
        for _ in range(50 * choices):
            if len(others) == choices - 1:
                break
            j = int(rng.integers(len(texts)))
            if j == i or len(spaces[j]) < 2:
                continue
            q = int(rng.choice(spaces[j]))
            span = _spans_at(texts[j], spaces[j], q, ENDING_CHARS)
            if (span is not None and span.strip() and span != ending and span not in others
                    and LENGTH_RANGE[0] <= len(span) / len(ending) <= LENGTH_RANGE[1]):
                others.append(span)
        if len(others) < choices - 1:
            continue
        gold = int(rng.integers(choices))
        options = others[:gold] + [ending] + others[gold:]
        out.append({"context": context, "choices": options, "gold": gold, "source_doc": i})
    return out


def bpb_document(dataset, domain: str, tok, seq_len: int, windows: int) -> dict | None:
    """The rolling task's one document for a domain, or None when the shard has no whole window."""
    shard = dataset.shard(domain, "validation")
    n = min(len(shard) // seq_len, windows)
    if n < 1:
        return None
    # The trainer's windows read the split after an EOS (Dataset.validation_batches), as lm-eval's
    # rolling windows read a document after the EOS prefix token: the same windows, token for token.
    ids = np.asarray(shard.tokens[: n * seq_len], dtype=np.int64).tolist()
    text = tok.decode(ids, skip_special_tokens=False)
    differs, trimmed = _roundtrip_differs(tok, text, ids), 0
    # The text is decoded whole, so only its end can fall inside a multi-byte UTF-8 character: then
    # it decodes as U+FFFD, which encodes as other tokens. The last tokens that do are left out (with
    # their bytes): the task then scores the trainer's tokens but for those few.
    for cut in range(1, min(MAX_TRIM, len(ids) - 1) + 1) if differs else ():
        shorter = tok.decode(ids[:-cut], skip_special_tokens=False)
        if not _roundtrip_differs(tok, shorter, ids[:-cut]):
            text, differs, trimmed = shorter, 0, cut
            break
    return {"text": text, "n_bytes": shard.bytes_between(0, n * seq_len - trimmed), "windows": n,
            "seq_len": seq_len, "tokens": len(ids) - trimmed, "trimmed_tokens": trimmed, "roundtrip_differs": differs}


def _roundtrip_differs(tok, text: str, ids: list[int]) -> int:
    """Positions where encoding `text` (the EOS text as the special token, as Hugging Face does)
    differs from `ids`, plus the length difference: 0 when lm-eval sees the trainer's tokens."""
    again = encode(tok, text)
    return sum(a != b for a, b in zip(again, ids)) + abs(len(again) - len(ids))


def _yaml(entries: dict) -> str:
    """YAML text: values written as JSON (valid YAML), strings starting with '!function ' as tags."""
    lines = []
    for key, value in entries.items():
        if isinstance(value, str) and value.startswith("!function "):
            lines.append(f"{key}: {value}")
        else:
            lines.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def _field(column: str, fmt: str) -> str:
    """How a task file names a document's field in `fmt` (see FORMAT)."""
    return "{{" + column + "}}" if fmt == TEMPLATED_FORMAT else column


def _mc_yaml(name: str, file: str, fmt: str = FORMAT) -> str:
    return _yaml({
        "task": name, "tag": ["glassroom"], "custom_dataset": "!function utils.load_docs",
        "dataset_kwargs": {"file": file}, "output_type": "multiple_choice", "test_split": "test",
        "doc_to_text": _field("context", fmt), "doc_to_target": _field("gold", fmt), "doc_to_choice": "choices",
        "target_delimiter": "",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                        {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    })


def _bpb_yaml(name: str, file: str, fmt: str = FORMAT) -> str:
    return _yaml({
        "task": name, "tag": ["glassroom"], "custom_dataset": "!function utils.load_docs",
        "dataset_kwargs": {"file": file}, "output_type": "loglikelihood_rolling", "test_split": "test",
        "doc_to_text": "", "doc_to_target": _field("text", fmt), "process_results": "!function utils.bpb_results",
        "metric_list": [{"metric": "bits_per_byte", "aggregation": "bits_per_byte", "higher_is_better": False}],
        "metadata": {"version": 1.0},
    })


def _group_yaml(group: str, tasks: list[str], metrics: tuple[str, ...]) -> str:
    return _yaml({"group": group, "task": tasks, "aggregate_metric_list": [
        {"metric": m, "aggregation": "mean", "weight_by_size": False} for m in metrics], "metadata": {"version": 1.0}})


def _sources(manifest: dict, domain: str) -> list[dict]:
    out = []
    for s in manifest["domains"][domain].get("sources", []):
        licence = s.get("licence") or s.get("license") or "not recorded in the dataset's manifest: see the source"
        out.append({"name": s.get("name"), "kind": s.get("kind"), "licence": licence})
    return out


def write_tasks(dataset_dir: str | Path, seq_len: int = 512, windows: int = 32, items: int = 200,
                choices: int = 4, seed: int = 0) -> dict:
    """Write DATASET/tasks (see the module doc); returns its manifest."""
    for key, value, least in (("--seq-len", seq_len, 1), ("--windows", windows, 1), ("--items", items, 1),
                              ("--choices", choices, 2)):
        if value < least:
            raise GlassroomError(f"{key}: must be at least {least}, got {value}")
    if choices > MAX_CHOICES:
        raise GlassroomError(f"--choices: at most {MAX_CHOICES} (the true ending and its distractors; "
                             f"HellaSwag has 4), got {choices}")
    if not 0 <= seed < 2**63:
        raise GlassroomError(f"--seed: must be between 0 and 2**63 - 1, got {seed}")
    dataset = Dataset(dataset_dir)
    tok = dataset.tokenizer()
    root = Path(dataset_dir)
    _clean_stale(root)
    tmp = root / f".tasks-tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        manifest = _write_into(tmp, dataset, tok, seq_len, windows, items, choices, seed)
        _replace(root / "tasks", tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _write_into(tmp: Path, dataset, tok, seq_len, windows, items, choices, seed) -> dict:
    shutil.copyfile(Path(__file__).with_name("task_utils.py"), tmp / "utils.py")
    tasks: dict[str, dict] = {}
    notes: list[str] = []
    for d_index, domain in enumerate(dataset.domains):
        texts = _doc_texts(dataset, domain, tok)
        rng = np.random.default_rng([seed, d_index, 0x6D63])
        mc = mc_items(texts, items, choices, rng)
        if mc:
            name = f"glassroom_mc_{domain}"
            (tmp / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mc), encoding="utf-8")
            (tmp / f"{name}.yaml").write_text(_mc_yaml(name, f"{name}.jsonl"), encoding="utf-8")
            tasks[name] = {"kind": "multiple_choice", "domain": domain, "items": len(mc), "choices": choices,
                           "metrics": ["acc", "acc_norm"]}
            if len(mc) < items:
                notes.append(f"{domain}: {len(mc)} multiple-choice items of {items} asked (short validation split)")
        else:
            notes.append(f"{domain}: no multiple-choice task (needs 2 validation documents, one over "
                         f"{CONTEXT_CHARS + 2 * ENDING_CHARS} characters)")
        doc = bpb_document(dataset, domain, tok, seq_len, windows)
        if doc is None:
            notes.append(f"{domain}: no bits-per-byte task (fewer than --seq-len {seq_len} validation tokens)")
            continue
        name = f"glassroom_bpb_{domain}"
        (tmp / f"{name}.jsonl").write_text(json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8")
        (tmp / f"{name}.yaml").write_text(_bpb_yaml(name, f"{name}.jsonl"), encoding="utf-8")
        tasks[name] = {"kind": "loglikelihood_rolling", "domain": domain, "items": 1, "seq_len": seq_len,
                       "windows": doc["windows"], "tokens": doc["tokens"], "n_bytes": doc["n_bytes"],
                       "trimmed_tokens": doc["trimmed_tokens"], "roundtrip_differs": doc["roundtrip_differs"],
                       "metrics": ["bits_per_byte"]}
        if doc["trimmed_tokens"]:
            notes.append(f"{domain}: the last {doc['trimmed_tokens']} of {doc['tokens'] + doc['trimmed_tokens']} "
                         "validation tokens end inside a multi-byte character and are left out of the rolling task "
                         "(its bits per byte may differ from the trainer's by those tokens)")
        if doc["roundtrip_differs"]:
            notes.append(f"{domain}: re-encoding the rolling task's text differs from the shard's tokens at "
                         f"{doc['roundtrip_differs']} positions (a window edge inside a character or a merge)")
    groups = {}
    for group, (kind, metrics) in GROUPS.items():
        members = [n for n, t in tasks.items() if t["kind"] == kind]
        if members:
            (tmp / f"_{group}.yaml").write_text(_group_yaml(group, members, metrics), encoding="utf-8")
            groups[group] = members
    manifest = {"format": FORMAT, "dataset": dataset.manifest.get("name"), "dataset_build": build_of(dataset.manifest),
                "seed": seed, "seq_len": seq_len,
                "windows": windows, "items": items, "choices": choices, "context_chars": CONTEXT_CHARS,
                "ending_chars": ENDING_CHARS, "tasks": tasks, "groups": groups, "notes": notes,
                "sources": {d: _sources(dataset.manifest, d) for d in dataset.domains}}
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _clean_stale(root: Path) -> None:
    """What a killed `data tasks` left beside DATASET/tasks: its temporary folder is removed; an old
    tasks/ it had moved aside but not yet replaced (a kill mid-swap) is put back."""
    for entry in sorted(root.glob(".tasks-*-*")):
        kind, _, pid = entry.name.removeprefix(".tasks-").partition("-")
        if kind not in ("tmp", "old") or not pid.isdigit() or _alive(int(pid)) or entry.is_symlink():
            continue
        if kind == "old" and not (root / "tasks").exists() and not (root / "tasks").is_symlink():
            os.replace(entry, root / "tasks")
        else:
            shutil.rmtree(entry, ignore_errors=True)


def build_of(dataset_manifest: dict) -> dict:
    """Which build of a dataset: its manifest's creation time and recipe hash."""
    return {"created": dataset_manifest.get("created"), "recipe_hash": dataset_manifest.get("recipe_hash")}


def _replace(final: Path, new: Path) -> None:
    """Rename `new` over `final`; the old folder is removed only after the new one is in place. Not
    folders.swap_into_place: the old folder's name (.tasks-old-PID) is what the recovery of a
    killed run looks for."""
    old = final.with_name(f".tasks-old-{os.getpid()}")
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise GlassroomError(f"{final}: exists and is not a folder; move it away first")
    if final.exists():
        os.replace(final, old)
    try:
        os.replace(new, final)
    except OSError as exc:  # another `data tasks` put its folder there in between
        if final.exists() or final.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        elif old.exists():
            os.replace(old, final)
        raise GlassroomError(f"{final}: could not be replaced ({exc.strerror}); another glassroom data tasks "
                             "wrote it at the same time: run again") from None
    shutil.rmtree(old, ignore_errors=True)


def read_task_manifest(tasks_dir: Path) -> dict:
    path = Path(tasks_dir) / "manifest.json"
    try:
        manifest = json_loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise GlassroomError(f"{path}: cannot be read ({exc.__class__.__name__}); rewrite the tasks with "
                             "glassroom data tasks DATASET") from None
    if (not isinstance(manifest, dict) or manifest.get("format") not in READABLE_FORMATS
            or not isinstance(manifest.get("tasks"), dict)):
        raise GlassroomError(f"{path}: not a glassroom tasks manifest; rewrite it with glassroom data tasks DATASET")
    return manifest


def expected_files(manifest: dict, where: Path) -> dict[str, bytes]:
    """{file name: bytes} of the YAML files and utils.py that write_tasks writes for `manifest`."""
    files = {"utils.py": Path(__file__).with_name("task_utils.py").read_bytes()}
    writers = {"multiple_choice": _mc_yaml, "loglikelihood_rolling": _bpb_yaml}
    for name, task in manifest["tasks"].items():
        kind = task.get("kind") if isinstance(task, dict) else None
        if not isinstance(name, str) or not TASK_NAME.fullmatch(name) or kind not in writers:
            raise GlassroomError(f"{where}: task {name!r} is not one glassroom writes; rewrite the tasks with "
                                 "glassroom data tasks DATASET")
        files[f"{name}.yaml"] = writers[kind](name, f"{name}.jsonl", manifest["format"]).encode("utf-8")
    groups = manifest.get("groups") or {}
    for group, members in (groups.items() if isinstance(groups, dict) else ()):
        if group not in GROUPS or not isinstance(members, list) or not all(m in manifest["tasks"] for m in members):
            raise GlassroomError(f"{where}: group {group!r} is not one glassroom writes; rewrite the tasks with "
                                 "glassroom data tasks DATASET")
        files[f"_{group}.yaml"] = _group_yaml(group, members, GROUPS[group][1]).encode("utf-8")
    return files


def verify_folder(tasks_dir: str | Path) -> dict:
    """The manifest of a tasks folder that runs only glassroom's code under lm-eval (module doc), else
    one line naming the first file that differs. Any *.yaml below the folder counts: lm-eval indexes
    them all."""
    root = Path(tasks_dir)
    manifest = read_task_manifest(root)
    where = root / "manifest.json"
    expected = expected_files(manifest, where)
    found = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.yaml"))
    for name in found:
        if name not in expected:
            raise GlassroomError(f"{root / name}: not a task file glassroom wrote (lm-eval would load it and run the "
                                 "code it names); remove it, or rewrite the tasks with glassroom data tasks DATASET")
    for name, content in expected.items():
        path = root / name
        if name.endswith(".yaml") and name not in found and not path.is_symlink():
            raise GlassroomError(f"{path}: missing; rewrite the tasks with glassroom data tasks DATASET")
        try:
            same = not path.is_symlink() and path.is_file() and path.read_bytes() == content
        except OSError:
            same = False
        if not same:
            raise GlassroomError(f"{path}: not the file glassroom writes (lm-eval runs the code a tasks folder names, "
                                 "so only glassroom's own is run); rewrite the tasks with glassroom data tasks DATASET")
    for name, task in manifest["tasks"].items():
        check_documents(root / f"{name}.jsonl", task["kind"])
    return manifest


def _record_problem(record, kind: str) -> str | None:
    """What is wrong with one task record for the fields its task file reads, or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if kind == "multiple_choice":
        choices, gold = record.get("choices"), record.get("gold")
        if not isinstance(record.get("context"), str):
            return "'context' is not text"
        if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
            return "'choices' is not a list of at least two texts"
        if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
            return f"'gold' is not the index of one of its {len(choices)} choices"
        return None
    n_bytes = record.get("n_bytes")
    if not isinstance(record.get("text"), str):
        return "'text' is not text"
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, (int, float)) or not 0 < n_bytes < math.inf:
        return "'n_bytes' is not a positive number of bytes"
    return None


def check_documents(path: Path, kind: str) -> None:
    """One line naming the file and line of the first record `path` holds that the task cannot use
    (not JSON, a number past numbers.py's bounds, a field missing or of the wrong type)."""
    rewrite = "rewrite the tasks with glassroom data tasks DATASET"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise GlassroomError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc.__class__.__name__}); "
                             f"{rewrite}") from None
    records = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json_loads(line)
        except (ValueError, RecursionError) as exc:
            why = "too deep" if isinstance(exc, RecursionError) else getattr(exc, "msg", str(exc))
            raise GlassroomError(f"{path}:{lineno}: not a usable JSON record ({why}); {rewrite}") from None
        problem = _record_problem(record, kind)
        if problem:
            raise GlassroomError(f"{path}:{lineno}: {problem}; {rewrite}")
        records += 1
    if not records:
        raise GlassroomError(f"{path}: no records; {rewrite}")


def written_here(tasks_dir: Path) -> bool:
    """True when `tasks_dir` holds only what `data tasks` writes (and Python's __pycache__ of its
    utils.py): derived from the dataset, so `data build --force` may replace it with the dataset."""
    root = Path(tasks_dir)
    if root.is_symlink() or not root.is_dir():
        return False
    try:
        manifest = read_task_manifest(root)
        names = set(expected_files(manifest, root)) | {"manifest.json"}
        names |= {f"{name}.jsonl" for name in manifest["tasks"]}
        for entry in root.iterdir():
            if entry.name == "__pycache__" and entry.is_dir() and not entry.is_symlink():
                if any(not f.name.startswith("utils.") or not f.name.endswith(".pyc") for f in entry.iterdir()):
                    return False
            elif entry.name not in names or entry.is_symlink() or not entry.is_file():
                return False
    except (GlassroomError, OSError):
        return False
    return True
