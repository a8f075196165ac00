"""Memory free on a device: what a run, or a model about to be built, may use."""

from __future__ import annotations

from pathlib import Path


def available_memory(device) -> int | None:
    """Bytes free for training on `device` (None when unknown)."""
    if device.type == "cuda":
        import torch  # lazy: a CPU question (the HF import's check) needs no torch

        return int(torch.cuda.mem_get_info(device)[0])
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        return sum(int(fields[k].split()[0]) * 1024 for k in ("MemAvailable", "SwapFree") if k in fields)
    except (OSError, ValueError):
        return None
