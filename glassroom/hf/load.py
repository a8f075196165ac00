"""Reading Hugging Face folders (config.json, model.safetensors) into glassroom's model section and
state dict.

`read_hf_folder(dir)` -> (model section mapping, glassroom state dict), its weights first checked
against config.json from the safetensors headers (`check_weights`); `build_from_state(cfg, state)` a Transformer in eval mode on CPU in fp32;
`read_tokenizer(path)` a tokenizers.Tokenizer. Run folders are read by glassroom/train/run_folder.py
(`glassroom.load` takes either). Every problem with the files is one GlassroomError naming the file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from glassroom.config import build_section
from glassroom.errors import GlassroomError
from glassroom.numbers import loads as json_loads
from glassroom.hf.architectures import model_config
from glassroom.hf.tensors import from_hf
from glassroom.memory import available_memory
from glassroom.model.config import ModelConfig
from glassroom.model.transformer import Transformer

SAFETENSORS = "model.safetensors"
INDEX = "model.safetensors.index.json"


def is_hf_folder(path: Path) -> bool:
    return (Path(path) / "config.json").is_file()


def read_hf_config(folder: Path) -> dict[str, Any]:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise GlassroomError(f"{path}: no such file; a Hugging Face folder needs config.json")
    try:
        hf = json_loads(path.read_text(encoding="utf-8"))   # a 5,000-digit number or NaN: refused, not a traceback
    except (UnicodeDecodeError, ValueError) as exc:
        raise GlassroomError(f"{path}: not JSON ({str(exc)[:80]}); export the model again or fix the file") from None
    except RecursionError:  # json nests without a limit of its own: [[[[... 10,000 deep
        raise GlassroomError(f"{path}: nested too deep to be a config; export the model again or fix the file") from None
    if not isinstance(hf, dict):
        raise GlassroomError(f"{path}: not a JSON object of settings")
    return hf


def model_section(folder: Path, weights: bool = True) -> dict[str, Any]:
    """The `model:` mapping a Hugging Face folder's config.json describes (validated; with `weights`,
    also against the shapes in the weights' headers: check_weights)."""
    where = str(Path(folder) / "config.json")
    try:
        mapping = model_config(read_hf_config(folder), where)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GlassroomError(f"{where}: a setting is missing or of the wrong type ({type(exc).__name__}: {str(exc)[:80]})") from None
    try:
        cfg = build_section(ModelConfig, mapping, "model")
    except GlassroomError as exc:
        raise GlassroomError(f"{where}: describes a model glassroom cannot build ({exc})") from None
    if weights:
        check_weights(folder, cfg)
    return mapping


def _header_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's weights as an empty meta tensor of its shape and dtype, read from
    the safetensors headers alone (no tensor data is read)."""
    from safetensors import SafetensorError, safe_open

    out: dict[str, torch.Tensor] = {}
    for path in _weight_files(Path(folder)):
        if not path.is_file():
            raise GlassroomError(f"{path}: no such file; the folder's weights are missing")
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    part = f.get_slice(name)
                    dtype = getattr(torch, _ST_DTYPES.get(part.get_dtype(), "uint8"))
                    out[name] = torch.empty(part.get_shape(), dtype=dtype, device="meta")
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise _damaged(path, exc) from None
    return out


_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
              "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def check_weights(folder: Path, cfg) -> None:
    """The folder's weights (their safetensors headers) have every tensor `cfg` needs, of its shape
    and of a floating type: checked before a model of `cfg` is built, so a config.json claiming
    10**9 layers or a vocabulary of 10**12 is one line, not an allocation."""
    import re

    where = str(Path(folder) / "config.json")
    tensors = _header_tensors(folder)
    layers = {int(m.group(1)) for m in map(re.compile(r"model\.layers\.(\d+)\.").match, tensors) if m}
    if cfg.n_layers > len(layers) or any(i not in layers for i in range(cfg.n_layers)):
        raise GlassroomError(f"{where}: num_hidden_layers is {cfg.n_layers}, the weights have {len(layers)} layers; "
                             "config.json and the weights do not match")
    for name, t in tensors.items():
        if not t.dtype.is_floating_point:
            raise GlassroomError(f"{where}: the tensor {name} is {t.dtype}, not a floating type; "
                                 "glassroom reads fp32, bf16 or fp16 weights")
    state = from_hf(tensors, cfg, read_hf_config(folder)["model_type"], where)
    with torch.device("meta"):
        check_shapes(Transformer(cfg).state_dict(), state, where)
    # The weights' size is what is on disk; the RoPE tables' (float64 while made) is config.json's alone.
    rope = cfg.max_seq_len * cfg.dim_per_head * 12
    free = available_memory(torch.device("cpu"))
    if free is not None and rope > free:
        raise GlassroomError(f"{where}: max_position_embeddings {cfg.max_seq_len}: its RoPE tables need "
                             f"{rope / 1e9:,.1f} GB, more than the {free / 1e9:,.1f} GB of memory available")


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise GlassroomError(f"{path}: no such file; the folder's weights are missing")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise _damaged(path, exc) from None


def _damaged(path: Path, exc: Exception) -> GlassroomError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return GlassroomError(f"{path}: not a readable safetensors file ({first[:120]}); it is damaged: "
                          "copy or export it again")


def _weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or the shards model.safetensors.index.json names (inside the folder)."""
    index = folder / INDEX
    if not index.is_file():
        return [folder / SAFETENSORS]
    try:
        weight_map = json_loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = sorted(set(weight_map.values()))
        if any("/" in f or "\\" in f or f.startswith(".") for f in files):
            raise ValueError
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise GlassroomError(f"{index}: not a readable shard index (weight_map of tensor -> file)") from None
    return [folder / name for name in files]


