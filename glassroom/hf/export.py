"""Writing a Hugging Face folder: config.json, model.safetensors (sharded with an index above a size),
tokenizer files, generation_config.json, the model card and a marker that says glassroom wrote it.

`write_folder` writes any glassroom model section + state dict (glassroom/train/run_folder.py's
`export_run` exports a run's checkpoint with it). The folder is written into
a temporary folder beside `out` and renamed into place: it is complete or absent. `out` must not
exist, be empty, or (with `force`) be an earlier glassroom export, which is replaced: only when
every file in it is listed, unchanged, in its ownership manifest (glassroom.folders.OWNED).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from glassroom.config import build_section
from glassroom.data.chat import IM_END, IM_START, JINJA
from glassroom.data.tokenizer import load_tokenizer
from glassroom.errors import GlassroomError
from glassroom.folders import check_owned, swap_into_place, write_owned
from glassroom.hf.architectures import CLASSES, choose, hf_config
from glassroom.hf.tensors import to_hf
from glassroom.model.config import ModelConfig

MARKER = "glassroom-export.json"
COMMAND = "export"   # its name in the ownership manifest
DTYPES = {"fp32": (torch.float32, "float32"), "bf16": (torch.bfloat16, "bfloat16")}
DEFAULT_SHARD = 2 * 10**9
EOS = "<|endoftext|>"


def parse_size(text: str | int) -> int:
    """Bytes from `2GB`, `500MB`, `10KB` or a plain number of bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise GlassroomError(f"--max-shard-size {text!r}: expected a size such as 2GB, 500MB or 1000000")
    units = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
    size = int(float(match.group(1)) * units[(match.group(2) or "b").lower()])
    if size < 1:
        raise GlassroomError(f"--max-shard-size {text!r}: must be at least one byte")
    return size


def check_out(out: Path, force: bool, inside: Optional[Path] = None) -> None:
    """Refuse an --out that would destroy something: a file, a folder inside `inside` (the run
    folder), a non-empty folder without --force, or one holding anything that its ownership manifest
    (glassroom.folders.OWNED) does not list as written by an export and unchanged since."""
    out = Path(out)
    if inside is not None and out.resolve().is_relative_to(Path(inside).resolve()):
        raise GlassroomError(f"--out {out}: is inside the run folder {inside}; export to a folder outside it")
    if out.is_symlink():  # replacing it would write into (or over) the folder it points to
        raise GlassroomError(f"--out {out}: is a symbolic link; give the folder itself, or a new path")
    if check_owned(out, COMMAND) is not None and not force:
        raise GlassroomError(f"--out {out}: holds an earlier export; add --force to replace it, or choose a new folder")


def _shards(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    return shards


def _write_weights(folder: Path, tensors: dict[str, torch.Tensor], max_bytes: int) -> list[str]:
    from safetensors.torch import save_file

    shards = _shards(tensors, max_bytes)
    if len(shards) == 1:
        save_file(shards[0], str(folder / "model.safetensors"), metadata={"format": "pt"})
        return ["model.safetensors"]
    names, weight_map = [], {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / name), metadata={"format": "pt"})
        names.append(name)
        weight_map.update({tensor: name for tensor in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return names + ["model.safetensors.index.json"]


def _dump(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n")


def write_folder(out: Path, model: dict[str, Any], state: dict[str, torch.Tensor], tokenizer: Path,
                 dtype: str = "fp32", max_shard_size: int = DEFAULT_SHARD, card: Callable[[str], str] | None = None,
                 force: bool = False, provenance: Optional[dict] = None) -> Path:
    """Export `model` (a model: mapping) with weights `state` (glassroom names) to `out`, atomically.
    `card(arch_class)` returns README.md's text. Returns `out`."""
    out = Path(out)
    if dtype not in DTYPES:
        raise GlassroomError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    check_out(out, force)
    cfg = build_section(ModelConfig, model, "model")
    biases_zero = all(not t.any() for name, t in state.items() if name.endswith("router_bias"))
    arch = choose(cfg, router_bias_zero=biases_zero)
    tok = load_tokenizer(tokenizer)
    eos = tok.token_to_id(EOS)
    if tok.get_vocab_size() > cfg.vocab_size:
        raise GlassroomError(f"{tokenizer}: {tok.get_vocab_size()} tokens, more than model.vocab_size ({cfg.vocab_size})")
    torch_dtype, dtype_name = DTYPES[dtype]
    tensors = {name: t.detach().to("cpu", torch_dtype) for name, t in to_hf(state, cfg, arch).items()}

    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as exc:
        raise GlassroomError(f"--out {out}: cannot create a folder beside it ({exc.strerror or exc}); choose another path") from None
    try:
        files = _write_weights(tmp, tensors, max_shard_size)
        _dump(tmp / "config.json", hf_config(cfg, arch, eos, dtype_name))
        shutil.copyfile(tokenizer, tmp / "tokenizer.json")
        _dump(tmp / "tokenizer_config.json", {
            "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "pad_token": EOS, "bos_token": None,
            "unk_token": None, "add_bos_token": False, "add_eos_token": False,
            "model_max_length": cfg.max_seq_len, "clean_up_tokenization_spaces": False, **_chat_template(tok)})
        _dump(tmp / "special_tokens_map.json", {"eos_token": EOS, "pad_token": EOS})
        _dump(tmp / "generation_config.json", {"eos_token_id": eos, "pad_token_id": eos, "bos_token_id": None,
                                               "max_length": cfg.max_seq_len})
        if card is not None:
            (tmp / "README.md").write_text(card(CLASSES[arch]))
        _dump(tmp / MARKER, {"format": 1, "architecture": CLASSES[arch], "dtype": dtype_name,
                             "weights": files, **(provenance or {})})
        write_owned(tmp, COMMAND)   # last: every file above, so --force later replaces only these
        _replace(tmp, out, force)
    except OSError as exc:  # disk full, permissions: nothing half-written is left at --out
        shutil.rmtree(tmp, ignore_errors=True)
        raise GlassroomError(f"--out {out}: writing failed ({exc.strerror or exc}); nothing was written there") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _chat_template(tok) -> dict:
    """tokenizer_config.json's `chat_template` when the tokenizer carries the chat template's tokens
    (a conversation dataset added them: glassroom/data/chat.py), so apply_chat_template renders alike."""
    has = all(tok.token_to_id(t) is not None for t in (IM_START, IM_END))
    return {"chat_template": JINJA} if has else {}


def _replace(tmp: Path, out: Path, force: bool) -> None:
    """Rename `tmp` to `out`; an existing `out` (empty, or an export with --force) goes only after,
    checked again: files put at `out` while the export was written are never deleted."""
    if out.exists() or out.is_symlink():
        check_out(out, force)
    swap_into_place(tmp, out)
