"""`glassroom eval PATH --tasks LIST`: lm-eval tasks on a run's checkpoint or a Hugging Face folder."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from glassroom.commands import new_command, whole
from glassroom.errors import GlassroomError
from glassroom.observe.run_folder import config_path, has_config

DESCRIPTION = """\
Score a model on lm-evaluation-harness tasks, in-process, through glassroom's model adapter
(log-likelihood, rolling log-likelihood, greedy generation; batched).

PATH is a run folder (its newest intact checkpoint, or --step) or a Hugging Face folder (from
`glassroom export`). Tasks are looked up in the tasks folder: --tasks-dir, else for a run folder
its dataset's tasks/ (written by `glassroom data tasks DATASET`). Its local tasks:
  glassroom_mc_<domain>   multiple-choice continuation from held-out documents (acc, acc_norm)
  glassroom_bpb_<domain>  rolling log-likelihood over the validation stream (bits_per_byte; equals
                          the trainer's eval/<domain>/bpb at --max-length = train.seq_len)
  glassroom_mc, glassroom_bpb   the groups of each (mean over domains)
Names lm-eval ships (hellaswag, arc_easy, lambada_openai, ...) pass through; they download their
data, so they need the network.

--tasks-dir DIR may be any folder of lm-eval task YAML files (your own tasks, as lm_eval
--include_path takes them). A folder `glassroom data tasks` wrote is verified file by file. Any
other folder runs as it is when it holds only YAML and data; when it holds Python (a .py file, or a
YAML value tagged !function, which lm-eval imports and runs) it is refused unless --trust-code is
given. Without --trust-code its templates render in Jinja's sandbox and its metrics must be ones
lm-eval registers.

For a run folder the scores are also written to its store at the checkpoint's step as
downstream/<task>/<metric> with a `downstream` event (the dashboard draws them over checkpoints);
evaluating the same step again replaces them. A Hugging Face folder's scores are printed only, and
so are scores that --limit computed over part of a task, or with a --max-length other than the
run's train.seq_len (they are not the checkpoint's score).

example:
  glassroom data tasks data/tiny --seq-len 32 --windows 4
  glassroom eval runs/tiny --tasks glassroom_mc,glassroom_bpb
  glassroom eval exported/ --tasks glassroom_mc_prose --tasks-dir data/tiny/tasks --limit 50 --json
  glassroom eval runs/tiny --tasks my_qa,my_prose --tasks-dir mytasks
  glassroom eval runs/tiny --tasks my_scored --tasks-dir theirtasks --trust-code
