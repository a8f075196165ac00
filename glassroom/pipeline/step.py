"""A pipeline step: a named function with a config, inputs from other steps and the resources it needs.

A step's version is a hash of its name, kind, canonical config and its dependencies' versions, so
changing one value gives a new version (and a new output folder) for that step and every step
downstream of it, while everything upstream is reused. The function's code is not hashed (as in
Marin): after changing what a function does, bump a config value (a `revision: 2` field is the
usual way) or rerun with `--force NAME`; provenance records the git commit either way.

Declaring a step:

    tokens = Step("token-counts", count_tokens, {"min_count": 5, "files": files / "files.jsonl"},
                  kind="stats", resources=Resources(cpus=1))

`files / "files.jsonl"` (or `files.output("files.jsonl")`, or `output_of("stdlib-files", ...)` by
name) is an input: it makes `token-counts` depend on `files`, enters the hash as the dependency's
version, and reaches the function as the absolute path inside that step's output folder. The
function takes one argument, a StepContext (glassroom/pipeline/context.py), and writes its files
under `ctx.output`.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import re
from pathlib import PurePath
from typing import Any, Callable

from glassroom.errors import GlassroomError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
VERSION_CHARS = 8


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one run of a step needs. `procs` > 1 launches the function under torchrun with that many
    processes per node (one per GPU for a multi-GPU training step; gloo on CPU works too).
    `workers` > 1 asks for a training of that many ranks that may span machines: on the Ray runner the
    step's function gets them as Ray Train workers (each with `cpus` CPUs and `gpus_per_worker` GPUs;
    glassroom/steps/ladder.py trains a rung so), on the local runner as torchrun processes.
    `max_restarts`: torchrun's --max-restarts for such a launch (every process restarted when one fails)."""

    cpus: float = 1
    gpus: int = 0
    procs: int = 1
    workers: int = 1
    gpus_per_worker: int = 0
    max_restarts: int = 0

    def __post_init__(self):
        if not (isinstance(self.cpus, (int, float)) and self.cpus > 0):
            raise GlassroomError(f"Resources.cpus must be a positive number, got {self.cpus!r}")
        if not (isinstance(self.gpus, int) and self.gpus >= 0):
            raise GlassroomError(f"Resources.gpus must be a whole number >= 0, got {self.gpus!r}")
        for key, least in (("procs", 1), ("workers", 1), ("gpus_per_worker", 0), ("max_restarts", 0)):
            value = getattr(self, key)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
                raise GlassroomError(f"Resources.{key} must be a whole number >= {least}, got {value!r}")
        if self.procs > 1 and self.workers > 1:
            raise GlassroomError(f"Resources: procs={self.procs} (processes on one machine) and workers={self.workers} "
                                 "(ranks across machines) both given; give one of them")
        if self.gpus and self.workers > 1:
            raise GlassroomError(f"Resources: gpus={self.gpus} with workers={self.workers}; say gpus_per_worker instead")

    @property
    def processes(self) -> int:
        """Processes a local launch starts (torchrun's --nproc_per_node)."""
        return max(self.procs, self.workers)

    @property
    def total_gpus(self) -> int:
        return self.gpus if self.workers == 1 else self.workers * self.gpus_per_worker


@dataclasses.dataclass(frozen=True)
class Input:
    """A path inside another step's output: `step / "sub/path"`, or `output_of("name", "sub/path")`."""

    step: "Step | str"
    subpath: str = ""

    @property
    def step_name(self) -> str:
        return self.step if isinstance(self.step, str) else self.step.name

    def __truediv__(self, more: str) -> "Input":
        return Input(self.step, str(PurePath(self.subpath, more)) if self.subpath else str(more))


def output_of(name: str, subpath: str = "") -> Input:
    """An input naming its step by name (the step must be part of the same experiment)."""
    return Input(name, subpath)


