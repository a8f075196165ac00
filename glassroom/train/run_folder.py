"""A run folder read back: its saved config and a checkpoint (newest intact, or `step`), verified.

`read_run(dir, step)` -> a RunFolder (its config, the checkpoint chosen and verified);
`read_run_state(dir, step)` -> the run, its state dict and trainer.json, read again if a training
run's retention prunes it meanwhile; `load(path, step)` -> (Transformer in eval mode on CPU in fp32,
tokenizers.Tokenizer) of a run folder or a Hugging Face folder: `glassroom.load`, the notebook entry
point (docs/python.md); `export_run(run_dir, out)` a run's checkpoint as a Hugging Face folder
(glassroom/hf/export.py writes it). Every problem with the files is one GlassroomError naming the file.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from glassroom.errors import GlassroomError
from glassroom.hf.card import model_card
from glassroom.hf.export import DEFAULT_SHARD, DTYPES, check_out, write_folder
from glassroom.hf.load import build_from_state, is_hf_folder, model_config_of, read_hf_folder, read_tokenizer
from glassroom.hf.record import record_export
from glassroom.model.transformer import Transformer
from glassroom.observe.run_folder import CHECKPOINTS_DIR, has_config
from glassroom.train import checkpoint as ckpt
from glassroom.train.run_dir import RUN_TOKENIZER, saved_config


@dataclass
class RunFolder:
    run_dir: Path
    config: dict[str, Any]  # the run's resolved config (config.yaml)
    step: int
    checkpoint: Path

    @property
    def model_cfg(self):
        return model_config_of(self.config["model"])


def read_run(run_dir: Path, step: Optional[int] = None, warn=None) -> RunFolder:
    """The run's config and its checkpoint at `step` (newest intact without), verified."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise GlassroomError(f"{run_dir}: no such run folder")
    if not has_config(run_dir):
        parent = run_dir.resolve().parent
        if parent.name == CHECKPOINTS_DIR and has_config(parent.parent) and run_dir.name.startswith("step_"):
            step_text = run_dir.name[len("step_"):].lstrip("0") or "0"
            raise GlassroomError(f"{run_dir}: a checkpoint folder; give its run folder {parent.parent} "
                                 f"with step {step_text}")
        if is_hf_folder(run_dir):  # `glassroom export` or init.step given a Hugging Face folder
            raise GlassroomError(f"{run_dir}: a Hugging Face folder, not a run folder (no config.yaml)")
        raise GlassroomError(f"{run_dir}: not a run folder (no config.yaml) nor a Hugging Face folder (no config.json)")
    config = saved_config(run_dir)
    if not isinstance(config.get("model"), dict):
        raise GlassroomError(f"{run_dir}/config.yaml: has no model: section; the run's saved config is damaged")
    found = ckpt.list_checkpoints(run_dir)
    if step is not None:
        chosen = [(s, p) for s, p in found if s == step]
        if not chosen:
            steps = ", ".join(str(s) for s, _ in found) or "none"
            raise GlassroomError(f"{run_dir}: no checkpoint at step {step} (checkpoints: {steps})")
        problem = ckpt.verify_checkpoint(chosen[0][1], step)
        if problem:
            raise GlassroomError(f"{run_dir}/{problem}; this checkpoint is damaged: choose another --step")
        return RunFolder(run_dir, config, step, chosen[0][1])
    problems = []
    for s, path in reversed(found):
        problem = ckpt.verify_checkpoint(path, s)
        if problem is None:
            for p in problems:
                (warn or _stderr)(f"{p}; using step {s}, the newest intact checkpoint")
            return RunFolder(run_dir, config, s, path)
        problems.append(problem)
    if problems:
        raise GlassroomError(f"{run_dir}: {'; '.join(problems[:3])}; no intact checkpoint")
    raise GlassroomError(f"{run_dir}: no checkpoint yet; train it until its first checkpoint (train.checkpoint_every)")


