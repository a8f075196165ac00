"""Provenance: how an output was produced, recorded when a step finishes and printed by `glassroom show`.

provenance.json holds the experiment file (path and sha256), the project's git commit (and whether
the tree had uncommitted changes), the step chain (this step and every step it was built from, inputs
first, each with its version, output folder, function and canonical config), where and when it ran.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from glassroom.errors import GlassroomError
from glassroom.pipeline.status import PROVENANCE, RESULT, STATUS, STEP
from glassroom.pipeline.step import function_ref
from glassroom.version import PACKAGE_DIR, __version__


def git_state(folder: Path) -> dict:
    """{commit, dirty} of the git checkout holding `folder`; commit None outside a checkout."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(dirty), "root": git("rev-parse", "--show-toplevel")}


def run_context(experiment_path: Path, experiment_sha256: str, source: str) -> dict:
    """What every step of one `glassroom run` records alike (computed once, by the run)."""
    project = git_state(PACKAGE_DIR)
    exp_git = git_state(experiment_path.parent)
    return {
        "experiment": {"path": str(experiment_path), "sha256": experiment_sha256,
                       "git": exp_git if exp_git.get("root") != project.get("root") else "project",
                       # the file itself, so an uncommitted or since-edited experiment can be read back
                       "source": source},
        "glassroom": {"version": __version__, **project},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "argv": sys.argv,
    }


def step_record(graph, node) -> dict:
    """The identity of one step as written to step.json and listed in provenance chains."""
    return {
        "name": node.name,
        "kind": node.step.kind,
        "version": node.version,
        "output": str(node.output),
        "function": function_ref(node.step.fn),
        "description": node.step.description,
        "resources": {"cpus": node.step.resources.cpus, "gpus": node.step.resources.gpus,
                      "procs": node.step.resources.procs, "workers": node.step.resources.workers,
                      "gpus_per_worker": node.step.resources.gpus_per_worker},
        "deps": {d: {"version": graph.nodes[d].version, "output": str(graph.nodes[d].output)} for d in node.deps},
        "config": node.identity["config"],
    }


def provenance_record(graph, node, context: dict, status: dict) -> dict:
    return {
        "output": str(node.output),
        "step": node.name,
        "version": node.version,
        **context,
        "produced": {k: status.get(k) for k in ("host", "executor", "attempt", "started", "finished", "duration_s")},
        "chain": [step_record(graph, n) for n in graph.chain(node.name)],
    }


# ----------------------------------------------------------------------------- glassroom show


def find_output(path: str | Path) -> Path:
    """The step output folder holding `path` (the folder itself or any file inside it)."""
    p = Path(path)
    if not p.exists():
        raise GlassroomError(f"{path}: no such file or folder")
    p = p.resolve()
    for folder in [p, *p.parents] if p.is_dir() else list(p.parents):
        if (folder / STEP).is_file():
            return folder
    raise GlassroomError(f"{path}: not inside a step output (no {STEP} found in it or any folder above it)")


def _record(output: Path, name: str) -> Any:
    """A record file of a step output: None when absent; a GlassroomError naming it when damaged
    (not JSON, or not the JSON object glassroom writes there). result.json may hold any JSON."""
    path = output / name
    if not path.exists():
        return None
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as exc:
        raise GlassroomError(f"{path}: damaged ({type(exc).__name__}); rerun the step with "
                             "`glassroom run EXPERIMENT --force NAME`") from None
    if name != RESULT and not isinstance(value, dict):
        raise GlassroomError(f"{path}: damaged (a JSON {type(value).__name__}, not an object); rerun the step "
                             "with `glassroom run EXPERIMENT --force NAME`")
    if name == STEP and not isinstance(value.get("name"), str):
        raise GlassroomError(f"{path}: damaged (no step name); rerun the step with `glassroom run EXPERIMENT --force NAME`")
    return value


def load_show(path: str | Path) -> dict:
    output = find_output(path)
    return {
        "output": str(output),
        "step": _record(output, STEP),
        "status": _record(output, STATUS),
        "provenance": _record(output, PROVENANCE),
        "result": _record(output, RESULT),
    }


