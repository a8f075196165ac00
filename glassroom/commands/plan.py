"""`glassroom plan FILE`: how big is this model and what will training it cost (no allocation)."""

from __future__ import annotations

import argparse
import json
import math

from glassroom.commands import new_command, positive_count
from glassroom.errors import GlassroomError
from glassroom.units import format_count as _format_count

MAX_LAYERS = 1_000_000


def format_count(value: float) -> str:
    """units.format_count, in powers of ten beyond the trillions (no 300-digit `T` numbers)."""
    return f"{float(value):.3g}" if abs(float(value)) >= 1e15 else _format_count(value)

DESCRIPTION = """\
Report a model's size and training cost from its config alone, without allocating it:
total and active parameters, embedding and non-embedding parameters, training FLOPs per token,
and with --tokens the total FLOPs; with --gpu the wall-clock days at a given MFU; and the memory
per GPU for weights, gradients and optimizer state. Works for any dense or MoE `model:` section,
from a toy to a 535B-class model. docs/plan.md gives every formula.

example:
  glassroom plan experiments/hero-530b.yaml --tokens 18T --gpu h200 --gpus 2048 --mfu 0.35
"""


def register(sub) -> None:
    from glassroom.model.accounting import GPU_PEAK_BF16

    p = new_command(sub, "plan", "size, FLOPs, time and memory of a model config", DESCRIPTION)
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML config(s) with a model: section")
    p.add_argument("--tokens", help="training tokens, e.g. 18.75T: adds total FLOPs (and days)")
    p.add_argument("--seq-len", type=int, help="sequence length for the attention FLOPs (default model.max_seq_len)")
    p.add_argument("--gpu", choices=sorted(GPU_PEAK_BF16), help="GPU type for wall-clock days")
    p.add_argument("--gpus", type=int, default=1, help="number of GPUs (default 1)")
    p.add_argument("--mfu", type=float, default=0.4, help="model FLOP utilisation, 0-1 (default 0.4)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value, e.g. model.n_layers=24")
    p.add_argument("--json", action="store_true", help="print one JSON object per file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from glassroom.model.accounting import plan
    from glassroom.model.config import load_model_config

    tokens = positive_count(args.tokens, "--tokens")
    if tokens is not None and not math.isfinite(tokens):
        raise GlassroomError(f"--tokens: {args.tokens} is beyond any floating-point count")
    if args.gpus < 1:
        raise GlassroomError(f"--gpus: must be at least 1, got {args.gpus}")
    if not 0 < args.mfu <= 1:
        raise GlassroomError(f"--mfu: must be above 0 and at most 1, got {args.mfu}")
    if args.seq_len is not None and args.seq_len < 1:
        raise GlassroomError(f"--seq-len: must be positive, got {args.seq_len}")

    reports = []
    for path in args.files:
        cfg = load_model_config(path, args.set)
        if cfg.n_layers > MAX_LAYERS:  # every layer is counted on its own: 1e9 layers would not finish
            raise GlassroomError(f"{path}: model.n_layers: {cfg.n_layers:,} layers; glassroom plan counts at most "
                                 f"{MAX_LAYERS:,}")
        report = plan(cfg, seq_len=args.seq_len, tokens=tokens, gpu=args.gpu, gpus=args.gpus, mfu=args.mfu)
        if not math.isfinite(report.get("days", 0.0)):  # a denormal --mfu
            raise GlassroomError(f"--mfu: {args.mfu:g} is too small to time a run (it would take forever)")
        if not math.isfinite(report.get("total_flops", 0.0)):
            raise GlassroomError(f"{path}: --tokens {args.tokens} at {report['flops_per_token']:.3e} FLOPs per token "
                                 "is more FLOPs than a float can hold")
        reports.append((path, cfg, report))
    for path, cfg, report in reports:
        if args.json:
            print(json.dumps({"file": path, **report}))
        else:
            print(format_report(path, cfg, report))
    return 0


def _bytes(n: float) -> str:
    if n >= 1e21:
        return f"{n:.3g} B"
    for unit, scale in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def format_report(path: str, cfg, r: dict) -> str:
    if cfg.moe is None:
        shape = "dense"
    else:
        moe = cfg.moe
        shared = f" + {moe.n_shared_experts} shared" if moe.n_shared_experts else ""
        shape = f"MoE {moe.n_experts} experts top-{moe.top_k}{shared}, {r['moe']['moe_layers']} MoE layers"
    lines = [
        f"{path}: {r['name']}  ({shape}; {cfg.n_layers} layers, d_model {cfg.d_model}, "
        f"{cfg.n_heads} heads / {cfg.kv_heads} KV of {cfg.dim_per_head}, vocab {cfg.vocab_size})",
        f"  parameters   total {format_count(r['total_params'])} ({r['total_params']:,})   "
        f"active {format_count(r['active_params'])} ({r['active_params']:,})",
        f"               embedding {format_count(r['embedding_params'])}   "
        f"non-embedding active {format_count(r['non_embedding_active_params'])}",
        f"  FLOPs/token  {r['flops_per_token']:.3e}  (6 x {format_count(r['active_matmul_params'])} "
        f"matmul params + attention {r['attention_flops_per_token']:.3e} at seq {r['seq_len']})",
    ]
    if "tokens" in r:
        lines.append(f"  tokens       {format_count(r['tokens'])}  ->  total FLOPs {r['total_flops']:.3e}")
    if "days" in r:
        lines.append(
            f"  time         {r['days']:.1f} days on {r['gpus']} x {r['gpu']} "
            f"({r['peak_flops_per_gpu'] / 1e12:.0f} TFLOP/s bf16 peak each) at MFU {r['mfu']:.2f}"
        )
    elif "gpu" in r:
        lines.append("  time         add --tokens to estimate days")
    mem = r["memory_bytes_per_gpu"]
    lines.append(
        f"  memory/GPU   weights {_bytes(mem['weights'])}, gradients {_bytes(mem['gradients'])}, "
        f"optimizer {_bytes(mem['optimizer'])}  (fp32, AdamW, sharded over {r['gpus']}; "
        "activations not included)"
    )
    return "\n".join(lines)
