"""Optional mirrors of a run's step metrics: Weights & Biases and TensorBoard event files.

The run store stays the record; these copy each step's scalar metrics elsewhere for people who
already watch runs there. Both are trainer observers (on_step, state, load_state, close) that the
trainer adds on the main rank when `observe.wandb` / `observe.tensorboard` are true. Their
packages are optional extras, imported only when a mirror is switched on; a missing one is a
GlassroomError that says which extra to install. See docs/mirrors.md.

Nothing from the environment is sent: the wandb run gets the resolved config redacted by
glassroom.observe.redact (the same rules as the dashboard and the published site), with code
saving, git and host metadata switched off and console capture off.
"""

from __future__ import annotations

import hashlib
import re
import sys
import time
from pathlib import Path
from typing import Any, Optional

from glassroom.errors import GlassroomError
from glassroom.observe.redact import redact

TENSORBOARD_DIR = "tensorboard"


def _missing(package: str, extra: str, exc: BaseException) -> GlassroomError:
    return GlassroomError(
        f"observe.{extra}: the {package} package is not installed ({type(exc).__name__}: {exc}); "
        f"install it with pip install -e '.[{extra}]' or set observe.{extra}=false"
    )


def wandb_run_id(run_dir: str | Path) -> str:
    """A stable wandb run id for a run folder: its name plus a hash of its absolute path, so
    resuming the same folder continues the same wandb run and two folders never share one."""
    path = Path(run_dir).resolve()
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", path.name).strip("-")[:48] or "run"
    return f"{name}-{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, value in metrics.items():
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            continue  # not a scalar; the mirrors carry scalars only
    return out


class WandbSink:
    """Mirrors step metrics to a wandb run named after the run folder.

    The wandb run starts at the first logged step (after a resume has loaded the checkpoint), with
    `resume="allow"` and an id kept in the checkpoint (first derived from the run folder), so a
    resumed run continues the same wandb run. Steps at or below the last one wandb received are
    dropped by wandb itself (it only accepts increasing steps).
    """

    def __init__(self, cfg, run_dir: str | Path):
        try:
            import wandb  # noqa: F401
        except ImportError as exc:
            raise _missing("wandb", "wandb", exc) from None
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.project = cfg.observe.wandb_project
        self.run_id = wandb_run_id(self.run_dir)
        self.run = None
        self.trainer = None

    def _settings(self, wandb):
        wanted = {"console": "off", "save_code": False, "disable_code": True, "disable_git": True,
                  "x_disable_meta": True}
        try:
            return wandb.Settings(**wanted)
        except Exception:  # wandb before 0.19 spells the private settings with a leading underscore
            wanted["_disable_meta"] = wanted.pop("x_disable_meta")
            return wandb.Settings(**wanted)

    def _start(self) -> None:
        import wandb

        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(
                project=self.project, name=self.run_dir.resolve().name, id=self.run_id, resume="allow",
                dir=str(self.run_dir), config=redact(self.cfg.to_dict()), settings=self._settings(wandb),
            )
        except Exception as exc:
            raise GlassroomError(
                f"observe.wandb: wandb.init failed ({type(exc).__name__}: {exc}); run `wandb login`, "
                "or set WANDB_MODE=offline to keep the wandb run on disk, or set observe.wandb=false"
            ) from None

    def on_step(self, trainer, step: int, metrics: dict[str, Any]) -> None:
        self.trainer = trainer
        if self.run is None:
            self._start()
        self.run.log(_scalars(metrics), step=step)

    def state(self) -> dict:
        return {"run_id": self.run_id}

    def load_state(self, state: Optional[dict]) -> None:
        if state and state.get("run_id") and self.run is None:
            self.run_id = str(state["run_id"])

    def close(self) -> None:
        if self.run is None:
            return
        run, self.run = self.run, None
        finished = self.trainer is not None and self.trainer.step >= self.cfg.train.steps
        try:
            run.finish(exit_code=0 if finished else 1)
        except Exception as exc:  # never hide the run's own outcome behind the mirror's
            print(f"warning: observe.wandb: finishing the wandb run failed: {exc}", file=sys.stderr)


class TensorBoardSink:
    """Mirrors step metrics to TensorBoard event files in RUN_DIR/tensorboard, one scalar per
    metric name (`train/loss`, ...). The writer flushes every `flush_seconds` and at close. A
    resumed run starts a new event file with `purge_step` at its first step, so TensorBoard hides
    the steps that the killed run wrote after its last checkpoint."""

    def __init__(self, cfg, run_dir: str | Path, flush_seconds: float = 10.0):
        try:
            # lazy: torch loads only when this runs
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError as exc:
            raise _missing("tensorboard", "tensorboard", exc) from None
        self.log_dir = Path(run_dir) / TENSORBOARD_DIR
        self.flush_seconds = flush_seconds
        self.writer = None
        self._last_flush = time.monotonic()

    def on_step(self, trainer, step: int, metrics: dict[str, Any]) -> None:
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter  # lazy: torch loads only when this runs

            self.writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=max(1, int(self.flush_seconds)),
                                        purge_step=step if step > 1 else None)
        now = time.time()
        for name, value in _scalars(metrics).items():
            self.writer.add_scalar(name, value, global_step=step, walltime=now)
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            self.writer.flush()
            self._last_flush = time.monotonic()

    def state(self) -> dict:
        return {}

    def load_state(self, state: Optional[dict]) -> None:
        pass

    def close(self) -> None:
        if self.writer is None:
            return
        writer, self.writer = self.writer, None
        try:
            writer.close()  # flushes
        except Exception as exc:
            print(f"warning: observe.tensorboard: closing the event file failed: {exc}", file=sys.stderr)


def mirrors(cfg, run_dir: str | Path, is_main: bool) -> list:
    """The mirror observers that cfg.observe switches on (none on ranks other than the main one)."""
    if not is_main:
        return []
    sinks: list = []
    if cfg.observe.tensorboard:
        sinks.append(TensorBoardSink(cfg, run_dir))
    if cfg.observe.wandb:
        sinks.append(WandbSink(cfg, run_dir))
    return sinks
