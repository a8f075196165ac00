"""What a ladder costs before it runs: each rung's and the hero's size, tokens, FLOPs and time.

Time = FLOPs / (devices * peak FLOP/s * MFU). GPUs use the data-sheet peaks of
glassroom.model.accounting.GPU_PEAK_BF16. On a CPU there is no data sheet: the peak is measured
(glassroom.train.hardware.measured_cpu_peak: the best fp32 2048 x 2048 matmul with torch's threads)
unless --cpu-flops gives it, and the default CPU MFU is 0.15: tiny rungs on 2 cores reach about
that share of the measured matmul peak (see experiments/ladder-demo.yaml).

Seeds (the spec's `seeds: K`): each rung's row gives K and the train.seed of every run; its FLOPs
and time are one run's, and the ladder's totals count every seed (K runs of the rung).
"""

from __future__ import annotations

from typing import Optional

from glassroom.ladder.spec import LadderSpec, PlannedRun, base_seed, expand, seed_counts
from glassroom.model.accounting import GPU_PEAK_BF16
from glassroom.units import format_count

CPU_MFU = 0.15
GPU_MFU = 0.4


def device_rate(gpu: Optional[str], gpus: int, mfu: Optional[float], cpu_flops: Optional[float] = None) -> dict:
    """{device, peak (per device), mfu, flops_per_s (all devices, at that MFU)}."""
    if gpu is not None:
        peak, mfu, device = GPU_PEAK_BF16[gpu], GPU_MFU if mfu is None else mfu, f"{gpus} x {gpu}"
    else:
        if cpu_flops is None:
            from glassroom.train.hardware import measured_cpu_peak  # lazy: torch loads only when this runs

            cpu_flops = measured_cpu_peak(None, 2048, 5)
        peak, mfu, device, gpus = cpu_flops, CPU_MFU if mfu is None else mfu, "cpu", 1
    return {"device": device, "peak_flops": peak, "devices": gpus, "mfu": mfu, "flops_per_s": peak * gpus * mfu}


def _row(run: PlannedRun, rate: dict) -> dict:
    seconds = run.flops / rate["flops_per_s"]
    return {"role": run.role, "name": run.name, "d_model": run.dial, "n_layers": run.config["model"]["n_layers"],
            "total_params": run.total_params, "active_params": run.active_params, "params": run.params,
            "tokens": run.tokens, "tokens_per_param": run.tokens / run.params, "flops": run.flops,
            "steps": run.steps, "batch_size": run.batch_size, "seq_len": run.config["train"]["seq_len"],
            "lr": run.lr, "warmup_steps": run.warmup_steps, "eval_every": run.config["train"]["eval_every"],
            "seconds": seconds}


def plan_ladder(spec: LadderSpec, gpu: Optional[str] = None, gpus: int = 1, mfu: Optional[float] = None,
                cpu_flops: Optional[float] = None) -> dict:
    """Everything `glassroom ladder plan` reports, as one JSON-ready mapping."""
    rungs, hero = expand(spec)
    rate = device_rate(gpu, gpus, mfu, cpu_flops)
    base = base_seed(spec, rungs)
    rows = []
    for run, k in zip(rungs, seed_counts(spec)):
        row = _row(run, rate)
        row.update(seeds=k, train_seeds=[base + i for i in range(k)],
                   runs=[run.name] + [f"{run.name}-s{i}" for i in range(1, k)], flops_all_seeds=k * row["flops"], seconds_all_seeds=k * row["seconds"])
        rows.append(row)
    hero_row = _row(hero, rate)
    rung_flops = sum(r["flops_all_seeds"] for r in rows)
    return {"name": spec.name, "dial": spec.dial, "param_count": spec.param_count,
            "rules": {"shape": spec.shape.__dict__, "lr": spec.scaling.lr.describe("lr"),
                      "batch_tokens": spec.scaling.batch_tokens.describe("batch_tokens")},
            "hardware": rate, "rungs": rows, "hero": hero_row,
            "runs": sum(r["seeds"] for r in rows),
            "ladder_flops": rung_flops, "ladder_seconds": sum(r["seconds_all_seeds"] for r in rows),
            "ladder_share_of_hero": rung_flops / hero_row["flops"]}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def format_plan(report: dict) -> str:
    hw = report["hardware"]
    seeded = any(r["seeds"] > 1 for r in report["rungs"])
    runs = f" ({report['runs']} runs with their seeds)" if seeded else ""
    lines = [f"ladder {report['name']}: {len(report['rungs'])} rungs{runs} and a hero, dial {report['dial']}; "
             f"lr = {report['rules']['lr']}, batch = {report['rules']['batch_tokens']} tokens",
             f"{'':5} {'name':>14} {'d_model':>7} {'layers':>6} {'N':>7} {'tokens':>7} {'tok/N':>6} {'FLOPs':>9} "
             f"{'steps':>7} {'batch':>6} {'lr':>9} {'time':>10}" + (f" {'seeds':>5}" if seeded else "")]
    for row in report["rungs"] + [report["hero"]]:
        lines.append(f"{row['role']:5} {row['name']:>14} {row['d_model']:>7} {row['n_layers']:>6} "
                     f"{format_count(row['params']):>7} {format_count(row['tokens']):>7} {row['tokens_per_param']:>6.3g} "
                     f"{row['flops']:>9.2e} {row['steps']:>7} {row['batch_size']:>6} {row['lr']:>9.3g} "
                     f"{_duration(row['seconds']):>10}" + (f" {row.get('seeds', 1):>5}" if seeded else ""))
    if seeded:
        lines.append("FLOPs and time per run; a rung with K seeds trains K runs (train.seed = base seed + k, "
                     "k = 0..K-1; seed k >= 1 is named <rung>-s<k>)")
    lines.append(f"N = {report['param_count'].replace('_', ' ')} parameters; time at {hw['flops_per_s']:.3g} FLOP/s "
                 f"({hw['device']}, peak {hw['peak_flops']:.3g} each, MFU {hw['mfu']:.2f})")
    together = "rungs together (every seed)" if seeded else "rungs together"
    lines.append(f"{together}: {report['ladder_flops']:.2e} FLOPs, {_duration(report['ladder_seconds'])}, "
                 f"{report['ladder_share_of_hero']:.2%} of the hero's compute")
    return "\n".join(lines)
