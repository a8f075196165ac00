"""`glassroom train RUN.yaml --out DIR --ray ADDRESS|local --workers W`: the same training as Ray
Train workers (`TorchTrainer`), spread over the cluster's nodes.

Ray Train starts W workers in one placement group (strategy SPREAD: one per node while nodes have
room), sets RANK / WORLD_SIZE / LOCAL_RANK and makes the process group (gloo on CPUs, NCCL with
--gpus-per-worker); each worker then runs exactly what one torchrun rank runs
(glassroom/train/session.py), so the mesh, the one writer of the store and the checkpoints are
the same. RUN_DIR and the dataset must be at the same path on every node (a shared filesystem).
`train.max_restarts` is Ray Train's `FailureConfig(max_failures)`: when a worker or its node dies,
Ray Train starts every worker again and they continue from the newest intact checkpoint
(glassroom/train/launch.py journals `restarted`). Everything that can be refused (the config, the
folder, the mesh against W, the cluster's CPUs and GPUs, an address nobody answers) is refused on
the driver before any worker starts.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import torch

from glassroom.errors import ConfigError, GlassroomError
from glassroom.pipeline.runner_ray import check_reachable, import_ray, init_ray
from glassroom.train.config import RunConfig, run_config_from_mapping
from glassroom.train.expert_parallel import check_layout
from glassroom.train.launch import LAUNCH_ID_ENV
from glassroom.train.session import train_run
from glassroom.train.trainer import FAULT_ENV


def check_workers(cfg: RunConfig, workers: int, gpus_per_worker: int, cpus_per_worker: float) -> None:
    """The launch's shape against the config, before Ray is asked for anything (one line each)."""
    if workers < 1:
        raise GlassroomError(f"--workers {workers}: must be 1 or more")
    if gpus_per_worker < 0:
        raise GlassroomError(f"--gpus-per-worker {gpus_per_worker}: must be 0 or more")
    if not cpus_per_worker > 0:
        raise GlassroomError(f"--cpus-per-worker {cpus_per_worker:g}: must be above 0")
    if gpus_per_worker > 1:
        raise GlassroomError(f"--gpus-per-worker {gpus_per_worker}: a worker trains on one GPU (one rank per "
                             f"GPU); ask for --workers {workers * gpus_per_worker} --gpus-per-worker 1")
    tc = cfg.train
    per_rank, rest = divmod(tc.batch_size, workers)
    if rest or per_rank % tc.micro_batch_size:
        raise GlassroomError(f"--workers {workers}: train.batch_size {tc.batch_size} does not split into {workers} "
                             f"ranks of whole micro-batches of {tc.micro_batch_size}")
    try:
        check_layout(tc.expert_parallel, workers, cfg.model.moe.n_experts if cfg.model.moe else None)
    except ConfigError as exc:
        raise GlassroomError(f"--workers {workers}: {str(exc).replace('launch a multiple', 'ask for a multiple')}") from None


def check_cluster(ray, workers: int, gpus_per_worker: int, cpus_per_worker: float) -> None:
    total = ray.cluster_resources()
    for key, each in (("GPU", gpus_per_worker), ("CPU", cpus_per_worker)):
        want, have = workers * each, total.get(key, 0)
        if want > have:
            raise GlassroomError(f"--workers {workers} x {each:g} {key} asks for {want:g} {key}s and the Ray cluster has "
                                 f"{have:g}; add nodes with them or ask for fewer")


def fit_on_ray(cfg: RunConfig, config, out: Path, args) -> int:
    """`glassroom train --ray`: the training as Ray Train workers; prints the final line; 0 when it
    finished (a refusal or a failure past train.max_restarts raises GlassroomError)."""
    value = fit_workers(cfg, str(config), Path(out), args.resume, args.quiet, args.ray,
                        1 if args.workers is None else args.workers,
                        args.gpus_per_worker, args.cpus_per_worker)
    if not args.quiet:
        print(json.dumps({"run": str(out), "step": value.get("step"), **value.get("final", {})}))
    return 0


