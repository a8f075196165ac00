"""Run lm-eval tasks in-process on a glassroom model and store the scores in a run's store.

Task names are looked up in a tasks folder through lm-eval's TaskManager(include_path=...); names
lm-eval ships (hellaswag, arc_easy, ...) pass through and need the network to fetch their data.
A folder `glassroom data tasks` wrote (its manifest.json) is verified file by file before lm-eval
reads it (glassroom/data/tasks.py). Any other folder is a researcher's own: it runs as it is when
it holds only YAML and data, and only with `trust_code` when it holds Python (a .py file, a YAML
value tagged `!function`, in the folder or in a file its YAML includes), since lm-eval would run
it. An untrusted folder's templates are rendered by Jinja's sandbox and its metrics are lm-eval's
registered ones, so a YAML-only folder cannot reach Python either. When every task asked for is
in a glassroom folder, the Hugging Face libraries are put offline (HF_*_OFFLINE=1) for the call.
Scores are flattened to {task: {metric: value}} (filters `,none` dropped, standard errors left
out); a group's aggregate is a task of its own. In a run's store they are
`downstream/<task>/<metric>` at the checkpoint's step, with one `downstream` event; evaluating a
step again replaces its values.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from pathlib import Path

import yaml

from glassroom import yaml_io
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


GLASSROOM_MANIFEST = b'"glassroom-tasks/'  # the format of a folder `glassroom data tasks` wrote
YAML_SUFFIXES = (".yaml", ".yml")
TRUST_HINT = "pass --trust-code if you trust it"


class UntrustedCode(GlassroomError):
    """A tasks folder holds Python that lm-eval would run, and it was not trusted."""

    def __init__(self, where: str, found: list[str]):
        self.where, self.found = where, found
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        super().__init__(f"{where}: holds Python code ({shown}) that lm-eval would run; {TRUST_HINT}")


def is_glassroom_folder(tasks_dir: Path) -> bool:
    """Whether `tasks_dir` says it is what `glassroom data tasks` writes (its manifest.json's format),
    so that it is verified as such, a damaged manifest included."""
    try:
        return GLASSROOM_MANIFEST in (Path(tasks_dir) / "manifest.json").read_bytes()
    except OSError:
        return False


def _composed(path: Path, shown: str):
    """The YAML node graph of `path` (nothing constructed, so nothing runs), or one line naming it."""
    try:
        if path.stat().st_size > yaml_io.MAX_BYTES:
            raise GlassroomError(f"{shown}: more than {yaml_io.MAX_BYTES:,} bytes; not a task file")
        loader = yaml_io.BoundedLoader(path.read_text(encoding="utf-8"))
        try:
            return loader.get_single_node()
        finally:
            loader.dispose()
    except (OSError, UnicodeDecodeError) as exc:
        raise GlassroomError(f"{shown}: cannot be read ({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
    except RecursionError:
        raise GlassroomError(f"{shown}: nested too deeply to be a task file") from None
    except yaml.YAMLError as exc:
        raise GlassroomError(f"{shown}: {yaml_io.describe_error(exc)}") from None


def _code_tag(root) -> str | None:
    """The first tag in a YAML node graph that names code: `!function` (lm-eval imports the function
    it names, from a .py file beside the YAML or from any importable module) or a `!!python/` one."""
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag == "!function" or node.tag.startswith("tag:yaml.org,2002:python/"):
            return node.tag.replace("tag:yaml.org,2002:", "!!")
        if isinstance(node, yaml.MappingNode):
            stack.extend(part for pair in node.value for part in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None


def _includes(root) -> list[str]:
    """The file names a task YAML's top-level `include:` gives (one or a list)."""
    if not isinstance(root, yaml.MappingNode):
        return []
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "include":
            items = value.value if isinstance(value, yaml.SequenceNode) else [value]
            return [item.value for item in items if isinstance(item, yaml.ScalarNode)]
    return []


def scan_folder(tasks_dir: Path) -> tuple[list[str], tuple]:
    """(what in a researcher's tasks folder is Python lm-eval would run, a stamp of its files).

    The Python: every .py file below the folder, and every YAML (below it, or outside it through
    `include:`, which lm-eval follows) with a `!function` value. Every YAML is parsed (composed only):
    a malformed one is one line naming it and its line."""
    root = Path(tasks_dir)
    found, stamp, queue, walked = [], [], [], set()
    for folder, subfolders, files in os.walk(root, followlinks=True):  # more than lm-eval's glob reads
        real_folder = os.path.realpath(folder)
        if real_folder in walked:  # a link back up the tree
            subfolders.clear()
            continue
        walked.add(real_folder)
        subfolders.sort()
        for name in sorted(files):
            path = Path(folder, name)
            if name.endswith(".py"):
                found.append(path.relative_to(root).as_posix())
            elif name.endswith(YAML_SUFFIXES):
                queue.append(path)
    seen: set[Path] = set()
    root_real = root.resolve()
    while queue:
        path = queue.pop(0)
        real = path.resolve()
        if real in seen:
            continue
        seen.add(real)
        inside = real.is_relative_to(root_real)
        shown = real.relative_to(root_real).as_posix() if inside else str(real)
        node = _composed(path, str(root / shown) if inside else shown)
        tag = _code_tag(node)
        if tag:
            found.append(f"'{tag}' in {shown}")
        for include in _includes(node):
            target = Path(include) if Path(include).is_absolute() else real.parent / include
            if not target.is_file():
                raise GlassroomError(f"{root / shown if inside else shown}: include: {include} is not a file")
            queue.append(target)
        info = real.stat()
        stamp.append((str(real), info.st_mtime_ns, info.st_size))
    return found, tuple(stamp)


def check_folder(tasks_dir: str | Path, trust_code: bool = False, label: str = "") -> tuple[bool, tuple]:
    """(whether it is a folder `glassroom data tasks` wrote, a stamp of its files) once it may run:
    a glassroom folder verified file by file, any other accepted when it holds no Python (or
    `trust_code`), else one line naming the code. `label` is how the user named the folder
    (`--tasks-dir`)."""
    root = Path(tasks_dir)
    where = f"{label} {root}" if label else str(root)
    if not root.exists():
        raise GlassroomError(f"{where}: no tasks folder; write it with glassroom data tasks DATASET "
                             "(or give another with --tasks-dir)")
    if not root.is_dir():
        raise GlassroomError(f"{where}: not a folder; give a folder of lm-eval task YAML files")
    if is_glassroom_folder(root):
        verify_folder(root)
        return True, ((root / "manifest.json").stat().st_mtime_ns,)
    found, stamp = scan_folder(root)
    if found and not trust_code:
        raise UntrustedCode(where, found)
    return False, stamp


_MANAGERS: dict[tuple, object] = {}


def _manager(tasks_dir: Path | None, stamp: tuple, defaults: bool):
    """lm-eval's TaskManager over `tasks_dir` (and its own tasks when `defaults`), kept per folder
    and its files' stamp for the process: training reuses it."""
    from lm_eval.tasks import TaskManager  # lazy: lm_eval loads only when this runs

    key = (str(Path(tasks_dir).resolve()) if tasks_dir is not None else None, stamp, defaults)
    if key not in _MANAGERS:
        _MANAGERS[key] = TaskManager(include_path=str(tasks_dir) if tasks_dir is not None else None,
                                     include_defaults=defaults)
    return _MANAGERS[key]


def task_manager(tasks_dir: Path | None, names: list[str] | None = None, trust_code: bool = False):
    """lm-eval's TaskManager over `tasks_dir` (checked first: check_folder), and over lm-eval's own
    task files unless every one of `names` is local (indexing lm-eval's thousands of files takes
    seconds)."""
    stamp: tuple = ()
    if tasks_dir is not None:
        _, stamp = check_folder(tasks_dir, trust_code)
    defaults = names is None or not set(names) <= set(local_names(tasks_dir))
    return _manager(tasks_dir, stamp, defaults)


def local_names(tasks_dir: Path | None) -> list[str]:
    """The task, group and tag names a tasks folder defines (a glassroom folder's from its manifest)."""
    if tasks_dir is None or not Path(tasks_dir).is_dir():
        return []
    if is_glassroom_folder(Path(tasks_dir)):
        manifest = read_task_manifest(Path(tasks_dir))
        return sorted(list(manifest["tasks"]) + list(manifest.get("groups", {})))
    # Indexing reads the YAML without resolving `!function`: no code runs here.
    manager = _manager(tasks_dir, scan_folder(Path(tasks_dir))[1], False)
    return sorted(set(manager.all_subtasks) | set(manager.all_groups) | set(manager.all_tags))


def check_names(names: list[str], manager, tasks_dir: Path | None) -> None:
    known = set(manager.all_subtasks) | set(manager.all_groups) | set(manager.all_tags)
    unknown = [n for n in names if n not in known]
    if unknown:
        if tasks_dir is None:
            where = "no tasks folder given: --tasks-dir DATASET/tasks for the local ones"
        else:
            local = local_names(tasks_dir)
            shown = ", ".join(local[:40]) + (f" and {len(local) - 40} more" if len(local) > 40 else "")
            where = f"local tasks: {shown or f'none in {tasks_dir}'}"
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
    progress bar per task while building requests (no option turns it off) stays off stderr, as do
    the `datasets` library's bars and logged errors while a task's data is read (a failure there
    becomes one line: lm_eval_call)."""
    import functools
    import importlib.metadata

    import datasets  # lazy: with lm_eval
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
    bars, verbosity = datasets.is_progress_bar_enabled(), datasets.logging.get_verbosity()
    evaluator.get_git_commit_hash, evaluator.add_env_info = git_hash, env_info
    task_module.tqdm = functools.partial(saved[2], disable=True)
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        yield
    finally:
        evaluator.get_git_commit_hash, evaluator.add_env_info, task_module.tqdm = saved
        datasets.logging.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()


@contextlib.contextmanager
def _untrusted():
    """While lm-eval runs a researcher's folder that was not trusted: templates rendered by Jinja's
    sandbox (plain Jinja lets a template reach Python objects, and through them anything), and
    metrics lm-eval registers only (another name goes to Hugging Face `evaluate.load`, which runs
    the script a path names)."""
    import jinja2  # lazy: lm_eval (and its jinja2) load only when this runs
    import jinja2.sandbox  # lazy: as above
    import lm_eval.api.metrics  # noqa: F401  # lazy: as above; importing it fills lm-eval's metric registry
    import lm_eval.api.task as task_module  # lazy: as above
    import lm_eval.utils as lm_utils  # lazy: as above
    from lm_eval.api.registry import metric_registry  # lazy: as above

    sandbox = jinja2.sandbox.SandboxedEnvironment(loader=jinja2.BaseLoader, undefined=jinja2.StrictUndefined,
                                                  keep_trailing_newline=True)
    sandbox.filters["regex_replace"] = lm_utils.regex_replace  # the one filter lm-eval adds
    saved = lm_utils.env, task_module.get_metric

    def registered(name, hf_evaluate_metric: bool = False):
        if hf_evaluate_metric or name not in metric_registry:
            raise GlassroomError(f"metric {name!r}: not one lm-eval registers, so Hugging Face evaluate would load "
                                 f"it and run its script; {TRUST_HINT}")
        return saved[1](name)

    lm_utils.env, task_module.get_metric = sandbox, registered
    try:
        yield
    finally:
        lm_utils.env, task_module.get_metric = saved


def _task_of(exc: BaseException) -> str | None:
    """The lm-eval task whose code was running when `exc` was raised (the innermost frame of a task)."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        name = getattr(getattr(tb.tb_frame.f_locals.get("self"), "config", None), "task", None)
        found = name if isinstance(name, str) else found
        tb = tb.tb_next
    return found


def _first_line(exc: BaseException, width: int = 200) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:width]


