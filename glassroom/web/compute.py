"""How much compute a run spends per step, for the compare page's tokens and FLOPs axes.

`run_compute(config)` reads the run's resolved config (as web/data.run_meta has it, redacted):
training FLOPs per token (model/accounting.flops_per_token at the run's sequence length, the same
count the ladder uses for its compute axis) and tokens per optimizer step (batch_size x seq_len).
The page takes tokens at a step from the run's `data/tokens_seen` series when it has one (it counts
the tokens actually trained, padding and masking included as the trainer counts them) and falls back
to step x tokens_per_step. Never imports torch; a config it cannot read gives nulls, never an error.
"""

from __future__ import annotations

from typing import Any, Optional

from glassroom.model.accounting import flops_per_token
from glassroom.model.config import model_config_from_mapping
from glassroom.observe.run_folder import CONFIG_FILE


def _positive_int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def run_compute(config: Any) -> dict:
    """{"flops_per_token": float|None, "tokens_per_step": float|None} from a resolved config tree."""
    out: dict[str, Optional[float]] = {"flops_per_token": None, "tokens_per_step": None}
    if not isinstance(config, dict):
        return out
    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    model = config.get("model")
    seq_len = _positive_int(train.get("seq_len"))
    batch = _positive_int(train.get("batch_size"))
    if seq_len and batch:
        out["tokens_per_step"] = float(seq_len * batch)
    if isinstance(model, dict):
        try:
            cfg = model_config_from_mapping({"model": model}, CONFIG_FILE)
            out["flops_per_token"] = float(flops_per_token(cfg, min(seq_len or cfg.max_seq_len, cfg.max_seq_len)))
        except Exception:   # a config from another version, a redacted value: no FLOPs axis for this run
            out["flops_per_token"] = None
    return out
