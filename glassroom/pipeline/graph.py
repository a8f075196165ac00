"""The step graph of one experiment: validated (names, cycles, missing steps), versioned, placed on disk.

`build_graph(steps, workspace)` takes the steps an experiment lists, pulls in every step they reach
through inputs and deps, checks that names are unique and every dependency exists and that there
is no cycle, then computes versions in dependency order and each step's output folder
`<workspace>/<kind>/<name>-<version>`. `select` applies --only and --force.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glassroom.errors import GlassroomError
from glassroom.pipeline.step import Input, Step, canonical, find_inputs, version_hash, walk


@dataclass
class Node:
    step: Step
    deps: list[str]  # names of the steps this one needs, in first-mention order
    version: str = ""
    output: Path = Path()
    identity: dict = field(default_factory=dict)  # what the version hashes

    @property
    def name(self) -> str:
        return self.step.name

    def resolved_config(self, graph: "Graph") -> Any:
        """The config with every input replaced by its absolute path (what the function receives)."""

        def to_path(inp: Input, _path: str) -> str:
            base = graph.nodes[inp.step_name].output
            return str(base / inp.subpath) if inp.subpath else str(base)

        return walk(self.step.config, "config", to_path, strict=False)


@dataclass
class Graph:
    nodes: dict[str, Node]  # topological order: every step after its dependencies
    workspace: Path

    def __iter__(self):
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def ancestors(self, name: str) -> list[str]:
        seen: dict[str, None] = {}
        stack = list(self.nodes[name].deps)
        while stack:
            dep = stack.pop()
            if dep not in seen:
                seen[dep] = None
                stack.extend(self.nodes[dep].deps)
        return [n for n in self.nodes if n in seen]

    def descendants(self, name: str) -> list[str]:
        found = {name}
        for node in self.nodes.values():  # topological order: parents are seen before children
            if any(d in found for d in node.deps):
                found.add(node.name)
        found.discard(name)
        return [n for n in self.nodes if n in found]

    def chain(self, name: str) -> list[Node]:
        """The step and all it was built from, inputs first."""
        return [self.nodes[n] for n in self.ancestors(name)] + [self.nodes[name]]

    def select(self, only: str | None = None, force: list[str] | None = None) -> tuple[list[str], set[str]]:
        """(steps to consider in order, steps to recompute even if done).

        --only REGEX keeps the steps whose name matches (re.search) plus what they need; --force NAME
        recomputes NAME and everything downstream of it (their inputs change).
        """
        selected = list(self.nodes)
        if only is not None:
            try:
                pattern = re.compile(only)
            except re.error as exc:
                raise GlassroomError(f"--only {only!r}: not a valid regular expression ({exc})") from None
            matched = [n for n in self.nodes if pattern.search(n)]
            if not matched:
                raise GlassroomError(f"--only {only!r} matches no step; the steps are: {', '.join(self.nodes)}")
            keep = set(matched)
            for n in matched:
                keep.update(self.ancestors(n))
            selected = [n for n in self.nodes if n in keep]
        forced: set[str] = set()
        for name in force or []:
            if name not in self.nodes:
                raise GlassroomError(f"--force {name}: no such step{_did_you_mean(name, self.nodes)}; "
                                     f"the steps are: {', '.join(self.nodes)}")
            forced.add(name)
            forced.update(self.descendants(name))
        return selected, forced & set(selected)


def _did_you_mean(name: str, names) -> str:
    close = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def build_graph(steps: list[Step], workspace: Path, source: str = "the experiment") -> Graph:
    """Validate and version the steps reachable from `steps`; errors are one-line GlassroomErrors."""
    if not steps:
        raise GlassroomError(f"{source}: lists no steps")
    by_name: dict[str, Step] = {}
    stack = list(steps)[::-1]
    while stack:
        step = stack.pop()
        if not isinstance(step, Step):
            raise GlassroomError(f"{source}: {step!r} is not a Step (build steps with glassroom.pipeline.Step)")
        seen = by_name.get(step.name)
        if seen is step:
            continue
        if seen is not None:
            raise GlassroomError(f"{source}: two different steps are named {step.name!r}; give each step its own name")
        by_name[step.name] = step
        refs = [d for d in step.deps if isinstance(d, Step)]
        refs += [i.step for i in find_inputs(step.config) if isinstance(i.step, Step)]
        stack.extend(reversed(refs))

    deps: dict[str, list[str]] = {}
    for name, step in by_name.items():
        names = [d if isinstance(d, str) else d.name for d in step.deps]
        names += [i.step_name for i in find_inputs(step.config)]
        for dep in names:
            if dep not in by_name:
                raise GlassroomError(
                    f"{source}: step {name!r} depends on {dep!r}, which is not a step of this experiment"
                    f"{_did_you_mean(dep, by_name)}"
                )
            if dep == name:
                raise GlassroomError(f"{source}: step {name!r} depends on itself")
        deps[name] = list(dict.fromkeys(names))

    order = _topological(deps, source)
    nodes: dict[str, Node] = {}
    workspace = Path(workspace).absolute()
    for name in order:
        step = by_name[name]
        node = Node(step=step, deps=deps[name])

        def input_json(inp: Input, _path: str) -> dict:
            return {"output_of": inp.step_name, "version": nodes[inp.step_name].version, "subpath": inp.subpath}

        try:
            config = canonical(step.config, "config", input_json)
        except GlassroomError as exc:
            raise GlassroomError(f"{source}: step {name!r}: {exc}") from None
        node.identity = {
            "name": name,
            "kind": step.kind,
            "config": config,
            "deps": {d: nodes[d].version for d in node.deps},
        }
        try:
            node.version = version_hash(node.identity)
        except ValueError as exc:
            raise GlassroomError(f"{source}: step {name!r}: config cannot be hashed ({exc})") from None
        node.output = workspace / step.kind / f"{name}-{node.version}"
        nodes[name] = node
    return Graph(nodes=nodes, workspace=workspace)


def _topological(deps: dict[str, list[str]], source: str) -> list[str]:
    """Dependencies first; a stable order (first listed first); a cycle is named step by step."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = placed

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name):] + [name]
            raise GlassroomError(f"{source}: steps form a cycle: {' -> '.join(cycle)}")
        state[name] = 1
        for dep in deps[name]:
            visit(dep, path + [name])
        state[name] = 2
        order.append(name)

    for name in deps:
        visit(name, [])
    return order
