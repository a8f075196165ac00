"""`glassroom train RUN.yaml --out RUN_DIR`: train a dense or MoE model on a built dataset."""

from __future__ import annotations

import argparse
import json
import os
import sys

from glassroom.commands import new_command
from glassroom.errors import GlassroomError
from glassroom.observe.run_folder import CONFIG_FILE, config_path, has_config

DESCRIPTION = """\
Train the model of a run config on a dataset built by `glassroom data build`, on a CPU, one GPU, or
many GPUs under torchrun (FSDP2, DDP, or FSDP2 with the experts spread over ranks: train.parallel:
{ep: N}). Metrics, events and evaluations go to the run store in
RUN_DIR, which `glassroom serve` shows live; checkpoints go to RUN_DIR/checkpoints. A run killed at
any point continues exactly with --resume. docs/train.md lists every config key. A config's
`init: {from: DIR}` starts from a Hugging Face folder's or a run's weights (its model section
comes from there); `glassroom export` writes a run as a Hugging Face folder. With `train.task: sft`
(or `dpo`) such a run post-trains that base on conversation (or preference) data built with
`task: sft` (`dpo`): conversations packed with attention kept inside each, loss on assistant tokens
only (docs/post-training.md).

Every input is checked before RUN_DIR is created (config values, the dataset, its shard indexes,
token ids against the vocabulary, seq_len against every shard): a mistake is one line, `error: ...`,
exit 2, and leaves RUN_DIR as it was. --out must be a new folder, an empty one, one holding only a
run store (a run not yet started), or a run (with --resume), and not one another glassroom train
is writing now; a start that fails before its first step removes what it created. Ctrl-C or
SIGTERM stops a run cleanly (journaled as `stopped`; --resume continues it). docs/train.md has the
list of what is refused.

Across machines (docs/train.md, "Many machines"): one torchrun launcher per node (--nnodes, a c10d
rendezvous), or --ray ADDRESS --workers W (Ray Train workers spread over the cluster's nodes). With
train.max_restarts the engine restarts every worker when one fails, and they continue from the
newest intact checkpoint by themselves (journaled as `restarted`).

examples:
  glassroom train experiments/train-dense.yaml --out lab/runs/dense
  glassroom train experiments/train-dense.yaml --out lab/runs/dense --set train.steps=400 --resume
  torchrun --nproc_per_node=2 -m glassroom train experiments/train-moe.yaml --out lab/runs/moe
  torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=node0:29500 --rdzv-id=moe \
      -m glassroom train experiments/train-moe.yaml --out /shared/lab/runs/moe
  glassroom train experiments/train-moe.yaml --out /shared/lab/runs/moe --ray head:6379 --workers 4
"""


def register(sub) -> None:
    p = new_command(sub, "train", "train a model from a run config", DESCRIPTION)
    p.add_argument("config", nargs="?", metavar="RUN.yaml", help="run config (with --resume: default RUN_DIR/config.yaml)")
    p.add_argument("--out", required=True, metavar="RUN_DIR",
                   help="the run's folder (store, config, checkpoints): new, empty, holding only a run store, "
                   "or a run to --resume")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value, e.g. train.steps=500")
    p.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR from its newest intact checkpoint (checksums verified; "
                   "damaged ones are moved to checkpoints/damaged/)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--ray", metavar="ADDRESS", help="train as Ray Train workers (TorchTrainer) on the Ray cluster at "
                   "ADDRESS (host:port, auto, ray://host:10001) or `local` (Ray started on this machine); "
                   "RUN_DIR must be a folder every worker sees at the same path")
    p.add_argument("--workers", type=int, metavar="W", help="with --ray: training processes (ranks), spread over "
                   "the cluster's nodes (default 1)")
    p.add_argument("--gpus-per-worker", type=int, default=0, metavar="G", help="with --ray: GPUs each worker holds "
                   "(default 0: train on CPUs with gloo)")
    p.add_argument("--cpus-per-worker", type=float, default=1, metavar="C", help="with --ray: CPUs each worker holds "
                   "(and its torch threads; default 1)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from glassroom.train.config import load_run_config
    from glassroom.train.preflight import check_launch
    from glassroom.train.run_dir import check_new_run_dir

    if args.ray is None and (args.workers is not None or args.gpus_per_worker or args.cpus_per_worker != 1):
        raise GlassroomError("--workers, --gpus-per-worker and --cpus-per-worker go with --ray ADDRESS|local; "
                             "under torchrun the launcher sets the processes (--nnodes, --nproc_per_node)")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise GlassroomError(f"--out {out}: is a file, not a folder")
    if args.resume and not has_config(out):
        raise GlassroomError(f"--out {out}: nothing to resume (no {CONFIG_FILE}); start it without --resume")
    config = args.config
    if config is None:
        if not args.resume:
            raise GlassroomError("train: give a RUN.yaml config (or --resume to continue RUN_DIR with its own config)")
        config = config_path(out)
    cfg = load_run_config(config, args.set, out if args.resume else None)
    check_launch()
    if cfg.init is not None and not args.resume and not args.quiet:
        _import_note(Path(cfg.init.source).expanduser())
    if not args.resume and "TORCHELASTIC_RUN_ID" not in os.environ:  # under torchrun: after its restart is known
        check_new_run_dir(out)
    if args.ray is not None:
        from glassroom.train.ray_train import fit_on_ray  # in run(): ray and torch stay out of --help

        return fit_on_ray(cfg, config, out, args)

    from glassroom.train.session import train_run  # in run(): torch stays out of --help

    trainer, final = train_run(cfg, out, args.resume, args.quiet, str(config))
    if trainer.info.is_main and not args.quiet:
        print(json.dumps({"run": str(args.out), "step": trainer.step, **final}))
    return 0


def _import_note(folder) -> None:
    """A note on stderr when init.from is a Hugging Face folder that exports under another name."""
    # lazy: hf.load brings in torch and safetensors; `glassroom --help` and `train --help` stay fast
    from glassroom.hf.architectures import import_note
    from glassroom.hf.load import is_hf_folder, read_hf_config

    if is_hf_folder(folder) and not has_config(folder):
        note = import_note(read_hf_config(folder), str(folder))
        if note:
            print(note, file=sys.stderr, flush=True)
