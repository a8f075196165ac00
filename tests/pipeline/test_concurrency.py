"""Leases: a killed `glassroom run` resumes on rerun; two concurrent runs never run a step twice."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from glassroom.pipeline.lock import Heartbeat, _guard, holds, read_lease, try_acquire
from glassroom.pipeline.status import atomic_write_json
from pipeline_helpers import calls, glassroom_process, write_experiment

RESUMABLE = """
def slow(ctx):
    \"\"\"Twenty items, a checkpoint after each: a rerun starts where the last attempt stopped.\"\"\"
    with open(COUNTS / ctx.name, "a") as f:
        f.write(f"{os.getpid()}\\n")
    ckpt = ctx.path("checkpoint.json")
    start = json.loads(ckpt.read_text())["next"] if ckpt.exists() else 0
    with open(COUNTS / "starts", "a") as f:
        f.write(f"{start}\\n")
    for i in range(start, 20):
        time.sleep(0.1)
        ctx.write_json("checkpoint.json", {"next": i + 1})
        ctx.progress(i + 1, 20, unit="items")
    ctx.write_json("value.json", {"value": 20})


a = Step("a", work, {"add": 1})
s = Step("slow", slow, {"in_a": a / "value.json"})
steps = [Step("after", work, {"in_s": s / "value.json"})]
"""


def _wait_for(predicate, timeout: float = 30.0, what: str = ""):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_killed_run_resumes_the_interrupted_step(tmp_path):
    exp, ws = write_experiment(tmp_path, RESUMABLE), tmp_path / "ws"
    # a long lease timeout: the rerun must see at once that the killed run's process is gone
    env = {"GLASSROOM_LEASE_TIMEOUT": "120"}
    run = glassroom_process("run", exp, "--workspace", ws, env=env)
    ckpt = lambda: next((ws / "steps").glob("slow-*/checkpoint.json"), None)  # noqa: E731
    _wait_for(lambda: ckpt() and json.loads(ckpt().read_text())["next"] >= 4, what="the slow step to get going")
    slow_dir = ckpt().parent
    worker = json.loads((slow_dir / "status.json").read_text())["worker_pid"]
    run.send_signal(signal.SIGKILL)
    run.communicate()
    _wait_for(lambda: not _alive(worker), timeout=10, what="the step's process to die with its run")
    status = json.loads((slow_dir / "status.json").read_text())
    assert status["state"] == "running"  # nobody recorded the end: the lease shows it is stale
    assert read_lease(slow_dir) is not None

    dry = subprocess.run([sys.executable, "-m", "glassroom", "run", exp, "--workspace", ws, "--dry-run"],
                         capture_output=True, text=True, env={**os.environ, **env})
    assert "to run   slow" in dry.stdout and "interrupted before" in dry.stdout

    started = time.time()
    rerun = glassroom_process("run", exp, "--workspace", ws, env=env)
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, err
    assert time.time() - started < 30  # took the dead run's lease over without waiting 120 s
    assert "taking over from a stopped run" in err
    starts = [int(x) for x in (tmp_path / "counts" / "starts").read_text().split()]
    assert starts[0] == 0 and starts[1] >= 4  # the second attempt resumed from the checkpoint
    assert (calls(tmp_path, "a"), calls(tmp_path, "slow"), calls(tmp_path, "after")) == (1, 2, 1)
    status = json.loads((slow_dir / "status.json").read_text())
    assert status["state"] == "done" and status["attempt"] == 2
    assert read_lease(slow_dir) is None  # released


def test_two_concurrent_runs_never_run_a_step_twice(tmp_path):
    exp = write_experiment(tmp_path, """
    a = Step("a", work, {"add": 1, "sleep": 0.4})
    b = Step("b", work, {"in_a": a / "value.json", "sleep": 0.4})
    c = Step("c", work, {"in_a": a / "value.json", "sleep": 0.4})
    d = Step("d", work, {"in_a": a / "value.json", "sleep": 0.4})
    steps = [Step("e", work, {"in_b": b / "value.json", "in_c": c / "value.json", "in_d": d / "value.json"})]
    """)
    ws = tmp_path / "ws"
    runs = [glassroom_process("run", exp, "--workspace", ws, "--jobs", "2") for _ in range(2)]
    results = [r.communicate(timeout=90) for r in runs]
    for r, (_, err) in zip(runs, results):
        assert r.returncode == 0, err
    assert [calls(tmp_path, s) for s in "abcde"] == [1, 1, 1, 1, 1]
    errs = results[0][1] + results[1][1]
    assert errs.count("start  ") == 5  # each step started by exactly one of the two runs
    assert "running in another run" in errs
    assert all("5 steps:" in e for _, e in results)
    e = next((ws / "steps").glob("e-*"))
    assert json.loads((e / "value.json").read_text())["value"] == 3 * (1 + 1) + 1


# ----------------------------------------------------------------------------- the lease itself


def test_a_live_lease_blocks_and_a_stale_one_is_taken_over(tmp_path, monkeypatch):
    out = tmp_path / "step"
    lease = try_acquire(out)
    assert lease is not None and holds(out, lease.token)
    assert try_acquire(out) is None  # held by this (live) process with a fresh heartbeat

    # a lease from another machine: only its heartbeat can tell whether it is alive
    info = {"token": "other", "host": "elsewhere", "pid": 1, "heartbeat": time.time()}
    atomic_write_json(out / ".lease", info)
    monkeypatch.setenv("GLASSROOM_LEASE_TIMEOUT", "5")
    assert try_acquire(out) is None
    atomic_write_json(out / ".lease", {**info, "heartbeat": time.time() - 6})
    taken = try_acquire(out)
    assert taken is not None and taken.took_over["token"] == "other"
    assert not lease.refresh() and lease.lost  # the first holder sees it lost the lease
    taken.release()
    assert read_lease(out) is None


def test_a_lease_of_a_dead_process_on_this_host_is_stale_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSROOM_LEASE_TIMEOUT", "3600")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "step"
    atomic_write_json(out / ".lease", {"token": "gone", "host": socket.gethostname(), "pid": dead.pid,
                                       "heartbeat": time.time()})
    assert try_acquire(out) is not None


def test_heartbeat_renews_and_reports_a_lost_lease(tmp_path, monkeypatch):
    lost = []
    out = tmp_path / "step"
    lease = try_acquire(out)
    first = read_lease(out)["heartbeat"]
    with Heartbeat(on_lost=lost.append, interval=0.05) as hb:
        hb.add("step", lease)
        _wait_for(lambda: read_lease(out)["heartbeat"] > first, timeout=5, what="a heartbeat")
        with _guard(out):  # a takeover holds the lock, as try_acquire does; a renewal cannot interleave
            atomic_write_json(out / ".lease", {**read_lease(out), "token": "thief"})
        _wait_for(lambda: lost, timeout=10, what="the lost lease to be noticed")
    assert lost == [lease]


if sys.platform != "linux":
    pytestmark = pytest.mark.skip("leases rely on Linux /proc and flock")


def test_a_run_that_loses_a_lease_stops_its_copy_and_never_marks_it_done(tmp_path):
    exp, ws = write_experiment(tmp_path, RESUMABLE), tmp_path / "ws"
    run = glassroom_process("run", exp, "--workspace", ws, env={"GLASSROOM_LEASE_TIMEOUT": "1"})
    ckpt = lambda: next((ws / "steps").glob("slow-*/checkpoint.json"), None)  # noqa: E731
    _wait_for(ckpt, what="the slow step to start")
    slow_dir = ckpt().parent
    # another machine's run takes the lease (as if ours had looked stale to it), then vanishes
    with _guard(slow_dir):  # as lock.try_acquire does
        atomic_write_json(slow_dir / ".lease", {"token": "thief", "host": "elsewhere", "pid": 1, "heartbeat": time.time()})
    _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert "lost the lease on slow to another run" in err
    assert "wait   slow: another run took it over" in err
    assert "taking over from a stopped run" in err  # the thief's lease went stale; ours again
    assert calls(tmp_path, "slow") == 2 and calls(tmp_path, "after") == 1
    assert json.loads((slow_dir / "status.json").read_text())["state"] == "done"


THREADS = """
def threads(ctx):
    import torch
    ctx.write_json("value.json", {"value": 0, "omp": os.environ.get("OMP_NUM_THREADS"), "torch": torch.get_num_threads()})


