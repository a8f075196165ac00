"""Post-training as pipeline steps: a chat set made from text on the machine, its SFT or DPO dataset
built with a base run's tokenizer, and a fine-tuning run that starts from the base run.

    chat = chatset_step("chatset", max_per_source=1500)
    sft_data = chat_data_step("chat-sft-data", chat, "sft", tokenizer=hero / "tokenizer.json")
    sft = finetune_step("hero-sft", {"train": {"task": "sft", ...}}, sft_data, base=hero)

The fine-tuning run's config is an ordinary run config (docs/post-training.md) without data.path
and init.from, which the step fills in: `init: {from: <base run>}` (its newest checkpoint) and the
dataset of `data` (a config that sets either is refused at load). Each step is cached like any other (glassroom run): editing the config reruns the
run and what follows it. `glassroom demo` ends with these steps (glassroom/demo.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from glassroom.data.chatset import SOURCES
from glassroom.data.chatset.write import write
from glassroom.data.recipe import load_recipe
from glassroom.pipeline.context import StepContext
from glassroom.pipeline.step import Input, Resources, Step
from glassroom.steps.data import build_into

TASKS = ("sft", "dpo")


def chatset_step(name: str, *, max_per_source: int = 4000, seed: int = 0, sources: tuple = ()) -> Step:
    """`glassroom data chatset` as a step: the set lands in `<output>/set` (its sft.yaml, dpo.yaml)."""
    chosen = [sources] if isinstance(sources, str) else list(sources or SOURCES)   # "man": one source
    unknown = [n for n in chosen if n not in SOURCES]
    if unknown or len(set(chosen)) != len(chosen):
        raise ValueError(f"{name}: sources: give each of {', '.join(SOURCES)} at most once"
                         + (f" (unknown: {unknown[0]!r})" if unknown else ""))
    if isinstance(max_per_source, bool) or not isinstance(max_per_source, int) or max_per_source < 1:
        raise ValueError(f"{name}: max_per_source must be a whole number of at least 1, got {max_per_source!r}")
    return Step(name, make_chatset, {"max_per_source": int(max_per_source), "seed": int(seed), "sources": chosen},
                kind="data", description=f"glassroom data chatset ({', '.join(chosen)})")


def chat_data_step(name: str, chatset: Step, task: str, tokenizer: Input, cpus: float = 2) -> Step:
    """`glassroom data build` of the chat set's `<task>.yaml` recipe with `tokenizer` (a base run's
    tokenizer.json: the template tokens are appended to it); the dataset lands in `<output>/dataset`."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return Step(name, build_chat_data, {"set": chatset / "set", "task": task, "tokenizer": tokenizer},
                kind="data", resources=Resources(cpus=cpus), description=f"glassroom data build ({task} chat data)")


def finetune_step(name: str, config: dict[str, Any], data: Step, base: Step, cpus: float = 2) -> Step:
    """A run of `config` (task sft or dpo) on `data`'s dataset, starting from `base`'s run."""
    if not isinstance(base, Step) or not isinstance(data, Step):
        raise ValueError(f"{name}: base and data must be steps (a run step, a chat_data_step), got "
                         f"{type(base if not isinstance(base, Step) else data).__name__}; for a model folder, "
                         "train with `init: {from: DIR}` (glassroom train) instead")
    task = (config.get("train") or {}).get("task")
    if task not in TASKS:
        raise ValueError(f"{name}: train.task must be one of {TASKS}, got {task!r}")
    given = [key for key, section, inner in (("init", config, "init"), ("data.path", config.get("data"), "path"))
             if isinstance(section, dict) and inner in section]
    if given:   # filled in below: a value of the user's own would be silently replaced
        raise ValueError(f"{name}: {given[0]} is set by the step (from `base` and `data`); remove it from the config")
    config = copy.deepcopy(config)
    config.setdefault("data", {})["path"] = data / "dataset"
    config["init"] = {"from": base.output()}
    return Step(name, finetune, {"run": config}, kind="runs", resources=Resources(cpus=cpus),
                description=f"{task} from {base.name}")


def make_chatset(ctx: StepContext) -> dict:
    from glassroom.data.chatset import make  # lazy: tests patch make where it is defined; looked up at call time

    cfg = ctx.config
    ctx.note("reading man pages, docstrings and dictionaries", every=0)
    made = make(cfg["seed"], cfg["max_per_source"], cfg["sources"], Path("/usr/share/man"), Path("/usr/share/dictd"))
    info = write(ctx.output / "set", made, seed=cfg["seed"], max_per_source=cfg["max_per_source"],
                 sources=cfg["sources"], tokenizer=None, force=True)
    return {"set": str(ctx.output / "set"), **{f"{task}_{part}": n for task, parts in info["totals"].items()
                                                 for part, n in parts.items()}}


def build_chat_data(ctx: StepContext) -> dict:
    recipe = load_recipe(Path(ctx.config["set"]) / f"{ctx.config['task']}.yaml",
                         [f"tokenizer.path={ctx.config['tokenizer']}"])
    manifest = build_into(ctx, recipe)
    chat = {d: info.get("chat", {}) for d, info in manifest.get("domains", {}).items()}
    return {"dataset": str(ctx.output / "dataset"), "task": manifest.get("task"), "chat": chat}


def finetune(ctx: StepContext) -> dict:
    from glassroom.steps.ladder import train_in_step  # lazy: numpy, scipy load only when this runs

    return train_in_step(ctx, ctx.config["run"], ctx.output)
