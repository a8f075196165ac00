"""Progress lines for long stages: one line per interval to stderr, with rate and time left."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """`update(n)` adds n units (bytes by default); a line is printed at most every `interval` s."""

    def __init__(self, stage: str, total: float | None = None, interval: float = 5.0,
                 stream: TextIO | None = None, scale: float = 1e6, unit: str = "MB") -> None:
        self.stage, self.total, self.interval = stage, total, interval
        self.stream = stream if stream is not None else sys.stderr
        self.scale, self.unit = scale, unit
        self.done = 0.0
        self.start = self.last = time.monotonic()

    def update(self, n: float, note: str = "") -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._print(now, note)

    def _print(self, now: float, note: str = "") -> None:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        done = f"{self.done / self.scale:.1f} {self.unit}"
        if self.total:
            left = (self.total - self.done) / rate if rate > 0 else float("inf")
            eta = f", {left:.0f} s left" if left != float("inf") else ""
            done += f" of {self.total / self.scale:.1f} {self.unit} ({100 * self.done / self.total:.0f}%"
            done += f", {rate / self.scale:.2f} {self.unit}/s{eta})"
        else:
            done += f" ({rate / self.scale:.2f} {self.unit}/s, {elapsed:.0f} s so far)"
        print(f"{self.stage}: {done}{'  ' + note if note else ''}", file=self.stream, flush=True)

    def finish(self, note: str = "") -> float:
        """Print the closing line; returns the seconds the stage took."""
        now = time.monotonic()
        elapsed = now - self.start
        rate = self.done / max(elapsed, 1e-9) / self.scale
        print(f"{self.stage}: {self.done / self.scale:.1f} {self.unit} in {elapsed:.1f} s ({rate:.2f} {self.unit}/s)"
              f"{'  ' + note if note else ''}", file=self.stream, flush=True)
        return elapsed