def read_hf_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of model.safetensors, or of the shards model.safetensors.index.json names."""
    tensors: dict[str, torch.Tensor] = {}
    for path in _weight_files(Path(folder)):
        tensors.update(_read_safetensors(path))
    return tensors


def read_hf_folder(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(model mapping, glassroom state dict in fp32) of a Hugging Face folder."""
    mapping = model_section(folder)
    cfg = model_config_of(mapping)
    arch = read_hf_config(folder)["model_type"]
    tensors = read_hf_tensors(folder)
    head, embed = tensors.get("lm_head.weight"), tensors.get("model.embed_tokens.weight")
    if cfg.tie_embeddings and head is not None and embed is not None and not torch.equal(head, embed):
        # transformers then keeps them apart (it does not tie): glassroom would compute another model
        raise GlassroomError(f"{Path(folder) / 'config.json'}: tie_word_embeddings is true but the weights hold an "
                             "lm_head.weight unlike embed_tokens; set tie_word_embeddings to false in config.json")
    state = from_hf(tensors, cfg, arch, str(Path(folder) / SAFETENSORS))
    return mapping, {name: t.float() for name, t in state.items()}


def model_config_of(mapping: dict[str, Any]):
    return build_section(ModelConfig, mapping, "model")


def build_from_state(cfg, state: dict[str, torch.Tensor], where: str):
    """A Transformer for `cfg` holding exactly `state` (fp32, CPU); shapes are checked by name."""
    model = Transformer(cfg)
    copy_state(model, state, where)
    return model.eval()


def check_shapes(own: dict[str, torch.Tensor], state: dict[str, torch.Tensor], where: str) -> None:
    """Every entry of a model's state dict `own` is in `state`, of its shape; else one line."""
    for name, target in own.items():
        if name not in state:
            raise GlassroomError(f"{where}: lacks {name}; the weights do not match the model")
        if tuple(state[name].shape) != tuple(target.shape):
            raise GlassroomError(f"{where}: {name} has shape {tuple(state[name].shape)}, the model needs "
                                 f"{tuple(target.shape)}; the weights do not match config.json")


def copy_state(model, state: dict[str, torch.Tensor], where: str) -> None:
    """Copy `state` into `model`'s parameters and router biases; a wrong shape is one line."""
    own = model.state_dict()
    check_shapes(own, state, where)
    with torch.no_grad():
        for name, target in own.items():
            target.copy_(state[name])


def read_tokenizer(path: Path):
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception
        raise GlassroomError(f"{path}: not a valid tokenizer.json ({str(exc)[:120]})") from None
    tok.encode_special_tokens = True
    return tok