"""


def register(sub) -> None:
    p = new_command(sub, "eval", "score a checkpoint on lm-eval tasks (local or from the hub)", DESCRIPTION)
    p.add_argument("path", metavar="PATH", help="a run folder or a Hugging Face folder")
    p.add_argument("--tasks", required=True, metavar="LIST", help="comma-separated task or group names")
    p.add_argument("--tasks-dir", metavar="DIR",
                   help="folder of lm-eval task files: glassroom's or your own (default: the run's DATASET/tasks)")
    p.add_argument("--trust-code", action="store_true",
                   help="run the Python a tasks folder holds (.py files, !function in its YAML); refused without it")
    p.add_argument("--step", type=whole, metavar="N", help="the checkpoint at step N (default: the newest intact one)")
    p.add_argument("--limit", type=whole, metavar="N",
                   help="at most N items per task (scores of a task cut short are printed, not stored)")
    p.add_argument("--batch-size", type=whole, default=8, metavar="B", help="sequences per forward (default 8)")
    p.add_argument("--max-length", type=whole, metavar="L",
                   help="longest sequence the model sees (default: a run's train.seq_len, else the model's max_seq_len)")
    p.add_argument("--json", action="store_true", help="print the scores as JSON")
    p.set_defaults(run=run)


def _check(args: argparse.Namespace) -> list[str]:
    names = [n.strip() for n in args.tasks.split(",") if n.strip()]
    if not names:
        raise GlassroomError("--tasks: give at least one task name, e.g. --tasks glassroom_mc")
    if len(set(names)) != len(names):
        raise GlassroomError("--tasks: a task is named twice; name each once")
    for key in ("limit", "batch_size", "max_length", "step"):
        value = getattr(args, key)
        least = 0 if key == "step" else 1
        if value is not None and value < least:
            raise GlassroomError(f"--{key.replace('_', '-')}: must be at least {least}, got {value}")
    return names


def run_tasks_dir(run_dir: Path) -> Path:
    """DATASET/tasks of the dataset a run folder trained on (its config.yaml's data.path)."""
    from glassroom.train.run_dir import saved_config

    saved = saved_config(Path(run_dir))
    data = saved.get("data") if isinstance(saved.get("data"), dict) else {}
    if not isinstance(data.get("path"), str):
        raise GlassroomError(f"{config_path(run_dir)}: no data.path; give the tasks folder with --tasks-dir")
    return Path(os.path.expanduser(data["path"])) / "tasks"


def run(args: argparse.Namespace) -> int:
    names = _check(args)
    from glassroom.hf.load import is_hf_folder
    from glassroom.train.run_folder import load

    path = Path(args.path).expanduser()
    if not path.is_dir():
        raise GlassroomError(f"{path}: no such folder (a run folder or a Hugging Face folder)")
    is_run = has_config(path) or not is_hf_folder(path)
    step, max_length, special, seq_len = None, args.max_length, (None, None), None
    if args.tasks_dir:
        tasks_dir = Path(args.tasks_dir).expanduser()
    elif is_run:
        tasks_dir = run_tasks_dir(path)
        if not tasks_dir.exists() and not any(n.startswith("glassroom") for n in names):
            tasks_dir = None  # tasks lm-eval ships only: the dataset needs no tasks folder
    else:
        tasks_dir = None
    glassroom_tasks = False
    if tasks_dir is not None:
        from glassroom.downstream.run import check_folder  # lazy: keeps `glassroom --help` free of numpy and yaml

        # A damaged task file or record, or code not trusted: one line before the model loads.
        glassroom_tasks, _ = check_folder(tasks_dir, args.trust_code, "--tasks-dir" if args.tasks_dir else "")
    if is_run:
        from glassroom.data.tokenizer import load_tokenizer
        from glassroom.hf.load import build_from_state
        from glassroom.train.run_folder import read_run_state, run_tokenizer_path

        # The checkpoint, verified once; chosen again if a live trainer's retention prunes it meanwhile.
        found, state, _ = read_run_state(path, args.step)
        step = found.step
        model = build_from_state(found.model_cfg, state, str(found.checkpoint))
        tokenizer = load_tokenizer(run_tokenizer_path(found))
        seq_len = (found.config.get("train") or {}).get("seq_len")
        max_length = max_length or (seq_len if isinstance(seq_len, int) else None)
    else:
        from glassroom.downstream.adapter import special_ids

        model, tokenizer = load(path, args.step)
        special = special_ids(path, tokenizer)
    from glassroom.downstream import run as downstream

    try:
        run_dataset = run_tasks_dir(path).parent if is_run else None
    except GlassroomError:  # no data.path in its config.yaml: --tasks-dir was given
        run_dataset = None
    if glassroom_tasks:
        _note_windows(names, tasks_dir, max_length or model.cfg.max_seq_len, run_dataset)
    result = downstream.evaluate(model, tokenizer, names, tasks_dir, limit=args.limit, batch_size=args.batch_size,
                                 max_length=max_length, eos_id=special[0], prefix_id=special[1],
                                 trust_code=args.trust_code)
    scores = result["scores"]
    # A score over part of a task, or with other windows than the run's, is not the checkpoint's
    # score: it would replace the one the dashboard draws at that step.
    other_length = isinstance(seq_len, int) and max_length != seq_len
    store = is_run and not result["cut"] and not other_length
    if store:
        downstream.store_results(path, step, scores, checkpoint=found.checkpoint.name)
    elif is_run and result["cut"]:
        task, (scored, total) = next(iter(result["cut"].items()))
        print(f"note: not stored in {path}: --limit {args.limit} scored {scored} of {task}'s {total} items "
              "(a part of a task is not the checkpoint's score; leave --limit out to store)", file=sys.stderr)
    elif is_run:
        print(f"note: not stored in {path}: --max-length {max_length} is not the run's train.seq_len {seq_len} "
              "(leave --max-length out to store)", file=sys.stderr)
    if args.json:
        print(json.dumps({"path": str(path), "step": step, "scores": scores, "items": result["items"],
                          "seconds": round(result["seconds"], 3), "stored": store}, indent=2))
    else:
        where = f"step {step}" if step is not None else "Hugging Face folder"
        print(f"{path} ({where}): {result['items']} items in {result['seconds']:.1f} s"
              + (f"; stored as downstream/<task>/<metric> at step {step}" if store else ""))
        for task, metrics in scores.items():
            print(f"  {task:<28}" + "  ".join(f"{m} {v:.4f}" for m, v in metrics.items()))
    sys.stdout.flush()
    return 0


def _note_windows(names: list[str], tasks_dir: Path | None, max_length: int, run_dataset: Path | None) -> None:
    """A note when the bits-per-byte tasks were written for another window than the one scored, or
    from another build of the data than the run trained on: their number is then not comparable to
    the trainer's eval/<domain>/bpb."""
    from glassroom.data.tasks import build_of, read_task_manifest

    if tasks_dir is None or not any(n.startswith("glassroom_bpb") or n == "glassroom" for n in names):
        return
    manifest = read_task_manifest(tasks_dir)
    written = manifest.get("seq_len")
    if isinstance(written, int) and written != max_length:
        print(f"note: {tasks_dir}'s bits-per-byte tasks were written for windows of {written} tokens and are scored "
              f"with --max-length {max_length}: not comparable to the trainer's eval/<domain>/bpb", file=sys.stderr)
    if run_dataset is None or not isinstance(manifest.get("dataset_build"), dict):
        return
    try:
        trained_on = build_of(json.loads((run_dataset / "manifest.json").read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return
    if manifest["dataset_build"] != trained_on:
        print(f"note: {tasks_dir} was written from another build of the data than the run's ({run_dataset}): "
              "its bits per byte are of other text, not comparable to the trainer's eval/<domain>/bpb", file=sys.stderr)
