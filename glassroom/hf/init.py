"""`init: {from: DIR, step: N}`: a run that starts from a Hugging Face folder or another run's checkpoint.

`model_for_init(init, given)` is the model section: the folder's (its config.json, or the run's
config.yaml) with the keys the run config's own `model:` sets, which must agree with the folder's
on everything that shapes the model (training knobs such as moe.bias_update_rate may differ). `check_tokenizer(init, data_path)`
refuses data tokenized with another tokenizer. At step 0 only (the trainer's calls),
`check_init_weights(init)` checks the checkpoint or the weights' shapes before the model is built and
`load_init_weights(model, init, cfg)` copies the weights (router biases too) into it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

from glassroom.errors import ConfigError, GlassroomError

# Settings of the model: section that only steer training; an init's folder does not fix them.
TRAINING_KNOBS = ("moe.bias_update_rate", "moe.aux_loss_coef", "moe.z_loss_coef")


def _kind(folder: Path) -> str:
    if (folder / "config.yaml").is_file():
        return "run"
    if (folder / "config.json").is_file():
        return "hf"
    if not folder.is_dir():
        raise ConfigError(f"init.from: {folder}: no such folder")
    raise ConfigError(f"init.from: {folder}: neither a Hugging Face folder (config.json) nor a run folder (config.yaml)")


def folder_model(init) -> dict[str, Any]:
    """The model: mapping of the init folder."""
    from glassroom.hf.load import model_section
    from glassroom.train.run_dir import saved_config

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
    from glassroom.train.checkpoint import list_checkpoints

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
    from glassroom.config import build_section
    from glassroom.model.config import ModelConfig

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
        if key.startswith("moe.") and (theirs.get("moe") is None or ours.get("moe") is None):
            key = "moe"
        raise ConfigError(f"model.{key}: {ours.get(key)!r} here, {theirs.get(key)!r} in {init.source} (init.from); "
                          "remove it to take the folder's, or make them agree")
    return merged


def _tokenizer_file(init) -> Path:
    from glassroom.train.run_dir import saved_config

    folder = Path(init.source).expanduser()
    if _kind(folder) == "hf":
        return folder / "tokenizer.json"
    return Path(str((saved_config(folder).get("data") or {}).get("path", ""))) / "tokenizer.json"


def _vocab_and_merges(path: Path) -> tuple[Any, Any, Any]:
    try:
        tok = json.loads(path.read_text(encoding="utf-8"))
        model = tok["model"]
        return model.get("vocab"), model.get("merges"), [t.get("content") for t in tok.get("added_tokens", [])]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"init.from: {path}: not a readable tokenizer.json") from None


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
    if _vocab_and_merges(theirs) != _vocab_and_merges(ours):
        raise ConfigError(f"data.path: {ours} is not the tokenizer of {init.source} (init.from): build the data "
                          f"with `tokenizer: {{path: {theirs}}}` in its recipe (glassroom data build)")


def check_init_weights(init) -> None:
    """Before the model is built at step 0: the run folder has the checkpoint (init.step), or the
    Hugging Face folder's weights fit its config.json (their headers only: a config.json that claims
    10**9 layers is one line, not an allocation). Not at config time: a resumed run needs neither."""
    from glassroom.hf.load import check_weights, model_section
    from glassroom.config import build_section
    from glassroom.model.config import ModelConfig

    folder = Path(init.source).expanduser()
    if _kind(folder) == "run":
        _check_step(folder, init.step)
        return
    try:
        check_weights(folder, build_section(ModelConfig, model_section(folder, weights=False), "model"))
    except GlassroomError as exc:
        raise GlassroomError(f"init.from: {exc}") from None


def load_init_weights(model, init, cfg) -> None:
    """Copy the init folder's weights (router biases included) into `model` (built for `cfg`)."""
    from glassroom.hf.load import copy_state, read_hf_folder, read_run_state

    folder = Path(init.source).expanduser()
    try:
        if _kind(folder) == "hf":
            _, state = read_hf_folder(folder)
            where = str(folder)
        else:
            run, state, _ = read_run_state(folder, init.step)  # the run may be training now
            where = str(run.checkpoint)
        copy_state(model, state, where)
    except GlassroomError as exc:
        raise GlassroomError(f"init.from: {exc}") from None