@dataclasses.dataclass(frozen=True, eq=False)
class Step:
    """One unit of work whose output is cached at `<workspace>/<kind>/<name>-<version>`.

    fn: a function defined at the top level of a module or of the experiment file, called as
        fn(ctx) in a fresh process; its return value (if not None) must be JSON and is saved.
    config: a frozen dataclass or a mapping (nested lists, numbers, text, paths, Inputs).
    deps: further steps (or step names) that must finish first and enter the version, for
        ordering without passing a path.
    kind: the folder under the workspace: `data`, `runs`, `ladders`, `stats`, ...
    """

    name: str
    fn: Callable[..., Any]
    config: Any = None
    deps: tuple = ()
    kind: str = "steps"
    resources: Resources = Resources()
    description: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise GlassroomError(
                f"step name {self.name!r}: use letters, digits, '-', '_' and '.', starting with a letter or digit"
            )
        if not isinstance(self.kind, str) or not NAME_RE.match(self.kind):
            raise GlassroomError(f"step {self.name}: kind {self.kind!r} must be a simple folder name such as 'data'")
        if not callable(self.fn):
            raise GlassroomError(f"step {self.name}: fn must be a function, got {self.fn!r}")
        qualname = getattr(self.fn, "__qualname__", "")
        if "<lambda>" in qualname or "<locals>" in qualname or not getattr(self.fn, "__module__", None):
            raise GlassroomError(
                f"step {self.name}: its function {qualname or self.fn!r} must be defined at the top level "
                "of a module or of the experiment file (it is looked up by name in the step's own process)"
            )
        if isinstance(self.deps, (list, Step, str)):
            object.__setattr__(self, "deps", tuple(self.deps) if isinstance(self.deps, list) else (self.deps,))
        for dep in self.deps:
            if not isinstance(dep, (Step, str)):
                raise GlassroomError(f"step {self.name}: deps holds {dep!r}; give steps or step names")
        if not isinstance(self.resources, Resources):
            raise GlassroomError(f"step {self.name}: resources must be a Resources(...), got {self.resources!r}")

    def __truediv__(self, subpath: str) -> Input:
        return Input(self, str(subpath))

    def output(self, subpath: str = "") -> Input:
        return Input(self, subpath)

    def __repr__(self) -> str:
        return f"Step({self.name!r}, kind={self.kind!r})"


# ----------------------------------------------------------------------------- config walking


def find_inputs(value: Any) -> list[Input]:
    """Every Input inside a config value, in order of appearance."""
    found: list[Input] = []
    walk(value, "config", lambda inp, path: found.append(inp) or inp, strict=False)
    return found


def walk(value: Any, path: str, on_input: Callable[[Input, str], Any], strict: bool = True) -> Any:
    """Rebuild `value` with each Input replaced by on_input(input, key_path).

    With strict=True, values that cannot be part of a version (functions, open files, arbitrary
    objects) raise GlassroomError naming the key path.
    """
    if isinstance(value, Input):
        return on_input(value, path)
    if isinstance(value, Step):
        return on_input(Input(value), path)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if strict and not math.isfinite(value):
            raise GlassroomError(f"{path}: {value} cannot be part of a step's version; use a finite number")
        return value
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, PurePath):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = walk(old, f"{path}.{f.name}", on_input, strict)
            if new is not old:
                changes[f.name] = new
        if not changes:
            return value
        if not all(f.init for f in dataclasses.fields(value) if f.name in changes):
            raise GlassroomError(f"{path}: inputs can only be placed in init fields of {type(value).__name__}")
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if strict and not isinstance(k, (str, int, bool)):
                raise GlassroomError(f"{path}: mapping key {k!r} must be text or a number")
            out[k] = walk(v, f"{path}.{k}", on_input, strict)
        return type(value)(out) if type(value) is not dict else out
    if isinstance(value, (list, tuple)):
        items = [walk(v, f"{path}[{i}]", on_input, strict) for i, v in enumerate(value)]
        return type(value)(items) if type(value) in (list, tuple) else items
    if isinstance(value, (set, frozenset)):
        return frozenset(walk(v, f"{path}[]", on_input, strict) for v in value)
    if strict:
        raise GlassroomError(
            f"{path}: a {type(value).__name__} cannot be part of a step's version; "
            "use numbers, text, paths, lists, mappings or frozen dataclasses"
        )
    return value


def canonical(value: Any, path: str, input_json: Callable[[Input, str], Any]) -> Any:
    """The JSON form of a config that enters the version hash (stable across runs and machines)."""
    if isinstance(value, (Input, Step)):
        return input_json(value if isinstance(value, Input) else Input(value), path)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise GlassroomError(f"{path}: {value} cannot be part of a step's version; use a finite number")
        return value
    if isinstance(value, enum.Enum):
        return canonical(value.value, path, input_json)
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name), f"{path}.{f.name}", input_json) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int, bool)):
                raise GlassroomError(f"{path}: mapping key {k!r} must be text or a number")
            out[str(k)] = canonical(v, f"{path}.{k}", input_json)
        return out
    if isinstance(value, (list, tuple)):
        return [canonical(v, f"{path}[{i}]", input_json) for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [canonical(v, f"{path}[]", input_json) for v in value]
        return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))
    raise GlassroomError(
        f"{path}: a {type(value).__name__} cannot be part of a step's version; "
        "use numbers, text, paths, lists, mappings or frozen dataclasses"
    )


def version_hash(identity: dict) -> str:
    """First VERSION_CHARS hex digits of the sha256 of the identity's canonical JSON."""
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:VERSION_CHARS]


def function_ref(fn: Callable) -> str:
    """`module:qualname`, or `file.py:qualname` for a function defined in an experiment file."""
    module = fn.__module__
    if module.startswith("glassroom_experiment_"):
        code = getattr(fn, "__code__", None)
        module = PurePath(code.co_filename).name if code else module
    return f"{module}:{fn.__qualname__}"
