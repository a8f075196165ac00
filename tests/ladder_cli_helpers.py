"""`glassroom ladder ...` in the test process for the ladder tests, with the warnings a real interpreter would
print on stderr (a RuntimeWarning from numpy, say) put back on the result's stderr: pytest records warnings
raised in the test process, so a one-line-error check would otherwise not see them."""

from __future__ import annotations

import subprocess
import warnings

from cli_helpers import ROOT, glassroom_in_process

# Python's default filters hide these outside __main__; everything else is printed once per place.
_HIDDEN = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def ladder_in_process(*args, cwd=ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """`glassroom ARGS` in this process: exit code, stdout, and stderr with any warning the command raised."""
    with warnings.catch_warnings(record=True) as caught:
        for category in _HIDDEN:
            warnings.filterwarnings("ignore", category=category)
        result = glassroom_in_process(*args, cwd=cwd, env=env)
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught)
    if shown:
        result.stderr += shown
    return result
