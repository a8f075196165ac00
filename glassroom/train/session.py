"""One process's part in training a run: the same for `glassroom train`, a torchrun rank and a Ray
Train worker (glassroom/train/ray_train.py).

The process group is set up first (torchrun's variables, or the group Ray Train made), then the
launch's restart is decided on every rank together (glassroom/train/launch.py): an engine's
automatic restart resumes the run from its newest intact checkpoint as `--resume` would. A new run
gets `check_new_run_dir`'s rules; SIGTERM stops like Ctrl-C; a start that fails before its first
step removes what it created; a rank that ends on an exception leaves the reason in its launch note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from glassroom.errors import ConfigError
from glassroom.observe.run_folder import has_config
from glassroom.train import launch, parallel, stopping
from glassroom.train.config import RunConfig
from glassroom.train.hardware import resolve_device
from glassroom.train.run_dir import check_new_run_dir
from glassroom.train.trainer import Trainer


def train_run(cfg: RunConfig, out: Path, resume: bool, quiet: bool, config_label: str,
              new_folder_rules: bool = True, observers: Sequence = ()) -> tuple[Trainer, dict]:
    """Train `cfg` into `out` in this process (one rank of a launch, or the only process); returns
    the Trainer and its final evaluation. `new_folder_rules`: a new run's `out` must be new or empty
    (False for a pipeline step's own folder); `observers` are added to the Trainer's."""
    info = parallel.setup(resolve_device(cfg.train.device).type)
    engine = info.enabled or launch.local_restart_count() > 0 or launch.launched_by_ray()
    restart = launch.detect_restart(out, info.rank) if engine else None
    if restart is not None and has_config(out):
        resume = True
    if not resume and new_folder_rules:
        check_new_run_dir(out)
    trainer = None
    previous = stopping.install()  # SIGTERM stops like Ctrl-C, never in the middle of a checkpoint
    try:
        try:
            trainer = Trainer(cfg, out, resume=resume, quiet=quiet, restart=restart)
        except ConfigError as exc:  # a key of the config against the data or the machine: name the file too
            raise ConfigError(f"{config_label}: {exc}") from None
        trainer.observers.extend(observers)
        final = trainer.run()
    except BaseException as exc:
        if trainer is not None:
            trainer.note_end(exc)
            if trainer.step == 0:
                trainer.undo_failed_start()  # a new run that never finished a step leaves nothing behind
        raise
    finally:
        if not launch.launched_by_ray():  # Ray Train destroys the group it made
            parallel.teardown()
        stopping.restore(previous)
    return trainer, final