def fit_workers(cfg: RunConfig, label: str, out: Path, resume: bool, quiet: bool, address: str, workers: int,
                gpus_per_worker: int = 0, cpus_per_worker: float = 1, in_step: bool = False,
                connect: bool = True) -> dict:
    """Train `cfg` into `out` with `workers` Ray Train workers on the cluster at `address`; returns
    rank 0's {"step", "final"}. `in_step`: `out` is a pipeline step's folder (not checked as a new
    --out). `connect`: ray.init here (a caller already connected passes False)."""
    check_workers(cfg, workers, gpus_per_worker, cpus_per_worker)
    ray = import_ray("--ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if connect:
        check_reachable(address)
        init_ray(ray, address, log_to_driver=not quiet)
    storage = Path(tempfile.mkdtemp(prefix="glassroom-ray-train-"))
    try:
        check_cluster(ray, workers, gpus_per_worker, cpus_per_worker)
        try:
            from ray.train import FailureConfig, RunConfig as RayRunConfig, ScalingConfig  # lazy: ray train loads here
            from ray.train.torch import TorchConfig, TorchTrainer
        except ImportError as exc:
            raise GlassroomError(f"--ray needs Ray Train ({exc}): pip install -e '.[ray]'") from None

        job = {"config": cfg.to_dict(), "label": label, "out": str(Path(out).absolute()), "resume": bool(resume),
               "quiet": bool(quiet), "launch": uuid.uuid4().hex, "threads": max(1, int(cpus_per_worker)),
               "in_step": in_step, "faults": os.environ.get(FAULT_ENV),  # the drills reach every worker
               "cwd": os.getcwd()}
        resources = {"CPU": cpus_per_worker, **({"GPU": gpus_per_worker} if gpus_per_worker else {})}
        trainer = TorchTrainer(
            train_worker, train_loop_config=job,
            torch_config=TorchConfig(backend="nccl" if gpus_per_worker else "gloo"),
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=bool(gpus_per_worker),
                                         resources_per_worker=resources, placement_strategy="SPREAD"),
            run_config=RayRunConfig(name=f"glassroom-{job['launch'][:8]}", storage_path=str(storage),
                                    failure_config=FailureConfig(max_failures=cfg.train.max_restarts),
                                    # Ray Train copies a worker's prints to its logger, which prints them again
                                    worker_runtime_env={"env_vars": {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}}))
        try:
            result = trainer.fit()
        except Exception as exc:  # TrainingFailedError: a worker failed more often than max_restarts allows
            first = " ".join(str(exc).split())[:300]
            raise GlassroomError(f"--ray {address}: training failed after {cfg.train.max_restarts} automatic "
                                 f"restart(s) (train.max_restarts): {first}; `glassroom train --resume --out {out} "
                                 "--ray ...` continues from the newest intact checkpoint") from None
    finally:
        shutil.rmtree(storage, ignore_errors=True)
        if connect:
            ray.shutdown()
    value = result.return_value or {}
    if value.get("error"):
        raise GlassroomError(value["error"])
    return value


def train_worker(job: dict) -> dict:
    """One Ray Train worker: the run's training as one rank (glassroom/train/session.py). A refusal
    (GlassroomError, the same on every rank) is returned, not raised: Ray Train would retry it."""
    os.environ[LAUNCH_ID_ENV] = job["launch"]
    if os.path.isdir(job["cwd"]):  # relative paths in the config mean what they meant to the caller
        os.chdir(job["cwd"])
    if job.get("faults"):
        os.environ[FAULT_ENV] = job["faults"]
    torch.set_num_threads(job["threads"])
    try:
        cfg = run_config_from_mapping(job["config"], job["label"])
        trainer, final = train_run(cfg, Path(job["out"]), job["resume"], job["quiet"], job["label"],
                                   new_folder_rules=not job["in_step"])
    except GlassroomError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return {"error": str(exc)}
    return {"step": trainer.step, "final": final}
