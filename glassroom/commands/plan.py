"""`glassroom plan FILE`: how big is this model and what will training it cost (no allocation)."""

from __future__ import annotations

import argparse
import json
import math

from glassroom.commands import new_command, positive_count, whole, number
from glassroom.errors import GlassroomError
from glassroom.model.accounting import AC_MODES, GIB, GPU_MEMORY_GIB, GPU_PEAK_BF16, PRECISIONS, expert_shard_dim, plan
from glassroom.model.config import load_model_config
from glassroom.units import format_count as _format_count

MAX_LAYERS = 1_000_000


def format_count(value: float) -> str:
    """units.format_count, in powers of ten beyond the trillions (no 300-digit `T` numbers)."""
    return f"{float(value):.3g}" if abs(float(value)) >= 1e15 else _format_count(value)

DESCRIPTION = """\
Report a model's size and training cost from its config alone, without allocating it:
total and active parameters, embedding and non-embedding parameters, training FLOPs per token,
and with --tokens the total FLOPs; with --gpu the wall-clock days at a given MFU; and the memory
per GPU on a (data x expert) mesh: weights, gradients, optimizer state, gathered bf16 weights,
gradient reduction, activations (per --micro-batch, --seq-len, --activation-checkpointing),
logits and all-to-all buffers; with --gpu or --gpu-memory whether it fits and the headroom.
Works for any dense or MoE `model:` section, from a toy to a 535B-class model. docs/plan.md
gives every formula.

examples:
  glassroom plan experiments/hero-530b.yaml --tokens 18T --gpu h200 --gpus 2048 --mfu 0.35
  glassroom plan experiments/hero-530b.yaml --gpu h200 --dp 11 --ep 64 --micro-batch 1 --seq-len 4096 \\
      --activation-checkpointing full
"""


