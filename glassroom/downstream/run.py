"""Run lm-eval tasks in-process on a glassroom model and store the scores in a run's store.

Task names are looked up in a tasks folder (`glassroom data tasks` writes DATASET/tasks) through
lm-eval's TaskManager(include_path=...); names lm-eval ships (hellaswag, arc_easy, ...) pass
through and need the network to fetch their data. When every task asked for is local, the Hugging
Face libraries are put offline (HF_*_OFFLINE=1) for the call. Scores are flattened to
{task: {metric: value}} (filters `,none` dropped, standard errors left out); a group's aggregate
is a task of its own. In a run's store they are `downstream/<task>/<metric>` at the checkpoint's
step, with one `downstream` event; evaluating a step again replaces its values.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from pathlib import Path

from glassroom.data.tasks import read_task_manifest, verify_folder
from glassroom.errors import GlassroomError
from glassroom.observe.store import StoreWriter, store_path

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


@contextlib.contextmanager
def private_bytecode():
    """Python reads and writes compiled modules under a fresh folder of its own for the call, not in a
    tasks folder's __pycache__: a .pyc placed there would run instead of the verified utils.py."""
    import sys
    import tempfile

    saved = sys.pycache_prefix
    with tempfile.TemporaryDirectory(prefix="glassroom-pycache-") as prefix:
        sys.pycache_prefix = prefix
        try:
            yield
        finally:
            sys.pycache_prefix = saved


_MANAGERS: dict[tuple, object] = {}


def task_manager(tasks_dir: Path | None, names: list[str] | None = None):
    """lm-eval's TaskManager over `tasks_dir`, and over lm-eval's own task files unless every one of
    `names` is local (indexing lm-eval's thousands of files takes seconds). Kept per folder (and the
    folder's manifest.json time) for the process: training reuses it."""
    from lm_eval.tasks import TaskManager  # lazy: lm_eval loads only when this runs

    if tasks_dir is not None and not Path(tasks_dir).is_dir():
        raise GlassroomError(f"{tasks_dir}: no tasks folder; write it with glassroom data tasks DATASET "
                             "(or give another with --tasks-dir)")
    if tasks_dir is not None:
        verify_folder(Path(tasks_dir))
    defaults = names is None or not set(names) <= set(local_names(tasks_dir))
    manifest = Path(tasks_dir) / "manifest.json" if tasks_dir is not None else None
    key = (str(Path(tasks_dir).resolve()) if tasks_dir is not None else None,
           manifest.stat().st_mtime_ns if manifest is not None and manifest.exists() else None, defaults)
    if key not in _MANAGERS:
        _MANAGERS[key] = TaskManager(include_path=str(tasks_dir) if tasks_dir is not None else None,
                                     include_defaults=defaults)
    return _MANAGERS[key]


def local_names(tasks_dir: Path | None) -> list[str]:
    if tasks_dir is None or not Path(tasks_dir).is_dir():
        return []

    manifest = read_task_manifest(Path(tasks_dir))
    return sorted(list(manifest["tasks"]) + list(manifest.get("groups", {})))


def check_names(names: list[str], manager, tasks_dir: Path | None) -> None:
    known = set(manager.all_subtasks) | set(manager.all_groups) | set(manager.all_tags)
    unknown = [n for n in names if n not in known]
    if unknown:
        if tasks_dir is None:
            where = "no tasks folder given: --tasks-dir DATASET/tasks for the local ones"
        else:
            where = f"local tasks: {', '.join(local_names(tasks_dir)) or f'none in {tasks_dir}'}"
        raise GlassroomError(f"--tasks: unknown task {unknown[0]!r} ({where}; or a task name lm-eval ships)")


def flatten(results: dict) -> dict[str, dict[str, float]]:
    """lm-eval's results['results'] as {task: {metric: value}}: finite numbers only, no stderr."""
    out: dict[str, dict[str, float]] = {}
    for task, metrics in results.get("results", {}).items():
        for key, value in metrics.items():
            metric, _, _filter = key.partition(",")
            if metric.endswith("_stderr") or metric == "sample_len" or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if math.isfinite(float(value)):
                out.setdefault(task, {})[metric if _filter in ("", "none") else f"{metric}_{_filter}"] = float(value)
    return out


@contextlib.contextmanager
def _quiet_lm_eval():
    """lm-eval's results record the environment: it runs `git describe` in the current folder (git
    prints "fatal: not a git repository" outside one) and torch's collect_env (seconds of
    subprocesses, at every checkpoint of a training run): record versions only, quietly. And its
    progress bar per task while building requests (no option turns it off) stays off stderr."""
    import functools
    import importlib.metadata

    import lm_eval.api.task as task_module  # lazy: lm_eval loads only when this runs
    import lm_eval.evaluator as evaluator

    def git_hash():
        import subprocess

        try:
            done = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() or None

    def env_info(storage: dict) -> None:
        for package in ("lm_eval", "transformers", "torch"):
            try:
                storage[f"{package}_version"] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                pass

    saved = evaluator.get_git_commit_hash, evaluator.add_env_info, task_module.tqdm
    evaluator.get_git_commit_hash, evaluator.add_env_info = git_hash, env_info
    task_module.tqdm = functools.partial(saved[2], disable=True)
    try:
        yield
    finally:
        evaluator.get_git_commit_hash, evaluator.add_env_info, task_module.tqdm = saved


