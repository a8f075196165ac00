"""Running a ladder as pipeline steps: one cached, resumable training step per rung, a fit step that
predicts the hero, and the hero's step, which preregisters that prediction before it trains.

Step functions run in the pipeline's worker processes (glassroom/pipeline): a rung is an ordinary
training run in its step's output folder (`<workspace>/rungs/<name>-<version>`), so the dashboard
shows it like any run; an interrupted rung resumes from its checkpoints on the next attempt. The fit
step's output is a ladder folder (spec.yaml + ladder.json listing the rungs) that `glassroom ladder
fit` and `backtest` read, holding prediction.json and backtest.json.

Seeds (the spec's `seeds: K`): every seed of a rung is a step of its own, named as
spec.expand_seeds names it (seed 0 keeps the rung's name, seed k `<rung>-s<k>`); the fit step takes
all of them as inputs, so it waits for every seed.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Optional

import yaml

from glassroom.errors import GlassroomError
from glassroom.folders import replace_file
from glassroom.ladder.predict import backtest, make_prediction, preregister
from glassroom.ladder.rungs import (LISTING_FILE, NO_PREDICTION_FILE, PREDICTION_FILE, SPEC_FILE, group_sizes,
                                    load_rungs)
from glassroom.ladder.spec import expand_seeds, read_spec
from glassroom.model.accounting import Layout, memory_per_gpu
from glassroom.observe.run_folder import has_config
from glassroom.observe.store import StoreWriter
from glassroom.pipeline.context import StepContext
from glassroom.pipeline.experiment import Experiment, load_experiment
from glassroom.pipeline.provenance import run_context
from glassroom.pipeline.runner_local import LocalBackend
from glassroom.pipeline.runner_ray import RayBackend
from glassroom.pipeline.scheduler import run_graph
from glassroom.pipeline.step import Input, Resources, Step
from glassroom.train.config import run_config_from_mapping


class _Progress:
    """Trainer observer that reports the step count as the pipeline step's own progress."""

    def __init__(self, ctx: StepContext, total: int):
        self.ctx, self.total = ctx, total

    def on_step(self, trainer, step: int, metrics: dict) -> None:
        loss = metrics.get("train/loss")
        self.ctx.progress(step, self.total, unit="steps", message="" if loss is None else f"loss {loss:.3f}")

    def state(self) -> None:
        return None

    def load_state(self, state) -> None:
        pass


def train_in_step(ctx: StepContext, config: dict[str, Any], run_dir: Path) -> dict:
    """Train `config` (a RunConfig mapping) into run_dir, resuming what an earlier attempt left: in
    this process (every rank of it, under torchrun), or, on the Ray runner with Resources(workers=W),
    as W Ray Train workers on the same cluster."""
    cfg = run_config_from_mapping(config, ctx.name)
    if ctx.ray_address and ctx.workers > 1:
        from glassroom.train.ray_train import fit_workers  # lazy: ray and torch load only when this runs

        value = fit_workers(cfg, ctx.name, run_dir, has_config(run_dir), False, ctx.ray_address, ctx.workers,
                            ctx.gpus_per_worker, ctx.cpus, in_step=True)
        return {"run_dir": str(run_dir), "steps": value["step"], **value["final"]}
    from glassroom.train.session import train_run  # lazy: torch loads only when this runs

    trainer, final = train_run(cfg, run_dir, has_config(run_dir), False, ctx.name, new_folder_rules=False,
                               observers=[_Progress(ctx, cfg.train.steps)])
    return {"run_dir": str(run_dir), "steps": trainer.step, **final}


def train_rung(ctx: StepContext) -> dict:
    return train_in_step(ctx, ctx.config["run"], ctx.output)


WAY_FORWARD = ("the hero trains without a prediction; retrain the rungs that are off (more seeds: the spec's "
               "`seeds`), then `glassroom ladder fit DIR` and `glassroom ladder backtest DIR` on the ladder folder, "
               "or pass fit.allow_nonmonotone: true to fit anyway, marked unreliable")