steps = [Step("one", threads, {"k": 1}, resources=Resources(cpus=1)),
         Step("one-and-a-half", threads, {"k": 2}, resources=Resources(cpus=1.5)),
         Step("two", threads, {"k": 3}, resources=Resources(cpus=2))]
"""


@pytest.mark.parametrize("user", [None, "1"])
def test_each_step_process_gets_its_share_of_threads_never_more_than_the_user_set(tmp_path, monkeypatch, user):
    """OMP_NUM_THREADS of a step's process is the CPUs it declares, rounded down, capped by the user's
    own: torch in two 1-CPU steps at once then trains on one thread each instead of fighting."""
    from pipeline_helpers import glassroom as run_here

    from glassroom.pipeline.runner_local import thread_share

    if user is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", user)
    exp, ws = write_experiment(tmp_path, THREADS), tmp_path / "ws"
    assert run_here("run", exp, "--workspace", ws, "--jobs", "2")[0] == 0
    seen = {name: json.loads(next((ws / "steps").glob(f"{name}-????????/value.json")).read_text())
            for name in ("one", "one-and-a-half", "two")}
    cap = 2 if user is None else 1
    for name, want in (("one", 1), ("one-and-a-half", 1), ("two", min(2, cap))):
        assert seen[name]["omp"] == str(want) and seen[name]["torch"] == want, (name, seen[name])
    assert [thread_share(c, {}) for c in (0.5, 1, 1.99, 2, 8)] == ["1", "1", "1", "2", "8"]
    assert [thread_share(4, {"OMP_NUM_THREADS": v}) for v in ("3", "0", "many", " 2 ")] == ["3", "4", "4", "2"]
