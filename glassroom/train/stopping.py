"""Stopping a run on a signal without breaking what it is writing.

SIGTERM (and Ctrl-C) stop `glassroom train` by raising KeyboardInterrupt in the main thread, which the
trainer journals as `stopped`. Raised in the middle of a checkpoint, that exception lands inside
torch.distributed.checkpoint, which catches every exception of a rank and raises its own
CheckpointException instead: the run would end as a crash, not a stop. So while a checkpoint is written
the stop is held: `hold()` records it and raises it at the end of the block, when the checkpoint and its
event are complete.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

_held = threading.local()


def request(reason: str) -> None:
    """Stop now (raise KeyboardInterrupt(reason)), or at the end of the enclosing hold(). A second
    request inside the same hold stops at once: a user who presses Ctrl-C again (a checkpoint stuck on
    a dead disk) is not held; the half-written checkpoint (a .tmp- folder) is removed by the next save or resume."""
    if getattr(_held, "depth", 0) > 0 and not getattr(_held, "pending", None):
        _held.pending = reason
        return
    raise KeyboardInterrupt(reason)


@contextlib.contextmanager
def hold():
    """A block a stop must not cut: a stop requested inside it is raised when it ends."""
    _held.depth = getattr(_held, "depth", 0) + 1
    try:
        yield
    except BaseException:  # the block failed or a second request stopped it: nothing stays pending
        if _held.depth == 1:
            _held.pending = None
        raise
    finally:
        _held.depth -= 1
    if _held.depth == 0:
        reason, _held.pending = getattr(_held, "pending", None), None
        if reason:
            raise KeyboardInterrupt(reason)


def install() -> dict:
    """Route SIGTERM and SIGINT in this process through request(); returns the previous handlers for
    restore(). Off the main thread nothing changes (Python delivers signals to the main thread only).
    A process forked after this (a data loader worker) gets Python's defaults: it dies of SIGTERM and
    raises KeyboardInterrupt on SIGINT."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    main_pid = os.getpid()
    reasons = {signal.SIGTERM: "stopped by SIGTERM", signal.SIGINT: "interrupted"}

    def stop(signum, frame):
        if os.getpid() != main_pid:  # a forked worker: the default action
            if signum == signal.SIGINT:
                signal.default_int_handler(signum, frame)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        request(reasons[signum])

    return {signum: signal.signal(signum, stop) for signum in reasons}


def restore(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