def fit_and_predict(ctx: StepContext) -> dict:
    """Write a ladder folder over the finished rungs, fit it, predict the hero, backtest. A fit that
    fails (rungs no law can use) writes no-prediction.json with the reason instead, so that the hero
    and what follows it still run, reported as "no prediction"."""
    ctx.write_text(SPEC_FILE, yaml.safe_dump(ctx.config["spec"], sort_keys=False))
    rungs = [str(Path(p).resolve()) for p in ctx.config["rungs"]]
    ctx.write_json(LISTING_FILE, {"rungs": rungs})
    try:
        prediction = make_prediction(ctx.output, ctx.config["hero"])
    except GlassroomError as exc:
        metric = (ctx.config["spec"].get("fit") or {}).get("metric", "eval/macro/loss")
        ctx.write_json(NO_PREDICTION_FILE, {"metric": metric, "reason": str(exc), "way_forward": WAY_FORWARD})
        return {"prediction": None, "reason": str(exc), "metric": metric}
    ctx.write_json(PREDICTION_FILE, prediction)
    result = {"final_loss": prediction["final_loss"], "final_interval": prediction["final_interval"],
              "metric": prediction["metric"]}
    if len(group_sizes(load_rungs(ctx.output))) >= 3:
        try:
            check = backtest(ctx.output)
        except GlassroomError as exc:  # the prediction stands; say why the backtest could not be made
            check = {"error": str(exc)}
        ctx.write_json("backtest.json", check)
        if "error" not in check:
            result["backtest"] = {k: check[k] for k in ("held_out", "predicted_loss", "actual_loss",
                                                        "relative_error", "covered", "seeds")}
    result["noise"] = prediction.get("noise")
    return result


def train_hero(ctx: StepContext) -> dict:
    """Preregister the ladder's prediction in the hero's store (once), then train the hero; with no
    prediction (the fit failed), journal why once and train it all the same."""
    ladder = Path(ctx.config["ladder"])
    prediction_file = ladder / PREDICTION_FILE
    with StoreWriter(ctx.output) as writer:
        sealed = writer.has_artifact("prediction")
        noted = writer.has_event("no_prediction")
        if not prediction_file.is_file() and not noted:
            missing = json.loads((ladder / NO_PREDICTION_FILE).read_text())
            writer.event("no_prediction", f"no prediction: the ladder's fit failed ({missing['reason']})", step=0,
                         data=missing)
    if prediction_file.is_file() and not sealed:
        preregister(ctx.output, json.loads(prediction_file.read_text()))
    return train_in_step(ctx, ctx.config["run"], ctx.output)


def _with_data(config: dict, data: Any) -> dict:
    config = copy.deepcopy(config)
    if data is not None:
        config["data"]["path"] = data
    return config


def splits(config: dict[str, Any], workers: int) -> bool:
    """Whether `workers` ranks can train `config`: its batch splits into whole micro-batches on each,
    and its train.parallel ep divides them (1 always can)."""
    tc = run_config_from_mapping(config, "run").train
    per_rank, rest = divmod(tc.batch_size, workers)
    return workers == 1 or (not rest and per_rank % tc.micro_batch_size == 0 and workers % tc.expert_parallel == 0)


def workers_for(config: dict[str, Any], gpu_memory: float) -> int:
    """The fewest training ranks (one GPU each) over which `config` (a RunConfig mapping) fits in
    `gpu_memory` bytes per GPU by `glassroom plan`'s count (FSDP2, its train.parallel ep): a count the
    batch splits into whole micro-batches and ep divides. GlassroomError when none up to the batch size does."""
    cfg = run_config_from_mapping(config, "rung")
    tc, ep = cfg.train, cfg.train.expert_parallel
    need = None
    for workers in range(ep, tc.batch_size + 1, ep):
        if not splits(config, workers):
            continue
        layout = Layout(dp=workers // ep, ep=ep, micro_batch=tc.micro_batch_size, seq_len=tc.seq_len,
                        activation_checkpointing=tc.activation_checkpointing, precision=tc.precision)
        need = memory_per_gpu(cfg.model, layout)["bytes"]["total"]
        if need <= gpu_memory:
            return workers
    raise GlassroomError(f"a run of {cfg.train.batch_size} sequences does not fit {gpu_memory / 2**30:.0f} GiB per GPU "
                         f"on any worker count (the last tried needs {(need or 0) / 2**30:.1f} GiB); raise "
                         "train.parallel ep, use activation checkpointing, or GPUs with more memory")


def run_resources(config: dict[str, Any], cpus: float, gpus_per_worker: int = 0, workers: int = 1,
                  gpu_memory: Optional[float] = None, cpus_per_worker: float = 1) -> Resources:
    """What a rung or the hero asks for: on GPUs the fewest workers its memory per GPU fits in
    (workers_for), else the most workers up to `workers` its batch splits over (1: an ordinary
    in-process run of `cpus` CPUs), each of `cpus_per_worker` CPUs; its train.max_restarts for the launch."""
    if gpus_per_worker:
        workers = workers_for(config, gpu_memory)
    else:
        workers = max(w for w in range(1, workers + 1) if splits(config, w))
    if workers == 1:
        return Resources(cpus=cpus, gpus=gpus_per_worker)
    restarts = run_config_from_mapping(config, "run").train.max_restarts
    return Resources(cpus=cpus_per_worker, workers=workers, gpus_per_worker=gpus_per_worker, max_restarts=restarts)


