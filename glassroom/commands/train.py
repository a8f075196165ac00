"""`glassroom train RUN.yaml --out RUN_DIR`: train a dense or MoE model on a built dataset."""

from __future__ import annotations

import argparse
import json

from glassroom.commands import new_command

DESCRIPTION = """\
Train the model of a run config on a dataset built by `glassroom data build`, on a CPU, one GPU, or
many GPUs under torchrun (FSDP2 or DDP). Metrics, events and evaluations go to the run store in
RUN_DIR, which `glassroom serve` shows live; checkpoints go to RUN_DIR/checkpoints. A run killed at
any point continues exactly with --resume. docs/train.md lists every config key.

examples:
  glassroom train experiments/train-dense.yaml --out lab/runs/dense
  glassroom train experiments/train-dense.yaml --out lab/runs/dense --set train.steps=400 --resume
  torchrun --nproc_per_node=2 -m glassroom train experiments/train-moe.yaml --out lab/runs/moe
"""


def register(sub) -> None:
    p = new_command(sub, "train", "train a model from a run config", DESCRIPTION)
    p.add_argument("config", nargs="?", metavar="RUN.yaml", help="run config (with --resume: default RUN_DIR/config.yaml)")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="the run's folder (store, config, checkpoints)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value, e.g. train.steps=500")
    p.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR from its newest checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from glassroom.errors import GlassroomError
    from glassroom.train.config import load_run_config

    config = args.config
    if config is None:
        if not args.resume:
            raise GlassroomError("train: give a RUN.yaml config (or --resume to continue RUN_DIR with its own config)")
        config = Path(args.out) / "config.yaml"
        if not config.is_file():
            raise GlassroomError(f"{args.out}: nothing to resume (no config.yaml)")
    cfg = load_run_config(config, args.set)

    from glassroom.train import parallel
    from glassroom.train.trainer import Trainer

    try:
        trainer = Trainer(cfg, Path(args.out), resume=args.resume, quiet=args.quiet)
        final = trainer.run()
    finally:
        parallel.teardown()
    if trainer.info.is_main and not args.quiet:
        print(json.dumps({"run": str(args.out), "step": trainer.step, **final}))
    return 0
