"""Reading models: a Hugging Face folder (config.json, model.safetensors) or a run folder's checkpoint.

`read_hf_folder(dir)` -> (model section mapping, glassroom state dict); `read_run(dir, step)` -> a
RunFolder (its config, the checkpoint chosen and verified, its state dict); `load(path, step)` ->
(Transformer in eval mode on CPU in fp32, tokenizers.Tokenizer): the notebook entry point
(docs/python.md). Every problem with the files is one GlassroomError naming the file.
"""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from glassroom.errors import GlassroomError

SAFETENSORS = "model.safetensors"
INDEX = "model.safetensors.index.json"


def is_hf_folder(path: Path) -> bool:
    return (Path(path) / "config.json").is_file()


def read_hf_config(folder: Path) -> dict[str, Any]:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise GlassroomError(f"{path}: no such file; a Hugging Face folder needs config.json")
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GlassroomError(f"{path}: not JSON ({str(exc)[:80]}); export the model again or fix the file") from None
    if not isinstance(hf, dict):
        raise GlassroomError(f"{path}: not a JSON object of settings")
    return hf


def model_section(folder: Path) -> dict[str, Any]:
    """The `model:` mapping a Hugging Face folder's config.json describes (validated)."""
    from glassroom.config import build_section
    from glassroom.hf.architectures import model_config
    from glassroom.model.config import ModelConfig

    where = str(Path(folder) / "config.json")
    try:
        mapping = model_config(read_hf_config(folder), where)
    except (KeyError, TypeError, ValueError) as exc:
        raise GlassroomError(f"{where}: a setting is missing or of the wrong type ({type(exc).__name__}: {str(exc)[:80]})") from None
    try:
        build_section(ModelConfig, mapping, "model")
    except GlassroomError as exc:
        raise GlassroomError(f"{where}: describes a model glassroom cannot build ({exc})") from None
    return mapping


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise GlassroomError(f"{path}: no such file; the folder's weights are missing")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise GlassroomError(f"{path}: not a readable safetensors file ({first[:120]}); it is damaged: "
                             "copy or export it again") from None


def read_hf_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of model.safetensors, or of the shards model.safetensors.index.json names."""
    folder = Path(folder)
    index = folder / INDEX
    if not index.is_file():
        return _read_safetensors(folder / SAFETENSORS)
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = sorted(set(weight_map.values()))
        if any("/" in f or "\\" in f or f.startswith(".") for f in files):
            raise ValueError
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise GlassroomError(f"{index}: not a readable shard index (weight_map of tensor -> file)") from None
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        tensors.update(_read_safetensors(folder / name))
    return tensors


def read_hf_folder(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(model mapping, glassroom state dict in fp32) of a Hugging Face folder."""
    from glassroom.hf.tensors import from_hf

    mapping = model_section(folder)
    cfg = _model_config(mapping)
    arch = read_hf_config(folder)["model_type"]
    tensors = read_hf_tensors(folder)
    state = from_hf(tensors, cfg, arch, str(Path(folder) / SAFETENSORS))
    return mapping, {name: t.float() for name, t in state.items()}


def _model_config(mapping: dict[str, Any]):
    from glassroom.config import build_section
    from glassroom.model.config import ModelConfig

    return build_section(ModelConfig, mapping, "model")


def build_from_state(cfg, state: dict[str, torch.Tensor], where: str):
    """A Transformer for `cfg` holding exactly `state` (fp32, CPU); shapes are checked by name."""
    from glassroom.model.transformer import Transformer

    model = Transformer(cfg)
    copy_state(model, state, where)
    return model.eval()


def copy_state(model, state: dict[str, torch.Tensor], where: str) -> None:
    """Copy `state` into `model`'s parameters and router biases; a wrong shape is one line."""
    own = model.state_dict()
    for name, target in own.items():
        if name not in state:
            raise GlassroomError(f"{where}: lacks {name}; the weights do not match the model")
        if tuple(state[name].shape) != tuple(target.shape):
            raise GlassroomError(f"{where}: {name} has shape {tuple(state[name].shape)}, the model needs "
                                 f"{tuple(target.shape)}; the weights do not match config.json")
    with torch.no_grad():
        for name, target in own.items():
            target.copy_(state[name])


# ------------------------------------------------------------------------------- run folders


@dataclass
class RunFolder:
    run_dir: Path
    config: dict[str, Any]  # the run's resolved config (config.yaml)
    step: int
    checkpoint: Path

    @property
    def model_cfg(self):
        return _model_config(self.config["model"])


def read_run(run_dir: Path, step: Optional[int] = None, warn=None) -> RunFolder:
    """The run's config and its checkpoint at `step` (newest intact without), verified."""
    from glassroom.train import checkpoint as ckpt
    from glassroom.train.run_dir import saved_config

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise GlassroomError(f"{run_dir}: no such run folder")
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


def run_state(run: RunFolder) -> dict[str, torch.Tensor]:
    """The checkpoint's model state (router biases included), fp32 on CPU; no process group needed."""
    import torch.distributed.checkpoint as dcp

    from glassroom.model.transformer import Transformer

    with torch.device("meta"):  # no initialisation to pay for: the checkpoint fills every entry
        model = Transformer(run.model_cfg)
    target = {"model": model.to_empty(device="cpu").state_dict()}
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore")
            dcp.load(target, checkpoint_id=str(run.checkpoint))
    except Exception as exc:  # noqa: BLE001 - DCP wraps any reader failure
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise GlassroomError(f"{run.checkpoint}: does not fit the run's model or cannot be read ({first[:160]})") from None
    return {name: t.float() for name, t in target["model"].items()}


def run_tokenizer_path(run: RunFolder) -> Path:
    data = run.config.get("data") or {}
    path = Path(str(data.get("path", ""))) / "tokenizer.json"
    if not path.is_file():
        raise GlassroomError(f"{path}: no such file; the run's dataset (data.path in {run.run_dir}/config.yaml) "
                             "holds its tokenizer: build or copy it there")
    return path


# ------------------------------------------------------------------------------- load()


def _tokenizer(path: Path):
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception
        raise GlassroomError(f"{path}: not a valid tokenizer.json ({str(exc)[:120]})") from None
    tok.encode_special_tokens = True
    return tok


def load(path: str | Path, step: Optional[int] = None):
    """(model, tokenizer) for a run folder (its newest intact checkpoint, or `step`) or a Hugging Face
    folder: a glassroom Transformer in eval mode on CPU in fp32, and a tokenizers.Tokenizer."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise GlassroomError(f"{path}: no such folder (a run folder or a Hugging Face folder)")
    if is_hf_folder(path) and not (path / "config.yaml").is_file():
        if step is not None:
            raise GlassroomError(f"{path}: a Hugging Face folder has one set of weights; step applies to run folders")
        mapping, state = read_hf_folder(path)
        tok_path = path / "tokenizer.json"
        if not tok_path.is_file():
            raise GlassroomError(f"{tok_path}: no such file; the folder's tokenizer is missing")
        return build_from_state(_model_config(mapping), state, str(path)), _tokenizer(tok_path)
    run = read_run(path, step)
    model = build_from_state(run.model_cfg, run_state(run), str(run.checkpoint))
    return model, _tokenizer(run_tokenizer_path(run))