def _stderr(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


class CheckpointGone(GlassroomError):
    """The checkpoint was removed while it was read (a training run's retention pruned it)."""


def run_state(run: RunFolder) -> dict[str, torch.Tensor]:
    """The checkpoint's model state (router biases included), fp32 on CPU; no process group needed."""
    with torch.device("meta"):  # no initialisation to pay for: the checkpoint fills every entry
        model = Transformer(run.model_cfg)
    target = {"model": model.to_empty(device="cpu").state_dict()}
    # DCP logs each failed read with a traceback (state_dict_loader on the root logger)
    quiet = [logging.getLogger("torch.distributed.checkpoint"), logging.getLogger()]
    was = [q.disabled for q in quiet]
    try:
        for q in quiet:
            q.disabled = True
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore")
            dcp.load(target, checkpoint_id=str(run.checkpoint))
    except (Exception, CheckpointException) as exc:  # noqa: BLE001 - DCP wraps any reader failure (CheckpointException is a BaseException)
        if not run.checkpoint.is_dir():
            raise CheckpointGone(f"{run.checkpoint}: removed while it was read (the run's retention pruned it); "
                                 "export again, or choose a checkpoint it keeps") from None
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise GlassroomError(f"{run.checkpoint}: does not fit the run's model or cannot be read ({first[:160]})") from None
    finally:
        for q, w in zip(quiet, was):
            q.disabled = w
    return {name: t.float() for name, t in target["model"].items()}


def read_run_state(run_dir: Path, step: Optional[int] = None) -> tuple[RunFolder, dict[str, torch.Tensor], dict]:
    """(the run, its checkpoint's state, the checkpoint's trainer.json) of a run that may be training
    right now: the newest intact checkpoint, chosen again if the trainer's retention removes it while
    it is read (a checkpoint is immutable once renamed into place: what is read is whole)."""
    for attempt in range(5):
        run = read_run(run_dir, step)
        try:
            return run, run_state(run), _trainer_json(run)
        except CheckpointGone:
            if step is not None or attempt == 4:
                raise
    raise AssertionError("unreachable")


def _trainer_json(run: RunFolder) -> dict:
    try:
        trainer = json.loads((run.checkpoint / "trainer.json").read_text())
    except FileNotFoundError:
        if not run.checkpoint.is_dir():
            raise CheckpointGone(f"{run.checkpoint}: removed while it was read (the run's retention pruned "
                                 "it); export again, or choose a checkpoint it keeps") from None
        return {}
    except (OSError, ValueError):
        return {}  # verified, yet unreadable: the card says less
    return trainer if isinstance(trainer, dict) else {}


def run_tokenizer_path(run: RunFolder) -> Path:
    """The tokenizer the run trained with: its own copy (written at its start), else, for runs from
    before that copy existed, the one in its dataset folder now."""
    if (run.run_dir / RUN_TOKENIZER).is_file():
        return run.run_dir / RUN_TOKENIZER
    data = run.config.get("data") or {}
    path = Path(str(data.get("path", ""))) / "tokenizer.json"
    if not path.is_file():
        raise GlassroomError(f"{path}: no such file; the run's dataset (data.path in {run.run_dir}/config.yaml) "
                             "holds its tokenizer: build or copy it there")
    return path


def load(path: str | Path, step: Optional[int] = None):
    """(model, tokenizer) for a run folder (its newest intact checkpoint, or `step`) or a Hugging Face
    folder: a glassroom Transformer in eval mode on CPU in fp32, and a tokenizers.Tokenizer."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise GlassroomError(f"{path}: no such folder (a run folder or a Hugging Face folder)")
    if is_hf_folder(path) and not has_config(path):
        if step is not None:
            raise GlassroomError(f"{path}: a Hugging Face folder has one set of weights; step applies to run folders")
        tok_path = path / "tokenizer.json"
        if not tok_path.is_file():
            raise GlassroomError(f"{tok_path}: no such file; the folder's tokenizer is missing")
        mapping, state = read_hf_folder(path)
        return build_from_state(model_config_of(mapping), state, str(path)), read_tokenizer(tok_path)
    run, state, _ = read_run_state(path, step)
    model = build_from_state(run.model_cfg, state, str(run.checkpoint))
    return model, read_tokenizer(run_tokenizer_path(run))


def export_run(run_dir: str | Path, out: str | Path, step: Optional[int] = None, dtype: str = "fp32",
               max_shard_size: int = DEFAULT_SHARD, force: bool = False) -> Path:
    """Export a run's checkpoint (newest intact, or `step`) as a Hugging Face folder at `out`."""
    run_dir, out = Path(run_dir), Path(out)
    if dtype not in DTYPES:
        raise GlassroomError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    check_out(out, force, inside=run_dir)
    run, state, trainer = read_run_state(run_dir, step)  # a run training now: a whole checkpoint
    tokenizer = run_tokenizer_path(run)
    train_state = trainer.get("train_state") if isinstance(trainer.get("train_state"), dict) else {}
    folder = write_folder(
        out, run.config["model"], state, tokenizer, dtype, max_shard_size, force=force,
        card=lambda arch_class: model_card(run_dir, run.config, run.step, arch_class, train_state),
        provenance={"run": run_dir.name, "step": run.step})
    record_export(run_dir, folder, run.step, dtype)
    return folder
