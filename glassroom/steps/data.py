"""The data build and export step kinds: adapters that make a layer's function a pipeline step.

A step kind is a small function that returns a Step: it validates its config when the experiment
loads (so a bad recipe is a one-line error before anything runs) and names a top-level function
that calls the layer with the step's output folder. A training step would take the same few
lines:

    def train_step(name, config, data: Step, *, gpus=1, deps=()) -> Step:
        cfg = build_section(TrainConfig, config, "train")        # fail early, in the experiment
        return Step(name, run_training, {"train": cfg, "data": data / "dataset"}, kind="runs",
                    resources=Resources(cpus=8, gpus=gpus, procs=max(gpus, 1)), deps=deps)

    def run_training(ctx):                                       # in the step's process (torchrun
        train(ctx.config["train"], data=ctx.config["data"],     #  when procs > 1: every rank)
              out=ctx.output / "run", resume=True)              # resumes after an interruption

data_build_step: `glassroom data build` as a step; the dataset lands in `<output>/dataset`.
export_step: `glassroom export` of a run as a step; the Hugging Face folder lands in `<output>/model`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from glassroom.data.recipe import Recipe, load_recipe
from glassroom.pipeline.context import StepContext
from glassroom.pipeline.step import Resources, Step


def data_build_step(name: str, recipe, *overrides: str, cpus: float = 2, deps: tuple = (),
                    description: str = "", tasks: dict | None = None) -> Step:
    """A step that builds the dataset of `recipe` (a YAML path, relative to the calling file, or a
    Recipe) with `key.path=value` overrides; the resolved recipe is its config, so editing the
    recipe file reruns the build and everything trained on it. `tasks`: also write the downstream
    tasks into the dataset (`glassroom data tasks`; keys seq_len, windows, items, choices, seed)."""
    if not isinstance(recipe, Recipe):
        path = Path(recipe)
        caller = sys._getframe(1).f_globals.get("__file__")
        if not path.is_absolute() and caller and not path.exists():
            path = Path(caller).resolve().parent / path
        recipe = load_recipe(path, list(overrides))
    elif overrides:
        raise ValueError("overrides apply to a recipe file; change a Recipe with dataclasses.replace")
    config = {"recipe": recipe, **({"tasks": dict(tasks)} if tasks else {})}  # no key: versions stay as they were
    return Step(name, build_data, config, kind="data", resources=Resources(cpus=cpus), deps=deps,
                description=description or f"glassroom data build ({recipe.name})")


def export_step(name: str, run: Step, dtype: str = "fp32", deps: tuple = ()) -> Step:
    """`glassroom export` of a training step's run (its newest checkpoint) as a step: the Hugging Face
    folder lands in `<output>/model`, and the run records the export (its page shows the card)."""
    return Step(name, export_model, {"run": run.output(), "dtype": dtype}, kind="models", deps=deps,
                description=f"glassroom export {run.name}")


def export_model(ctx: StepContext) -> dict:
    from glassroom.train.run_folder import export_run  # lazy: numpy, torch load only when this runs

    folder = export_run(ctx.config["run"], ctx.output / "model", dtype=ctx.config["dtype"], force=True)
    config = json.loads((folder / "config.json").read_text())
    return {"model": str(folder), "architecture": (config.get("architectures") or [None])[0]}


class LogLines:
    """A text stream for the data layer's log: passes lines on to stderr (log.txt) and shows the
    latest one as the step's progress in `glassroom run`."""

    def __init__(self, ctx: StepContext):
        self.ctx, self.buffer = ctx, ""

    def write(self, text: str) -> int:
        sys.stderr.write(text)
        self.buffer += text
        *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            if line.strip():
                self.ctx.note(line.strip(), every=0)
        return len(text)

    def flush(self) -> None:
        sys.stderr.flush()


def build_into(ctx: StepContext, recipe) -> dict:
    """Build `recipe` into `<output>/dataset` (replacing what an interrupted attempt left); the manifest."""
    import shutil

    from glassroom.data.build import build_dataset  # lazy: numpy loads only when this runs

    for stale in ctx.output.glob(".dataset.building-*"):  # left by an interrupted attempt
        shutil.rmtree(stale, ignore_errors=True)
    shutil.rmtree(ctx.output / "dataset" / "tasks", ignore_errors=True)  # derived from the dataset rebuilt below
    return build_dataset(recipe, ctx.output / "dataset", force=True, workers=max(1, int(ctx.cpus)),
                         log=LogLines(ctx), progress_interval=5.0)


def build_data(ctx: StepContext) -> dict:
    manifest = build_into(ctx, ctx.config["recipe"])
    if ctx.config.get("tasks"):
        from glassroom.data.tasks import write_tasks  # lazy: numpy loads only when this runs

        ctx.note("writing the downstream tasks", every=0)
        write_tasks(ctx.output / "dataset", **ctx.config["tasks"])
    totals = manifest.get("totals", {})
    return {"dataset": str(ctx.output / "dataset"), "name": manifest.get("name"),
            "vocab_size": manifest.get("tokenizer", {}).get("vocab_size"),
            **{f"{split}_tokens": t.get("tokens") for split, t in totals.items()}}
