"""The device, the precision and the peak FLOP/s that MFU is measured against.

On a GPU the peak is the documented dense bf16 figure of the table in glassroom.model.accounting
(a GPU missing from the table gets no MFU: NaN). On a CPU there is no data sheet to trust, so the peak is measured
once at start: the best of several 2048 x 2048 matmuls in the training precision (bf16 under
autocast, else fp32), with the threads torch will train with.
"""

from __future__ import annotations

import functools
import time
from typing import Optional

import torch

from glassroom.errors import GlassroomError
from glassroom.model.accounting import GPU_PEAK_BF16


def resolve_device(kind: str) -> torch.device:
    if kind == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        raise GlassroomError("train.device: cuda was asked for but no CUDA GPU is available; use cpu or auto")
    return torch.device(kind)


def _cpu_has_bf16() -> bool:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def autocast_dtype_for(precision: str, device: torch.device) -> Optional[torch.dtype]:
    """bf16 autocast, or None for plain fp32. `auto` picks bf16 where the hardware runs it natively."""
    if precision == "fp32":
        return None
    supported = torch.cuda.is_bf16_supported() if device.type == "cuda" else _cpu_has_bf16()
    if precision == "bf16":
        return torch.bfloat16
    return torch.bfloat16 if supported else None


@functools.lru_cache(maxsize=None)
def measured_cpu_peak(dtype: Optional[torch.dtype], size: Optional[int] = None, repeats: int = 3) -> float:
    """FLOP/s of the best of `repeats` square matmuls on this CPU (after one warm-up). With no `size`,
    the matrix grows from 256 (doubling, at most 2048) until one product takes 20 ms: a few tenths of
    a second at most wherever it runs, since every training start measures it (bf16 without native
    support runs at a small fraction of fp32's speed, and a 2048 product there takes seconds)."""
    sizes = [size] if size else [256, 512, 1024, 2048]
    best_rate = 0.0
    for n in sizes:
        a = torch.randn(n, n, dtype=dtype or torch.float32)
        b = torch.randn(n, n, dtype=dtype or torch.float32)
        a @ b
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
        best_rate = max(best_rate, 2 * n**3 / best)
        if best > 0.02:
            break
    return best_rate


def peak_flops(device: torch.device, dtype: Optional[torch.dtype]) -> float:
    """Peak FLOP/s of one device, for MFU."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device).lower()
        for key in ("gb200", "b200", "h200", "h100", "a100"):
            if key in name:
                return GPU_PEAK_BF16[key]
        return float("nan")
    return measured_cpu_peak(dtype)