def ladder_steps(spec, spec_raw: dict, data: Optional[Any] = None, with_hero: bool = True,
                 cpus: float = 2, hero_cpus: Optional[float] = None,
                 cluster: Optional[dict] = None) -> tuple[list[Step], list[Step]]:
    """(rung steps, fit + hero steps) for a ladder spec; `data` (a path or a pipeline Input)
    replaces the spec's data.path. Each rung declares `cpus`, the hero `hero_cpus` (default `cpus`).
    `cluster` (run_resources' gpus_per_worker, workers, gpu_memory, cpus_per_worker): each rung and the
    hero ask for the workers and GPUs they need, for the Ray runner (`ladder run --ray`)."""
    rungs, hero = expand_seeds(spec)

    def resources(config: dict, n_cpus: float) -> Resources:
        return run_resources(config, n_cpus, **cluster) if cluster else Resources(cpus=n_cpus)

    rung_steps = [
        Step(run.name, train_rung, {"run": _with_data(run.config, data)}, kind="rungs",
             resources=resources(run.config, cpus),
             description=f"ladder rung {run.size or run.name}" + (f" seed {run.seed}" if run.seed else "")
             + f" ({run.steps} steps)")
        for run in rungs
    ]
    if not with_hero:
        return rung_steps, []
    hero_config = _with_data(hero.config, data)
    fit = Step(f"{spec.name}-fit", fit_and_predict,
               {"spec": spec_raw, "rungs": [Input(s) for s in rung_steps], "hero": hero_config},
               kind="ladders", description="fit the rungs and predict the hero")
    hero_step = Step("hero", train_hero, {"run": hero_config, "ladder": fit.output()},
                     kind="runs", resources=resources(hero.config, cpus if hero_cpus is None else hero_cpus),
                     description=f"the hero, {hero.name}")
    return rung_steps, [fit, hero_step]


def ladder_experiment(spec_path: str, data: Optional[str] = None, hero: bool = False,
                      cluster: Optional[dict] = None) -> list[Step]:
    """The steps of a ladder, for an experiment file (`steps = ladder_experiment(...)`)."""
    spec, raw = read_spec(spec_path)
    rungs, later = ladder_steps(spec, raw, data, with_hero=hero, cluster=cluster)
    return rungs + later


EXPERIMENT_TEMPLATE = """\
# Written by `glassroom ladder run`: this ladder as an experiment file, so that
#   glassroom run {name} --workspace .
# reruns it (cached: finished rungs are reused).
from glassroom.steps.ladder import ladder_experiment

steps = ladder_experiment({spec!r}, data={data!r}, hero={hero!r}{cluster})
"""


def write_experiment(ladder_dir: Path, spec_path: Path, data: Optional[str], hero: bool,
                     steps: list[Step], cluster: Optional[dict] = None) -> Experiment:
    """DIR/ladder_experiment.py (for `glassroom run` reruns and the steps' workers), and the
    experiment it is, with the steps the caller built from the spec it read once."""
    ladder_dir.mkdir(parents=True, exist_ok=True)
    path = (ladder_dir / "ladder_experiment.py").resolve()
    text = EXPERIMENT_TEMPLATE.format(name=path.name, spec=str(spec_path.resolve()), data=data, hero=hero,
                                      cluster=f", cluster={cluster!r}" if cluster else "")
    replace_file(path, text)
    return Experiment(path=path, module=None, steps=steps, sha256=hashlib.sha256(text.encode()).hexdigest(),
                      source=text)


def run_experiment(experiment: Path | Experiment, workspace: Path, jobs: int = 1,
                   force: Optional[list[str]] = None, progress_every: float = 5.0, ray: Optional[str] = None):
    """Run an experiment (a file, or one whose steps are already built) in `workspace` with the local
    runner, or on the Ray cluster at `ray`; returns (graph, RunResult)."""
    workspace.mkdir(parents=True, exist_ok=True)
    loaded = experiment if isinstance(experiment, Experiment) else load_experiment(experiment)
    graph = loaded.graph(workspace)
    selected, forced = graph.select(None, force)
    if ray is not None:
        backend = RayBackend(ray)
    else:
        backend = LocalBackend(jobs)
    result = run_graph(graph, backend, selected, forced, experiment_path=loaded.path,
                       context=run_context(loaded.path, loaded.sha256, loaded.source), progress_every=progress_every)
    return graph, result


def write_ladder_folder(ladder_dir: Path, spec_raw: dict, rung_outputs: list[Path]) -> None:
    """DIR/spec.yaml and DIR/ladder.json (rung folders relative to DIR), written atomically."""
    import os

    ladder_dir.mkdir(parents=True, exist_ok=True)
    for name, text in ((SPEC_FILE, yaml.safe_dump(spec_raw, sort_keys=False)),
                       (LISTING_FILE, json.dumps({"rungs": [os.path.relpath(p, ladder_dir) for p in rung_outputs]},
                                                  indent=2))):
        replace_file(ladder_dir / name, text)
