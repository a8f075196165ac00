"""`glassroom ARGS` run inside the test process, returning what a subprocess would: exit code, stdout,
stderr. A subprocess pays the torch import (about 3 CPU-seconds) on every call; in-process the import is
paid once per worker. Use a real subprocess where the process itself is under test: signals, locks held
by another process, torchrun, what a fresh interpreter imports, the environment read at import time."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

from glassroom.cli import main

ROOT = Path(__file__).resolve().parents[1]

# Python's default filters hide these outside __main__; a real interpreter prints every other warning.
_HIDDEN_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


class _Text(io.StringIO):
    """A text stream with the parts of sys.stdout that commands touch (isatty, a bytes buffer)."""

    def __init__(self):
        super().__init__()
        self.buffer = _Bytes(self)

    def isatty(self) -> bool:
        return False


class _Bytes(io.BytesIO):
    def __init__(self, text: _Text):
        super().__init__()
        self._text = text

    def write(self, data) -> int:
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)


@contextlib.contextmanager
def _environment(env: dict | None):
    saved = dict(os.environ)
    os.environ.update({k: str(v) for k, v in (env or {}).items()})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _threads():
    """A command may change torch's thread count; the next test must not inherit it."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    try:
        yield
    finally:
        torch = sys.modules.get("torch")
        if torch is not None and before is not None and torch.get_num_threads() != before:
            torch.set_num_threads(before)


def glassroom_in_process(*args, cwd: str | Path | None = None, env: dict | None = None,
                         input: str | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`glassroom ARGS` in this process, as a CompletedProcess (timeout is accepted and ignored). An
    exception the CLI does not turn into a message prints its traceback and exits 1, as python would.
    Warnings the command raises (pytest would record them) are put at the end of stderr, so a
    one-line-error check still sees a stray RuntimeWarning."""
    argv = [str(a) for a in args]
    out, err = _Text(), _Text()
    here = os.getcwd()
    stdin = sys.stdin
    caught: list = []
    try:
        with _environment(env), _threads(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            for category in _HIDDEN_WARNINGS:
                warnings.filterwarnings("ignore", category=category)
            os.chdir(cwd or ROOT)
            sys.stdin = io.StringIO(input or "")
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if exc.code is not None and not isinstance(exc.code, int):
                    print(exc.code, file=sys.stderr)
            except Exception:  # noqa: BLE001 - what the interpreter would print
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(here)
        sys.stdin = stdin
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught)
    return subprocess.CompletedProcess(["glassroom", *argv], code, out.getvalue(), err.getvalue() + shown)
