"""StepContext: what a step's function receives (its config, output folder, inputs, progress reporting).

    def count_tokens(ctx: StepContext) -> dict:
        files = read(ctx.config["files"])          # inputs arrive as absolute paths
        for i, path in enumerate(files):
            ...
            ctx.progress(i + 1, len(files), unit="files")
        ctx.write_json("counts.json", counts)      # whole or absent, never half written
        return {"tokens": total}                   # saved as result.json, shown by `glassroom show`

A step that was interrupted reruns in the same output folder (`ctx.attempt` > 1), so a long step
can resume from what it saved (a trainer from its last checkpoint); a step that cannot resume
should write its files atomically and overwrite them.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glassroom.pipeline.status import PROGRESS, atomic_write_json, atomic_write_text

RAY_ADDRESS_ENV = "GLASSROOM_RAY_ADDRESS"   # set by the Ray runner in a step's process: the cluster it runs on


@dataclass
class StepContext:
    name: str
    version: str
    output: Path
    config: Any  # the step's config with inputs replaced by absolute paths
    inputs: dict[str, Path]  # dependency name -> its output folder
    attempt: int = 1
    cpus: float = 1
    gpus: int = 0
    rank: int = 0  # under torchrun (Resources.procs or workers > 1): this process's rank
    world_size: int = 1
    workers: int = 1  # Resources.workers: on the Ray runner, Ray Train workers the function may start
    gpus_per_worker: int = 0
    max_restarts: int = 0
    ray_address: str | None = None  # the Ray cluster this step runs on (None on the local runner)
    _progress_written: float = field(default=0.0, repr=False)
    _progress_started: float = field(default_factory=time.time, repr=False)
    _progress_first: float | None = field(default=None, repr=False)

    @property
    def is_main(self) -> bool:
        """True in the process that should write shared files (rank 0)."""
        return self.rank == 0

    def path(self, *parts: str) -> Path:
        return self.output.joinpath(*parts)

    def write_json(self, name: str, data: Any) -> Path:
        target = self.output / name
        atomic_write_text(target, json.dumps(data, indent=2, sort_keys=True) + "\n")
        return target

    def write_text(self, name: str, text: str) -> Path:
        target = self.output / name
        atomic_write_text(target, text)
        return target

    def progress(self, done: float, total: float | None = None, unit: str = "", message: str = "",
                 every: float = 0.5) -> None:
        """Report how far the step is; `glassroom run` shows it with a rate and time left.

        Writes at most once per `every` seconds (and always when done reaches total).
        """
        now = time.time()
        if self._progress_first is None:  # a resumed step starts above zero; rate counts this attempt
            self._progress_first, self._progress_started = done, now
        finished = total is not None and done >= total
        if not self.is_main or (now - self._progress_written < every and not finished):
            return
        elapsed = max(now - self._progress_started, 1e-9)
        atomic_write_json(self.output / PROGRESS, {
            "done": done, "total": total, "unit": unit, "message": message,
            "rate": (done - self._progress_first) / elapsed, "elapsed_s": round(elapsed, 3), "updated": now, "pid": os.getpid(),
        })
        self._progress_written = now

    def note(self, message: str, every: float = 0.5) -> None:
        """Report what the step is doing when it cannot count (`glassroom run` shows the message)."""
        now = time.time()
        if not self.is_main or now - self._progress_written < every:
            return
        atomic_write_json(self.output / PROGRESS, {"done": None, "total": None, "message": message,
                                                   "updated": now, "pid": os.getpid()})
        self._progress_written = now