def _described(exc: BaseException) -> str:
    """`Type: first line` of `exc`, and of the error that caused it when there is one (`datasets`
    wraps a data file's parse error in a DatasetGenerationError that says only that one happened)."""
    root, seen = exc, {id(exc)}
    while root.__cause__ is not None and id(root.__cause__) not in seen:
        root = root.__cause__
        seen.add(id(root))
    text = f"{type(exc).__name__}: {_first_line(exc)}"
    return text if root is exc else f"{text}; {type(root).__name__}: {_first_line(root)}"


@contextlib.contextmanager
def lm_eval_call(names: list[str], tasks_dir: Path | None, trust_code: bool = False):
    """Around a call into lm-eval for `names`: the folder checked (check_folder), the Hugging Face
    libraries offline when every name is in a glassroom folder, compiled modules kept private, an
    untrusted researcher's folder kept from Python (_untrusted), and lm-eval's errors as one line."""
    own = tasks_dir is not None and not check_folder(tasks_dir, trust_code)[0]  # every time: the folder may change
    local = set(local_names(tasks_dir))
    saved = {k: os.environ.get(k) for k in OFFLINE_VARS}
    if all(n in local for n in names) and not own:
        os.environ.update({k: "1" for k in OFFLINE_VARS})
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    try:
        with private_bytecode(), _quiet_lm_eval(), _untrusted() if own and not trust_code else contextlib.nullcontext():
            yield
    except GlassroomError:
        raise
    except Exception as exc:
        task = _task_of(exc)
        if own and (task in local if task else any(n in local for n in names)):
            # A researcher's task: its YAML, its data or a record its templates cannot use.
            which = f"task {task!r}" if task else ", ".join(n for n in names if n in local)
            if type(exc).__name__ == "SecurityError":  # jinja2.sandbox's: a template reached for Python
                raise GlassroomError(f"{tasks_dir}: {which}: a template reaches Python objects that Jinja's sandbox "
                                     f"refuses ({_first_line(exc)}); {TRUST_HINT}") from None
            raise GlassroomError(f"{tasks_dir}: {which}: lm-eval cannot run it ({_described(exc)})") from None
        if isinstance(exc, ValueError):  # lm-eval's word for a bad task list (a group and its member, ...)
            raise GlassroomError(f"--tasks: {_first_line(exc, 300)}") from None
        if isinstance(exc, OSError):  # a hub task's data could not be fetched (ConnectionError, offline mode, ...)
            hub = [n for n in names if n not in local]
            raise GlassroomError(f"--tasks: cannot load the data of {', '.join(hub) or ', '.join(names)} "
                                 f"({_first_line(exc)}); tasks lm-eval ships download it from the Hugging Face hub: "
                                 "run where it is reachable, or use the local tasks (glassroom data tasks)") from None
        raise
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_tasks(names: list[str], tasks_dir: Path | None, manager=None, trust_code: bool = False) -> None:
    """Load `names` as lm-eval would for an evaluation (their files and data), so that a task list
    lm-eval refuses or data it cannot fetch is known before a training run starts."""
    with lm_eval_call(names, tasks_dir, trust_code):
        manager = manager or task_manager(tasks_dir, names, trust_code)
        check_names(names, manager, tasks_dir)
        manager.load(list(names))


def evaluate(model, tokenizer, names: list[str], tasks_dir: Path | None, limit: int | None = None,
             batch_size: int = 8, max_length: int | None = None, device: str = "cpu", manager=None,
             eos_id: int | None = None, prefix_id: int | None = None, trust_code: bool = False) -> dict:
    """Run `names` on (model, tokenizer); returns {"scores": {task: {metric: v}}, "items": n, "seconds": s,
    "cut": {task: (scored, total)} for the tasks `limit` scored only in part}. `trust_code`: run the
    Python a researcher's tasks folder holds (check_folder)."""
    import lm_eval  # lazy: lm_eval loads only when this runs

    from glassroom.downstream.adapter import GlassroomLM  # lazy: lm_eval, torch load only when this runs

    with lm_eval_call(names, tasks_dir, trust_code):
        manager = manager or task_manager(tasks_dir, names, trust_code)
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