def register(sub) -> None:
    p = new_command(sub, "plan", "size, FLOPs, time and memory of a model config", DESCRIPTION)
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML config(s) with a model: section")
    p.add_argument("--tokens", help="training tokens, e.g. 18.75T: adds total FLOPs (and days)")
    p.add_argument("--seq-len", type=whole,
                   help="sequence length for the attention FLOPs and the activations (default model.max_seq_len)")
    p.add_argument("--gpu", choices=sorted(GPU_PEAK_BF16),
                   help="GPU type: wall-clock days with --tokens, and its memory ("
                        + ", ".join(f"{k} {v}" for k, v in sorted(GPU_MEMORY_GIB.items())) + " GiB)")
    p.add_argument("--gpus", type=whole, help="number of GPUs, dp x ep (default dp x ep)")
    p.add_argument("--dp", type=whole, help="data-parallel degree (default gpus / ep, else 1)")
    p.add_argument("--ep", type=whole, help="expert-parallel degree: each GPU holds n_experts / ep experts "
                                          "(default 1, or gpus / dp)")
    p.add_argument("--micro-batch", type=whole, default=1, help="sequences per GPU per micro-step (default 1)")
    p.add_argument("--activation-checkpointing", choices=AC_MODES, default="none",
                   help="what each block keeps for backward: none (everything), full (its input), "
                        "selective (matmul and attention outputs) (default none)")
    p.add_argument("--precision", choices=PRECISIONS, default="bf16",
                   help="compute precision; weights, gradients and AdamW stay fp32 (default bf16)")
    p.add_argument("--gpu-memory", type=number, metavar="GIB",
                   help="memory per GPU in GiB (default the --gpu's): adds whether it fits and the headroom")
    p.add_argument("--mfu", type=number, default=0.4, help="model FLOP utilisation, 0-1 (default 0.4)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value, e.g. model.n_layers=24")
    p.add_argument("--json", action="store_true", help="print one JSON object per file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    tokens = positive_count(args.tokens, "--tokens")
    if tokens is not None and not math.isfinite(tokens):
        raise GlassroomError(f"--tokens: {args.tokens} is beyond any floating-point count")
    if args.gpus is not None and args.gpus < 1:
        raise GlassroomError(f"--gpus: must be at least 1, got {args.gpus}")
    if args.micro_batch < 1:
        raise GlassroomError(f"--micro-batch: must be at least 1 sequence, got {args.micro_batch}")
    if args.gpu_memory is not None and not (0 < args.gpu_memory < math.inf):
        raise GlassroomError(f"--gpu-memory: must be a positive number of GiB, got {args.gpu_memory:g}")
    if args.gpu_memory is not None and not math.isfinite(args.gpu_memory * GIB):  # 1e300 GiB: inf bytes
        raise GlassroomError(f"--gpu-memory: {args.gpu_memory:g} GiB is beyond any byte count; give the GPU's "
                             "memory in GiB, e.g. 141")
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
        try:
            report = plan(cfg, seq_len=args.seq_len, tokens=tokens, gpu=args.gpu, gpus=args.gpus, mfu=args.mfu,
                          dp=args.dp, ep=args.ep, micro_batch=args.micro_batch,
                          activation_checkpointing=args.activation_checkpointing, precision=args.precision,
                          gpu_memory=None if args.gpu_memory is None else args.gpu_memory * GIB)
        except GlassroomError as exc:
            raise GlassroomError(f"{path}: {exc}") from None
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
    """Bytes in binary units (KiB ... EiB), as GPU memory is quoted; beyond, powers of ten."""
    if n >= 1024 * 2**60:
        return f"{n:.3g} B"
    for unit, scale in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


MEMORY_LINES = (
    ("weights", "weights", "fp32 master copy, sharded"),
    ("gradients", "gradients", "fp32, sharded"),
    ("optimizer", "optimizer", "AdamW moments, fp32, sharded"),
    ("gathered_weights", "gathered", None),
    ("gradient_reduce", "grad reduce", "one block's unsharded gradient before reduce-scatter"),
    ("activations", "activations", None),
    ("logits", "logits", "fp32 log-softmax kept for backward, and the logits' gradient"),
    ("all_to_all", "all-to-all", None),
)


def _memory_lines(cfg, r: dict) -> list[str]:
    mem, params, mesh = r["memory_bytes_per_gpu"], r["params_per_gpu"], r["mesh"]
    if cfg.moe is None:
        experts = ""
    else:
        local, dp = params["experts_per_gpu"], mesh["dp"]
        if mesh["ep"] > 1:
            experts = f": {local} of {cfg.moe.n_experts} experts per expert-parallel rank, sharded over dp {dp}"
        else:
            experts = f": all {local} experts on every GPU" + (f", sharded over {dp}" if dp > 1 else "")
        if local % dp:  # experts do not split evenly over dp

            shapes = {"d_model": (local, cfg.d_model, 2 * cfg.moe.d_expert),
                      "d_expert": (local, cfg.moe.d_expert, cfg.d_model)}
            even = sorted({names for names, shape in shapes.items() if expert_shard_dim(shape, dp) != 0})
            padded = -(-local // dp)
            if len(even) == 2 or (even and cfg.d_model == cfg.moe.d_expert):
                experts += (f"\n               {local} experts do not split evenly over dp {dp}: FSDP2 shards the "
                            "expert tensors along their other dimensions instead (no padding)")
            else:  # FSDP2 chunks dim 0 (experts) evenly and pads the last chunks
                experts += (f"\n               FSDP2 pads the expert dimension: each GPU allocates ceil({local}/{dp}) = "
                            f"{padded} expert{'s' if padded > 1 else ''} per layer, {padded * dp / local:.2f}x the even share")
    lines = [
        f"  mesh         {r['gpus']} GPU{'s' if r['gpus'] > 1 else ''} = dp {mesh['dp']} x ep {mesh['ep']}{experts}",
        f"  batch        micro-batch {r['micro_batch']} x seq {r['seq_len']} per GPU, "
        f"activation checkpointing {r['activation_checkpointing']}, {r['precision']} compute",
    ]
    notes = {
        "gathered_weights": ("bf16 autocast copies of the matmul weights" if r["gpus"] == 1 else
                             f"{r['precision']}: embedding and head, 2 blocks, one prefetched")
        if r["precision"] == "bf16" or r["gpus"] > 1 else "none: fp32 on one GPU",
        "activations": f"{cfg.n_layers} blocks, per micro-batch",
        "all_to_all": "send + receive of one MoE layer" if mesh["ep"] > 1 else "none: ep 1",
    }
    if r["gpus"] == 1:
        notes["gradient_reduce"] = "none: one GPU"
    for key, label, note in MEMORY_LINES:
        note = notes.get(key, note)
        if r["gpus"] == 1:
            note = note.replace(", sharded", "")
        head = "  memory/GPU  " if key == "weights" else "              "
        lines.append(f"{head} {label:<12} {_bytes(mem[key]):>10}   ({note})")
    lines.append(f"               {'total':<12} {_bytes(mem['total']):>10}   "
                 f"(parameters per GPU: {format_count(params['non_expert'])} non-expert + "
                 f"{format_count(params['expert'])} expert)")
    if "fits" in r:
        where = f"on {r['gpu']} ({_bytes(r['gpu_memory_bytes'])})" if "gpu" in r and r["gpu_memory_bytes"] == \
            _gpu_bytes(r["gpu"]) else f"in {_bytes(r['gpu_memory_bytes'])}"
        if r["fits"]:
            lines.append(f"  fits         yes {where}: {_bytes(r['headroom_bytes'])} left "
                         f"({r['headroom_bytes'] / r['gpu_memory_bytes']:.0%})")
        else:
            lines.append(f"  fits         NO {where}: {_bytes(-r['headroom_bytes'])} missing")
    else:
        lines.append("  fits         add --gpu or --gpu-memory to check")
    return lines


def _gpu_bytes(gpu: str) -> float:
    return GPU_MEMORY_GIB[gpu] * GIB


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
    lines += _memory_lines(cfg, r)
    return "\n".join(lines)
