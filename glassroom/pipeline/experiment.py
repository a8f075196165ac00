"""Loading an experiment: a Python file whose `steps` (a list of Steps, or a function returning one)
is the graph to run. Also `load_recipe`, which makes a YAML recipe the config of a step.

The file runs as a module (its folder first on sys.path, like a script), so steps may use
functions defined in it; each step's process loads the file again to find its function. Anything
the file raises becomes one line, `error: EXPERIMENT: line N: ExceptionType: message`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glassroom.config import apply_overrides, load_yaml
from glassroom.errors import GlassroomError
from glassroom.pipeline.graph import Graph, build_graph
from glassroom.pipeline.step import Step

MODULE_PREFIX = "glassroom_experiment_"


@dataclass
class Experiment:
    path: Path  # absolute
    module: Any
    steps: list[Step]
    sha256: str
    source: str  # the file's text as loaded (saved in provenance)

    def graph(self, workspace: Path) -> Graph:
        return build_graph(self.steps, workspace, source=str(self.path))


def module_name(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"{MODULE_PREFIX}{stem}_{digest}"


def load_experiment(path: str | Path) -> Experiment:
    path = Path(path)
    if not path.exists():
        raise GlassroomError(f"{path}: no such experiment file")
    if path.is_dir() or path.suffix != ".py":
        raise GlassroomError(f"{path}: an experiment is a Python file (.py) that defines `steps`")
    path = path.resolve()
    data = path.read_bytes()
    name = module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
        steps = getattr(module, "steps", None)
        if steps is None:
            raise GlassroomError(f"{path}: defines no `steps` (a list of Step, or a function returning one)")
        if callable(steps):
            steps = steps()
    except GlassroomError as exc:
        sys.modules.pop(name, None)
        msg = str(exc)
        raise GlassroomError(msg if msg.startswith(str(path)) else f"{path}: {msg}") from exc
    except BaseException as exc:  # the user's file: anything it raises is reported, not a crash
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        line = _line_in(exc, path)
        where = f"line {line}: " if line else ""
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
        raise GlassroomError(f"{path}: {where}{message} (run with --debug for the traceback)") from exc
    finally:
        if added:
            try:
                sys.path.remove(folder)
            except ValueError:
                pass
    if isinstance(steps, Step):
        steps = [steps]
    if not isinstance(steps, (list, tuple)):
        raise GlassroomError(f"{path}: `steps` must be a list of Step, got {type(steps).__name__}")
    return Experiment(path=path, module=module, steps=list(steps), sha256=hashlib.sha256(data).hexdigest(),
                      source=data.decode("utf-8", errors="replace"))


def _line_in(exc: BaseException, path: Path) -> int | None:
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == path:
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename and Path(frame.filename).resolve() == path:
            line = frame.lineno
    return line


def load_recipe(path: str | Path, *overrides: str) -> dict:
    """A YAML recipe (with `key.path=value` overrides) as a step's config: its contents, not its
    path, enter the version, so editing the file reruns the steps that use it. A relative path is
    read from the folder of the file that calls this (the experiment)."""
    path = Path(path)
    caller = sys._getframe(1).f_globals.get("__file__")
    if not path.is_absolute() and caller:
        path = Path(caller).resolve().parent / path
    return apply_overrides(load_yaml(path), list(overrides))
