"""Leases: the run that executes a step holds `<output>/.lease` and refreshes it while the step runs.

A lease records its owner (a random token), host, process id and last heartbeat. Another run may
take a lease over only when it is stale: its heartbeat is older than the lease timeout, or its
owner was a process on this host that no longer exists (a killed `glassroom run`), which is seen
at once instead of after the timeout. Every read-decide-write on a lease happens under an
exclusive flock on `<output>/.lease.guard`, so two runs never both win; the kernel drops a flock
when its holder dies, so the guard itself never goes stale. (On NFS, Linux maps flock to POSIX
locks, so this holds across machines sharing a workspace.)

GLASSROOM_LEASE_TIMEOUT (seconds, default 60) sets the staleness limit; heartbeats come every
quarter of it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from glassroom.pipeline.status import atomic_write_json, read_json

LEASE, GUARD = ".lease", ".lease.guard"


def lease_timeout() -> float:
    try:
        value = float(os.environ.get("GLASSROOM_LEASE_TIMEOUT", "60"))
    except ValueError:
        value = 60.0
    return max(value, 0.5)


def _pid_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _process_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def owner_alive(info: dict) -> bool | None:
    """Whether the lease's owner process still runs; None when that cannot be told from here."""
    if info.get("host") != socket.gethostname():
        return None
    pid = info.get("pid")
    if not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _process_state(pid) in ("Z", "X"):
        return False
    started = info.get("pid_start")
    if started is not None and _pid_start(pid) not in (None, started):
        return False  # the pid now belongs to another process
    return True


def lease_state(info: dict | None, timeout: float | None = None) -> str:
    """'free', 'stale' or 'live'."""
    if info is None:
        return "free"
    if owner_alive(info) is False:
        return "stale"
    age = time.time() - float(info.get("heartbeat", 0))
    return "stale" if age > (timeout or lease_timeout()) else "live"


def read_lease(output: Path) -> dict | None:
    return read_json(Path(output) / LEASE)


@contextmanager
def _guard(output: Path):
    output.mkdir(parents=True, exist_ok=True)
    fd = os.open(output / GUARD, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


class Lease:
    """A held lease on one step's output folder."""

    def __init__(self, output: Path, info: dict, took_over: dict | None):
        self.output = Path(output)
        self.info = info
        self.took_over = took_over  # the stale lease replaced, if any
        self.lost = False

    @property
    def token(self) -> str:
        return self.info["token"]

    def refresh(self) -> bool:
        """Renew the heartbeat; False (and `lost`) when another run has taken the lease."""
        with _guard(self.output):
            current = read_lease(self.output)
            if current is None or current.get("token") != self.token:
                self.lost = True
                return False
            self.info["heartbeat"] = time.time()
            atomic_write_json(self.output / LEASE, self.info)
            return True

    def release(self) -> None:
        with _guard(self.output):
            current = read_lease(self.output)
            if current is not None and current.get("token") == self.token:
                (self.output / LEASE).unlink(missing_ok=True)


def try_acquire(output: Path, label: str = "") -> Lease | None:
    """The lease on `output` if it is free or stale; None while another run holds it."""
    output = Path(output)
    with _guard(output):
        current = read_lease(output)
        state = lease_state(current)
        if state == "live":
            return None
        now = time.time()
        info = {
            "token": uuid.uuid4().hex,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_start": _pid_start(os.getpid()),
            "acquired": now,
            "heartbeat": now,
            "holder": label,
        }
        atomic_write_json(output / LEASE, info)
        return Lease(output, info, took_over=current if state == "stale" else None)


def holds(output: Path, token: str) -> bool:
    """Whether the lease on `output` still belongs to `token` (a step checks before it reports done)."""
    current = read_lease(Path(output))
    return current is not None and current.get("token") == token


class Heartbeat:
    """A thread that refreshes every held lease each `interval` seconds; calls on_lost(lease)."""

    def __init__(self, on_lost: Callable[[Lease], None], interval: float | None = None):
        self.interval = interval or lease_timeout() / 4
        self.on_lost = on_lost
        self.leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="glassroom-lease-heartbeat", daemon=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def add(self, name: str, lease: Lease) -> None:
        with self._lock:
            self.leases[name] = lease

    def remove(self, name: str) -> Lease | None:
        with self._lock:
            return self.leases.pop(name, None)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                leases = list(self.leases.values())
            for lease in leases:
                try:
                    ok = lease.refresh()
                except OSError:
                    continue  # a transient filesystem error; the next beat tries again
                if not ok:
                    self.on_lost(lease)


def describe_lease(info: dict) -> str:
    age = time.time() - float(info.get("heartbeat", 0))
    holder = info.get("holder") or "glassroom run"
    return f"{holder} on {info.get('host')} pid {info.get('pid')}, heartbeat {age:.0f}s ago"

