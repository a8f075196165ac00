"""`init: {from: DIR, step: N}`: a run that starts from a Hugging Face folder or another run's checkpoint.

`model_for_init(init, given)` is the model section: the folder's (its config.json, or the run's
config.yaml) with the keys the run config's own `model:` sets, which must agree with the folder's
on everything that shapes the model (training knobs such as moe.bias_update_rate may differ), except
vocab_size, which may be larger: `grow_vocab` raises it to the data's tokenizer when that tokenizer is
the base's with chat-template tokens appended. `check_tokenizer(init, data_path)` refuses data
tokenized with another tokenizer: the data's must have every base id with the same token and the
same merges, and any extra ids must be template tokens (glassroom.data.chat). At step 0 only (the
trainer's calls), `check_init_weights(init)` checks the checkpoint or the weights' shapes before the
model is built and `load_init_weights(model, init, cfg, data_path)` copies the weights (router biases
too) into it; rows of the embedding (and of an untied head) for ids the base tokenizer lacks are set
to the mean of the base's rows. `lineage(init)` is what a post-trained run records of its base.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

from glassroom.config import build_section
from glassroom.errors import ConfigError, GlassroomError
from glassroom.model.config import ModelConfig
from glassroom.observe.run_folder import has_config
from glassroom.train.run_dir import RUN_TOKENIZER, saved_config

# Settings of the model: section that only steer training; an init's folder does not fix them.
TRAINING_KNOBS = ("moe.bias_update_rate", "moe.aux_loss_coef", "moe.z_loss_coef", "moe.capacity_factor")
# Tokens a chat dataset may append to the base's tokenizer (the contract of glassroom/data/chat.py).
TEMPLATE_TOKENS = ("<|im_start|>", "<|im_end|>")


def _kind(folder: Path) -> str:
    if has_config(folder):
        return "run"
    if (folder / "config.json").is_file():
        return "hf"
    if folder.is_file():
        raise ConfigError(f"init.from: {folder} is a file; give the folder (a run folder or a Hugging Face folder)")
    if not folder.is_dir():
        raise ConfigError(f"init.from: {folder}: no such folder")
    raise ConfigError(f"init.from: {folder}: neither a Hugging Face folder (config.json) nor a run folder (config.yaml)")


def folder_model(init) -> dict[str, Any]:
    """The model: mapping of the init folder."""
    from glassroom.hf.load import model_section  # lazy: torch loads only when this runs

    folder = Path(init.source).expanduser()
    if _kind(folder) == "hf":
        if init.step is not None:
            raise ConfigError(f"init.step: {folder} is a Hugging Face folder with one set of weights; "
                              "step applies to run folders")
        return model_section(folder, weights=False)  # the weights: check_init_weights, at step 0
    model = saved_config(folder).get("model")
    if not isinstance(model, dict):
        raise ConfigError(f"init.from: {folder}/config.yaml has no model: section")
    return model


def _check_step(run_dir: Path, step: Optional[int]) -> None:
    """The run has a checkpoint (at `step` when given): refused before the new run starts."""
    from glassroom.train.checkpoint import list_checkpoints  # lazy: torch loads only when this runs

    steps = [s for s, _ in list_checkpoints(run_dir)]
    if not steps:
        raise ConfigError(f"init.from: {run_dir} has no checkpoint yet; train it until its first checkpoint "
                          "(train.checkpoint_every)")
    if step is not None and step not in steps:
        raise ConfigError(f"init.step: {run_dir} has no checkpoint at step {step} (checkpoints: "
                          f"{', '.join(map(str, steps))}); choose one of them, or leave init.step out for the newest")


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else key))
    return out


def _overlay(base: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`base` with the keys `given` sets replaced (mappings merged key by key)."""
    out = dict(base)
    for key, value in given.items():
        out[key] = _overlay(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def model_for_init(init, given: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The run's model: mapping: the folder's, with the keys the run config sets; a key set to
    another value than the folder's (training knobs aside) is one line naming it."""
    if _gone(init) and isinstance(given, dict):
        try:  # a resumed run's saved config has the whole model: section; it needs nothing from the folder
            build_section(ModelConfig, given, "model")
            return given
        except GlassroomError:
            pass  # not a whole model: section: the folder is needed, and its absence is the error
    derived = folder_model(init)
    if given is None:
        return derived
    if not isinstance(given, dict):
        raise ConfigError("model: expected a mapping of keys (or leave it out to take the init folder's)")
    merged = _overlay(derived, given)
    theirs = _flat(dataclasses.asdict(build_section(ModelConfig, derived, "model")))
    ours = _flat(dataclasses.asdict(build_section(ModelConfig, merged, "model")))
    for key in sorted(set(theirs) | set(ours)):
        if key.endswith(TRAINING_KNOBS) or theirs.get(key) == ours.get(key):
            continue
        if key == "vocab_size" and ours[key] > theirs[key]:
            continue  # more rows than the base: ids the base lacks (template tokens), mean-initialised
        if key.startswith("moe.") and (theirs.get("moe") is None or ours.get("moe") is None):
            key = "moe"
        raise ConfigError(f"model.{key}: {ours.get(key)!r} here, {theirs.get(key)!r} in {init.source} (init.from); "
                          "remove it to take the folder's, or make them agree")
    return merged


def _tokenizer_file(init) -> Path:
    folder = Path(init.source).expanduser()
    if _kind(folder) == "hf":
        return folder / "tokenizer.json"
    if (folder / RUN_TOKENIZER).is_file():  # the copy the run made at its start
        return folder / RUN_TOKENIZER
    return Path(str((saved_config(folder).get("data") or {}).get("path", ""))) / "tokenizer.json"


def _vocab_and_merges(path: Path, key: str = "init.from") -> tuple[dict[int, str], Any]:
    """({id: token} of the vocabulary and the added tokens, the merges) of a tokenizer.json."""
    try:
        tok = json.loads(path.read_text(encoding="utf-8"))
        model = tok["model"]
        ids = {int(i): str(t) for t, i in (model.get("vocab") or {}).items()}
        ids.update({int(t["id"]): str(t["content"]) for t in tok.get("added_tokens", [])})
        return ids, model.get("merges")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"{key}: {path}: not a readable tokenizer.json") from None


def same_tokenizer(a: Path, b: Path) -> bool:
    """Two tokenizer.json files have the same ids, tokens and merges."""
    return _vocab_and_merges(a, "tokenizer") == _vocab_and_merges(b, "data.path")


def base_vocab_size(init) -> int:
    """Ids the base's tokenizer has (max id + 1)."""
    ids, _ = _vocab_and_merges(_tokenizer_file(init))
    return max(ids) + 1 if ids else 0


def grow_vocab(model: dict[str, Any], data: Any) -> dict[str, Any]:
    """The model: mapping with vocab_size raised to the data's tokenizer (manifest.json) when bigger."""
    path = Path(str(data.get("path", ""))).expanduser() if isinstance(data, dict) else None
    try:
        vocab = int(json.loads((path / "manifest.json").read_text(encoding="utf-8"))["tokenizer"]["vocab_size"])
    except (OSError, TypeError, ValueError, KeyError, AttributeError):
        return model  # no dataset yet (or a damaged one): the dataset checks say so
    if isinstance(model, dict) and isinstance(model.get("vocab_size"), int) and model["vocab_size"] < vocab:
        return {**model, "vocab_size": vocab}
    return model


def resume_model(raw: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """A config resumed in run_dir whose init folder is gone: the model: section run_dir saved at its
    start (with the keys the config's own model: section sets), which needs nothing from the folder
    (the weights are in run_dir's checkpoints)."""
    init = raw.get("init") if isinstance(raw, dict) else None
    given = raw.get("model") if isinstance(raw, dict) else None
    if not isinstance(init, dict) or not isinstance(given, (dict, type(None))):
        return raw
    if Path(str(init.get("from", ""))).expanduser().exists():
        return raw
    try:
        model = saved_config(run_dir).get("model")
    except GlassroomError:
        return raw
    return {**raw, "model": _overlay(model, given or {})} if isinstance(model, dict) else raw


def _gone(init) -> bool:
    """The init folder no longer exists: a new run is refused at start-up (check_init_weights), a
    resumed one continues from its own checkpoint without it."""
    return not Path(init.source).expanduser().exists()


def check_tokenizer(init, data_path: str) -> None:
    """The dataset's tokenizer.json has the init folder's vocabulary and merges (a dataset not built
    yet is left to the dataset checks; an init folder gone, to start-up)."""
    if _gone(init):
        return
    theirs = _tokenizer_file(init)
    ours = Path(data_path).expanduser() / "tokenizer.json"
    if not ours.is_file():
        return
    if not theirs.is_file():
        raise ConfigError(f"init.from: {theirs}: no such file; the model's tokenizer must come with it")
    (base, base_merges), (data, data_merges) = _vocab_and_merges(theirs), _vocab_and_merges(ours, "data.path")
    extra = sorted(set(data) - set(base))
    same = base_merges == data_merges and all(data.get(i) == t for i, t in base.items())
    if not same or any(data[i] not in TEMPLATE_TOKENS for i in extra) or (extra and extra[0] < max(base) + 1):
        raise ConfigError(f"data.path: {ours} is not the tokenizer of {init.source} (init.from): build the data "
                          f"with `tokenizer: {{path: {theirs}}}` in its recipe (glassroom data build)")


def check_init_weights(init) -> None:
    """Before the model is built at step 0: the run folder has the checkpoint (init.step), or the
    Hugging Face folder's weights fit its config.json (their headers only: a config.json that claims
    10**9 layers is one line, not an allocation). Not at config time: a resumed run needs neither."""
    from glassroom.hf.load import check_weights, model_section  # lazy: torch loads only when this runs

    folder = Path(init.source).expanduser()
    if _kind(folder) == "run":
        _check_step(folder, init.step)
        return
    try:
        check_weights(folder, build_section(ModelConfig, model_section(folder, weights=False), "model"))
    except GlassroomError as exc:
        raise GlassroomError(f"init.from: {exc}") from None


def load_init_weights(model, init, cfg, data_path: Optional[str] = None) -> dict[str, Any]:
    """Copy the init folder's weights (router biases included) into `model` (built for `cfg`); with
    more vocabulary rows than the base, the rows for ids its tokenizer lacks get the mean of its
    rows (ids the data's tokenizer has: `data_path`). Returns the lineage (see `lineage`)."""
    import torch  # lazy: torch loads only when this runs

    from glassroom.hf.load import copy_state, read_hf_folder  # lazy: torch loads only when this runs
    from glassroom.train.run_folder import read_run_state

    folder = Path(init.source).expanduser()
    base_step = None
    try:
        if _kind(folder) == "hf":
            _, state = read_hf_folder(folder)
            where = str(folder)
        else:
            run, state, _ = read_run_state(folder, init.step)  # the run may be training now
            where, base_step = str(run.checkpoint), run.step
        rows = {name: t.shape[0] for name, t in state.items() if name in ("embed.weight", "head.weight")}
        own = model.state_dict()
        for name, n in rows.items():  # grown vocabulary: the base's rows first, the rest set below
            if name in own and own[name].shape[0] > n and own[name].shape[1:] == state[name].shape[1:]:
                state = {**state, name: torch.cat([state[name], own[name][n:].to(state[name].dtype)])}
        copy_state(model, state, where)
    except GlassroomError as exc:
        raise GlassroomError(f"init.from: {exc}") from None
    if data_path is not None:
        have = min(base_vocab_size(init), min(rows.values()) if rows else 0)
        wanted = int(json.loads((Path(data_path) / "manifest.json").read_text())["tokenizer"]["vocab_size"])
        with torch.no_grad():
            for name in rows:
                weight = own[name]
                if have < wanted <= weight.shape[0]:
                    weight[have:wanted] = weight[:have].float().mean(0).to(weight.dtype)
    return {"base": init.source, "base_step": base_step, "base_kind": _kind(folder)}