def _when(ts: Any) -> str:
    import time

    if not isinstance(ts, (int, float)):
        return "?"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    except (OverflowError, OSError, ValueError):
        return "?"


def _config_lines(config: Any, indent: str) -> list[str]:
    """One `key.path = value` line per leaf; an input reads `<- step@version/subpath`."""
    lines: list[str] = []

    def leaf(value: Any) -> str:
        return json.dumps(value, sort_keys=True)

    def visit(value: Any, key: str) -> None:
        if isinstance(value, dict) and set(value) == {"output_of", "version", "subpath"}:
            sub = f"/{value['subpath']}" if value["subpath"] else ""
            lines.append(f"{indent}{key} <- {value['output_of']}@{value['version']}{sub}")
        elif isinstance(value, dict) and value:
            for k, v in value.items():
                visit(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
            for i, v in enumerate(value):
                visit(v, f"{key}[{i}]")
        else:
            lines.append(f"{indent}{key or '(value)'} = {leaf(value)}")

    if config is None or config == {}:
        return [f"{indent}(no config)"]
    visit(config, "")
    return lines


@contextmanager
def _reading(output: str, name: str):
    """Formatting a record that glassroom wrote but someone changed: one line naming the file."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise GlassroomError(f"{Path(output) / name}: damaged ({type(exc).__name__}: {exc}); rerun the step with "
                             "`glassroom run EXPERIMENT --force NAME`") from None


def format_show(info: dict) -> str:
    lines = [info["output"]]
    with _reading(info["output"], STEP):
        step = info["step"] or {}
        lines.append(f"  step        {step.get('name')}  version {step.get('version')}  kind {step.get('kind')}")
        lines.append(f"  function    {step.get('function')}")
    with _reading(info["output"], STATUS):
        state = _format_status(info["status"] or {}, lines)
    prov = info["provenance"]
    with _reading(info["output"], PROVENANCE):
        _format_provenance(prov, state, lines)
    with _reading(info["output"], RESULT):
        if info.get("result") is not None:
            lines.append("  result")
            lines += _config_lines(info["result"], "    ")
    with _reading(info["output"], PROVENANCE if prov else STEP):
        chain = prov["chain"] if prov else [step]
        lines.append("  chain       (inputs first)" if len(chain) > 1 else "  config")
        for record in chain:
            if len(chain) > 1:
                lines.append(f"    {record['name']}  {record['version']}  {record['function']}")
                lines.append(f"      output {record['output']}")
                lines += _config_lines(record.get("config"), "      ")
            else:
                lines += _config_lines(record.get("config"), "    ")
    return "\n".join(lines)


def _format_status(status: dict, lines: list[str]) -> str:
    state = status.get("state", "never started")
    detail = ""
    if status.get("started"):
        detail = f", started {_when(status.get('started'))}"
    if status.get("duration_s") is not None:
        detail += f", took {status['duration_s']:.1f} s"
    if status.get("executor"):
        detail += f", on {status.get('host')} ({status['executor']})"
    if status.get("attempt", 1) > 1:
        detail += f", attempt {status['attempt']}"
    lines.append(f"  status      {state}{detail}")
    if status.get("error"):
        lines.append(f"  error       {status['error']}")
    return state


def _format_provenance(prov: Any, state: str, lines: list[str]) -> None:
    if prov:
        exp = prov["experiment"]
        g = prov["glassroom"]
        commit = (g.get("commit") or "unknown")[:12] + (" (uncommitted changes)" if g.get("dirty") else "")
        lines.append(f"  experiment  {exp['path']}  (sha256 {exp['sha256'][:12]}; its source is in {PROVENANCE})")
        if isinstance(exp.get("git"), dict) and exp["git"].get("commit"):
            lines.append(f"              in {exp['git']['root']} at commit {exp['git']['commit'][:12]}"
                         + (" (uncommitted changes)" if exp["git"].get("dirty") else ""))
        lines.append(f"  glassroom   {g.get('version')} at commit {commit}; python {prov.get('python')}")
    elif state != "done":
        lines.append("  provenance  none yet: it is written when the step finishes")
