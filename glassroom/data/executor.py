"""Where a build's parallel stages run: a local process pool or a Ray cluster, behind one `map`.

`Executor.map(fn, items)` yields fn(*item) for each item, in input order, keeping at most
`lookahead` tasks in flight, so memory holds a bounded number of batches whatever the corpus size.
`fn` must be a top-level function and the items picklable (plain data, bytes, numpy arrays).
`submit(fn, *args)` returns a handle with `.get()` for a single task (a source's extraction).
The stages that run here: extraction (per source), the clean map, the decontamination scan,
quality scoring and tokenization. Dedup, the split, the quality cutoffs and tokenizer training are
global and run in the driver. Results never depend on which executor ran them: every task is a
pure function of its arguments and results are consumed in input order.

- `LocalExecutor(workers)`: a fork pool of `workers` processes (spawn off Linux), or in-process
  for one worker; each forked worker closes its copy of the build lock's descriptor.
- `RayExecutor(address)`: `local` starts Ray here with every CPU and a small object store
  (GLASSROOM_RAY_OBJECT_STORE_MB, default 128), as `glassroom run --ray local` does; any other
  address joins a running cluster (`auto`, `host:6379`, `ray://host:10001`). Every node must see
  the sources and DIR's parent folder at the same paths. Missing or unreachable Ray is a one-line
  GlassroomError, raised before DIR is touched.
"""

from __future__ import annotations

import abc
import contextlib
import multiprocessing
import os
import sys
from collections import deque
from typing import Callable, Iterable, Iterator

from glassroom.errors import GlassroomError
from glassroom.pipeline.runner_ray import check_reachable, import_ray, init_ray

_LOCK_FD: list[int | None] = [None]  # the build lock's descriptor (set by staging.build_lock)


def _close_lock_in_worker() -> None:
    """Pool initializer: a forked worker drops its copy of the lock descriptor, so workers orphaned
    by a killed build do not keep DIR locked (the parent's copy still holds the lock)."""
    if _LOCK_FD[0] is not None:
        with contextlib.suppress(OSError):
            os.close(_LOCK_FD[0])


class _Done:
    def __init__(self, value) -> None:
        self.value = value

    def get(self):
        return self.value


class Executor(abc.ABC):
    name = "executor"
    workers = 1

    @abc.abstractmethod
    def submit(self, fn: Callable, *args):
        """Run fn(*args) as one task; a handle whose .get() returns its result."""

    def map(self, fn: Callable, items: Iterable[tuple], lookahead: int | None = None) -> Iterator:
        """fn(*item) for each item, in order, with at most `lookahead` (default 2 x workers) in flight."""
        limit = max(1, lookahead or 2 * self.workers)
        pending: deque = deque()
        for item in items:
            pending.append(self.submit(fn, *item))
            if len(pending) >= limit:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

    def close(self) -> None:  # noqa: B027 - an optional hook: a pool that holds nothing has nothing to release
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalExecutor(Executor):
    """A process pool of `workers` (fork on Linux), or this process alone for one worker."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, int(workers))
        self.name = "local"
        self.pool = None
        if self.workers > 1:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")  # workers fork before any Rust thread pool starts
            ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
            self.pool = ctx.Pool(self.workers, _close_lock_in_worker)

    def submit(self, fn: Callable, *args):
        if self.pool is None:
            return _Done(fn(*args))
        return self.pool.apply_async(fn, args)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None


def _run(fn, args):
    return fn(*args)


class RayExecutor(Executor):
    """Tasks on a Ray cluster (one CPU each); `local` starts a private Ray on this machine."""

    def __init__(self, address: str) -> None:
        ray = self.ray = import_ray()
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        check_reachable(address)
        self.address = address
        self.name = f"ray:{address}"
        started_here = not ray.is_initialized()
        if started_here:
            init_ray(ray, address)
        self.started_here = started_here
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.remote = ray.remote(num_cpus=1, max_retries=1)(_run)

    def submit(self, fn: Callable, *args):
        ref = self.remote.remote(fn, args)
        ray = self.ray

        class _Ref:
            def get(self_inner):
                try:
                    return ray.get(ref)
                except ray.exceptions.RayTaskError as exc:  # the task's own exception, re-raised as itself
                    cause = exc.as_instanceof_cause()
                    if isinstance(cause, GlassroomError) or isinstance(getattr(exc, "cause", None), GlassroomError):
                        raise GlassroomError(str(getattr(exc, "cause", cause))) from None
                    raise

        return _Ref()

    def close(self) -> None:
        if self.started_here:
            self.ray.shutdown()


def make_executor(workers: int | None, ray: str | None) -> Executor:
    """The executor a build asked for: Ray at `ray` when given, else a local pool of `workers`."""
    if ray:
        return RayExecutor(ray)
    return LocalExecutor(workers or os.cpu_count() or 1)