@contextlib.contextmanager
def lm_eval_call(names: list[str], tasks_dir: Path | None):
    """Around a call into lm-eval for `names`: the folder verified, the Hugging Face libraries offline
    when every name is local, compiled modules kept private, and lm-eval's errors as one line."""
    if tasks_dir is not None:
        verify_folder(Path(tasks_dir))  # every time: training reuses a manager while the folder may change
    local = set(local_names(tasks_dir))
    saved = {k: os.environ.get(k) for k in OFFLINE_VARS}
    if all(n in local for n in names):
        os.environ.update({k: "1" for k in OFFLINE_VARS})
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    try:
        with private_bytecode(), _quiet_lm_eval():
            yield
    except ValueError as exc:  # lm-eval's word for a bad task list (a group and its member, ...)
        raise GlassroomError(f"--tasks: {str(exc).splitlines()[0][:300]}") from None
    except OSError as exc:  # a hub task's data could not be fetched (ConnectionError, offline mode, ...)
        hub = [n for n in names if n not in local]
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise GlassroomError(f"--tasks: cannot load the data of {', '.join(hub) or ', '.join(names)} ({first}); "
                             "tasks lm-eval ships download it from the Hugging Face hub: run where it is "
                             "reachable, or use the local tasks (glassroom data tasks)") from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_tasks(names: list[str], tasks_dir: Path | None, manager=None) -> None:
    """Load `names` as lm-eval would for an evaluation (their files and data), so that a task list
    lm-eval refuses or data it cannot fetch is known before a training run starts."""
    with lm_eval_call(names, tasks_dir):
        manager = manager or task_manager(tasks_dir, names)
        check_names(names, manager, tasks_dir)
        manager.load(list(names))


def evaluate(model, tokenizer, names: list[str], tasks_dir: Path | None, limit: int | None = None,
             batch_size: int = 8, max_length: int | None = None, device: str = "cpu", manager=None,
             eos_id: int | None = None, prefix_id: int | None = None) -> dict:
    """Run `names` on (model, tokenizer); returns {"scores": {task: {metric: v}}, "items": n, "seconds": s,
    "cut": {task: (scored, total)} for the tasks `limit` scored only in part}."""
    import lm_eval  # lazy: lm_eval loads only when this runs

    from glassroom.downstream.adapter import GlassroomLM  # lazy: lm_eval, torch load only when this runs

    with lm_eval_call(names, tasks_dir):
        manager = manager or task_manager(tasks_dir, names)
        check_names(names, manager, tasks_dir)
        lm = GlassroomLM(model, tokenizer, batch_size=batch_size, max_length=max_length, device=device,
                         eos_id=eos_id, prefix_id=prefix_id)
        start = time.perf_counter()
        results = lm_eval.simple_evaluate(model=lm, tasks=list(names), task_manager=manager, limit=limit,
                                          bootstrap_iters=0, log_samples=False)
        seconds = time.perf_counter() - start
    counts = results.get("n-samples") or {}
    items = sum(int(v.get("effective", v.get("original", 0))) for v in counts.values())
    # Tasks that --limit cut short: {task: (items scored, items it has)}.
    cut = {task: (int(v["effective"]), int(v["original"])) for task, v in counts.items()
           if "effective" in v and "original" in v and int(v["effective"]) < int(v["original"])}
    return {"scores": flatten(results), "items": items, "seconds": seconds, "cut": cut}


def metric_values(scores: dict[str, dict[str, float]]) -> dict[str, float]:
    return {f"downstream/{task}/{metric}": v for task, metrics in scores.items() for metric, v in metrics.items()}


def summary(scores: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{task} {metric} {v:.4f}" for task, metrics in scores.items() for metric, v in metrics.items())


def record(store, step: int, scores: dict[str, dict[str, float]], checkpoint: str | None = None) -> None:
    """Write the scores at `step` into an open StoreWriter, with one `downstream` event."""
    store.log(step, metric_values(scores))
    store.event("downstream", f"downstream at step {step}: {summary(scores)}", step,
                {"scores": scores, **({"checkpoint": checkpoint} if checkpoint else {})})
    store.flush()


def store_results(run_dir: Path, step: int, scores: dict[str, dict[str, float]], checkpoint: str | None = None) -> None:
    """Write into a run's store from another process: SQLite serialises this writer with a live
    trainer's (WAL, 30 s busy timeout); the event joins the journal's chain in its own transaction."""
    import sqlite3

    if not store_path(run_dir).is_file():
        raise GlassroomError(f"{run_dir}: no run store ({store_path(run_dir).name}); is it a run folder?")
    try:
        with StoreWriter(run_dir) as store:
            record(store, step, scores, checkpoint)
    except sqlite3.DatabaseError as exc:
        raise GlassroomError(f"{store_path(run_dir)}: cannot be written ({exc}); the scores were not stored") from None
