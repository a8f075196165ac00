"""The run loop shared by the local and Ray runners: what to reuse, what to start, leases, progress.

For each selected step in dependency order: a done output is reused; otherwise, once its
dependencies are done and the backend has room, the run takes the step's lease (or waits while
another run holds it, then reuses its result), writes step.json and status "running", and hands
the step to the backend (a subprocess, or a Ray task running that subprocess). A failed step blocks
only its descendants; independent steps carry on. A line per event, and every few seconds a
progress line with steps done out of total and each running step's own progress.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from glassroom.pipeline.graph import Graph, Node
from glassroom.pipeline.lock import (
    GUARD, LEASE, Heartbeat, Lease, describe_lease, holds, lease_state, read_lease, try_acquire,
)
from glassroom.pipeline.provenance import step_record
from glassroom.pipeline.status import (
    DONE, FAILED, INTERRUPTED, LOG, PROGRESS, RUNNING, STEP, atomic_write_json, read_json, read_status, write_status,
)


class Backend(Protocol):
    name: str

    def check(self, nodes: list[Node]) -> None: ...  # GlassroomError for a step that can never run here
    def can_start(self, node: Node) -> bool: ...
    def start(self, node: Node, spec: dict) -> None: ...
    def poll(self) -> list[tuple[str, int]]: ...  # (step name, exit code) of finished steps
    def cancel(self, name: str) -> None: ...
    def close(self) -> None: ...


# ----------------------------------------------------------------------------- dry run


def plan_rows(graph: Graph, selected: list[str], forced: set[str]) -> list[dict]:
    """One row per selected step: state (done / to run / running), version, output, a note."""
    rows = []
    for name in selected:
        node = graph.nodes[name]
        status = read_status(node.output) or {}
        lease = read_lease(node.output)
        state, note = "to run", ""
        if lease is not None and lease_state(lease) == "live":
            state, note = "running", describe_lease(lease)
        elif status.get("state") == DONE:
            state = "to run" if name in forced else "done"
            note = "forced" if name in forced else ""
        elif status.get("state") in (FAILED, INTERRUPTED):
            note = f"{status['state']} before: {status.get('error') or 'see log.txt'}"
        elif status.get("state") == RUNNING:
            note = "interrupted before (its run stopped)"
        rows.append({"name": name, "state": state, "version": node.version, "output": str(node.output),
                     "kind": node.step.kind, "note": note})
    return rows


def format_plan(rows: list[dict], experiment: str, workspace: Path) -> str:
    counts = {s: sum(r["state"] == s for r in rows) for s in ("done", "to run", "running")}
    lines = [f"{experiment}: {len(rows)} steps ({counts['done']} done, {counts['to run']} to run, "
             f"{counts['running']} running elsewhere); workspace {workspace}"]
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        note = f"  ({r['note']})" if r["note"] else ""
        lines.append(f"  {r['state']:<7}  {r['name']:<{width}}  {r['version']}  {r['output']}{note}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- progress


def _fmt_num(x: float) -> str:
    if abs(x) >= 10 or float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:.2g}" if abs(x) < 1 else f"{x:.1f}"


def _fmt_secs(s: float) -> str:
    if s < 10:
        return f"{s:.1f}s"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def step_progress(node: Node, started: float) -> str:
    p = read_json(node.output / PROGRESS)
    running_for = _fmt_secs(time.time() - started)
    if not p or p.get("updated", 0) < started:
        return f"{node.name} ({running_for})"
    done, total, unit = p.get("done"), p.get("total"), p.get("unit", "")
    if done is None:
        return f"{node.name} ({p.get('message', '')}, {running_for})"
    unit = f" {unit}" if unit else ""
    parts = [f"{_fmt_num(done)}/{_fmt_num(total)}{unit}" if total else f"{_fmt_num(done)}{unit}"]
    extra = []
    if total:
        extra.append(f"{100 * done / total:.0f}%")
    rate = p.get("rate") or 0
    if rate > 0:
        extra.append(f"{_fmt_num(rate)}{unit}/s")
        if total and done < total:
            extra.append(f"{_fmt_secs((total - done) / rate)} left")
    if p.get("message"):
        extra.append(str(p["message"]))
    return f"{node.name} {parts[0]} ({', '.join(extra + [running_for + ' so far'])})"


# ----------------------------------------------------------------------------- the run


@dataclass
class RunResult:
    reused: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # name -> error
    blocked: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.blocked


def clear_output(output: Path) -> None:
    """Empty a forced step's folder (keeping its lease) so it recomputes from nothing."""
    for child in output.iterdir():
        if child.name in (LEASE, GUARD):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def run_graph(graph: Graph, backend: Backend, selected: list[str], forced: set[str], *,
              experiment_path: Path, context: dict, out: TextIO | None = None,
              progress_every: float = 5.0, poll: float = 0.2) -> RunResult:
    out = out or sys.stderr
    nodes = graph.nodes
    total = len(selected)
    result = RunResult()
    pending = list(selected)
    finished: set[str] = set()  # done, reused or ran
    bad: set[str] = set()  # failed or blocked
    running: dict[str, float] = {}  # name -> start time
    waiting_elsewhere: set[str] = set()
    lost: list[Lease] = []
    to_force = set(forced)
    label = f"glassroom run {experiment_path.name}"

    def say(msg: str) -> None:
        print(f"[{len(finished)}/{total}] {msg}", file=out, flush=True)

    last_progress = time.time()
    with Heartbeat(on_lost=lost.append) as heartbeat:
        try:
            backend.check([nodes[n] for n in selected])
            while pending or running:
                for lease in list(lost):  # another run took a lease: stop our copy of that step
                    lost.remove(lease)
                    name = next((n for n in running if nodes[n].output == lease.output), None)
                    if name:
                        say(f"lost the lease on {name} to another run; stopping it here")
                        backend.cancel(name)

                for name in list(pending):
                    node = nodes[name]
                    failed_dep = next((d for d in node.deps if d in bad), None)
                    if failed_dep:
                        pending.remove(name)
                        bad.add(name)
                        result.blocked.append(name)
                        say(f"skip   {name}: it needs {failed_dep}, which did not finish")
                        continue
                    if name in running or not all(d in finished for d in node.deps):
                        continue
                    if name not in to_force and (read_status(node.output) or {}).get("state") == DONE:
                        pending.remove(name)
                        finished.add(name)
                        result.reused.append(name)
                        if name in waiting_elsewhere:
                            say(f"done   {name} (by another run)  {node.output}")
                        else:
                            say(f"reuse  {name} {node.version}  {node.output}")
                        continue
                    if not backend.can_start(node):
                        continue
                    lease = try_acquire(node.output, label)
                    if lease is None:
                        if name not in waiting_elsewhere:
                            waiting_elsewhere.add(name)
                            info = read_lease(node.output)
                            say(f"wait   {name}: running in another run ({describe_lease(info) if info else 'just finished'})")
                        continue
                    # holding the lease, look again: the other run may have finished it meanwhile
                    previous = read_status(node.output) or {}
                    if name not in to_force and previous.get("state") == DONE:
                        lease.release()
                        continue
                    if name in to_force:
                        clear_output(node.output)
                        to_force.discard(name)
                        previous = {}
                    attempt = int(previous.get("attempt", 0)) + 1
                    atomic_write_json(node.output / STEP, {**step_record(graph, node),
                                                           "resolved_config": _jsonable(node.resolved_config(graph)),
                                                           "experiment": str(experiment_path)})
                    (node.output / PROGRESS).unlink(missing_ok=True)
                    now = time.time()
                    write_status(node.output, RUNNING, attempt=attempt, started=now, executor=backend.name,
                                 worker_pid=None, finished=None, duration_s=None, error=None)
                    heartbeat.add(name, lease)
                    spec = {"experiment": str(experiment_path), "workspace": str(graph.workspace),
                            "name": name, "version": node.version, "output": str(node.output),
                            "token": lease.token, "attempt": attempt, "context": context}
                    backend.start(node, spec)
                    running[name] = now
                    why = ""
                    if lease.took_over:
                        why = f", taking over from a stopped run ({describe_lease(lease.took_over)})"
                    elif previous.get("state") in (FAILED, INTERRUPTED, RUNNING):
                        why = f", after an earlier attempt that {'was interrupted' if previous['state'] != FAILED else 'failed'}"
                    say(f"start  {name} {node.version} (attempt {attempt}{why})")

                for name, code in backend.poll():
                    node = nodes[name]
                    lease = heartbeat.remove(name)
                    status = read_status(node.output) or {}
                    took = time.time() - running.pop(name)
                    if lease is not None and (lease.lost or not holds(node.output, lease.token)):
                        # another run took the step over (we looked stale to it): it owns the
                        # status now; wait for its result like any step running elsewhere
                        waiting_elsewhere.add(name)
                        say(f"wait   {name}: another run took it over")
                        continue
                    if code == 0 and status.get("state") == DONE:
                        finished.add(name)
                        result.ran.append(name)
                        say(f"done   {name} in {_fmt_secs(took)}  {node.output}")
                    else:
                        if status.get("state") not in (FAILED, INTERRUPTED):
                            status = write_status(node.output, FAILED, finished=time.time(),
                                                  error=f"the step's process exited with code {code}")
                        bad.add(name)
                        result.failed[name] = status.get("error") or "failed"
                        say(f"FAILED {name}: {result.failed[name]}  (log: {node.output / LOG})")
                    if lease is not None:
                        lease.release()
                    if name in pending:
                        pending.remove(name)

                if running and time.time() - last_progress >= progress_every:
                    last_progress = time.time()
                    say("running " + "; ".join(step_progress(nodes[n], t) for n, t in running.items()))
                time.sleep(poll)
        except BaseException:
            # interrupted (Ctrl-C) or crashed: stop our steps, record them as interrupted, free their leases
            for name in list(running):
                backend.cancel(name)
                node = nodes[name]
                lease = heartbeat.remove(name)
                if lease is None or not holds(node.output, lease.token):
                    continue  # not ours any more: leave it to the run that holds it
                if (read_status(node.output) or {}).get("state") == RUNNING:
                    write_status(node.output, INTERRUPTED, finished=time.time(), error="interrupted")
                lease.release()
            raise
        finally:
            backend.close()
    parts = [f"{len(result.reused)} reused", f"{len(result.ran)} ran"]
    if result.failed:
        parts.append(f"{len(result.failed)} failed ({', '.join(result.failed)})")
    if result.blocked:
        parts.append(f"{len(result.blocked)} skipped ({', '.join(result.blocked)})")
    print(f"{total} steps: {', '.join(parts)}", file=out, flush=True)
    return result


def _jsonable(value):
    import dataclasses
    import enum
    from pathlib import PurePath

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, PurePath):
        return str(value)
    return value
