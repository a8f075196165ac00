"""The `model:` section of a config: the shape of a dense or MoE decoder.

These keys are fixed: later layers and users' files rely on them (docs/config.md lists them).
`load_model_config(path)` reads a YAML file and validates its `model:` mapping; other sections of
the same file are left to their own layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from glassroom.config import apply_overrides, build_section, load_yaml, require_non_negative, require_positive
from glassroom.errors import ConfigError, GlassroomError


@dataclass(frozen=True)
class MoEConfig:
    n_experts: int
    top_k: int
    d_expert: int
    n_shared_experts: int = 0
    first_dense_layers: int = 0
    router: Literal["sigmoid", "softmax"] = "sigmoid"
    bias_update_rate: float = 1e-3
    aux_loss_coef: float = 0.0
    z_loss_coef: float = 0.0
    # Renormalise the chosen experts' weights to sum to 1: null (default) when top_k > 1, true always,
    # false never (Qwen3-MoE's norm_topk_prob false).
    norm_topk_prob: Optional[bool] = None
    routed_scale: float = 1.0  # multiplies the routed combine weights (DeepSeek-V3's routed_scaling_factor)
    # Training only: each expert keeps at most ceil(capacity_factor * tokens * top_k / n_experts)
    # assignments per micro-batch and layer, the rest dropped in token order (moe.py); null = dropless.
    capacity_factor: Optional[float] = None

    def renormalises(self) -> bool:
        return self.top_k > 1 if self.norm_topk_prob is None else self.norm_topk_prob

    def check(self, path: str) -> None:
        require_positive(path, n_experts=self.n_experts, top_k=self.top_k, d_expert=self.d_expert,
                         routed_scale=self.routed_scale, capacity_factor=self.capacity_factor)
        if self.top_k > self.n_experts:
            raise ConfigError(
                f"{path}.top_k: {self.top_k} is larger than n_experts ({self.n_experts})"
            )
        require_non_negative(
            path, n_shared_experts=self.n_shared_experts, first_dense_layers=self.first_dense_layers,
            bias_update_rate=self.bias_update_rate, aux_loss_coef=self.aux_loss_coef, z_loss_coef=self.z_loss_coef,
        )


@dataclass(frozen=True)
class RopeScaling:
    """Stretching RoPE to contexts longer than pretraining's: `linear` divides every frequency by
    `factor`; `llama3` (Llama 3.1's rule) keeps high frequencies, divides low ones by `factor` and blends
    between, by wavelength against `original_max_seq_len`."""

    type: Literal["llama3", "linear"]
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_seq_len: int = 8192

    def check(self, path: str) -> None:
        require_positive(path, factor=self.factor, low_freq_factor=self.low_freq_factor,
                         high_freq_factor=self.high_freq_factor, original_max_seq_len=self.original_max_seq_len)
        if self.type == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise ConfigError(f"{path}.high_freq_factor: must be above low_freq_factor ({self.low_freq_factor}), "
                              f"got {self.high_freq_factor}")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    max_seq_len: int
    n_kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    d_ff: Optional[int] = None
    tie_embeddings: bool = False
    qk_norm: bool = False
    rope_theta: float = 10000.0
    sliding_window: Optional[int] = None
    global_every: Optional[int] = None
    moe: Optional[MoEConfig] = None
    norm_eps: float = 1e-6  # epsilon of every RMSNorm (QK-norm included)
    rope_scaling: Optional[RopeScaling] = None
    # Standard deviation of the token embedding's initial values (null: 0.02, as every matrix). A larger
    # one (0.3-1) lets token identity dominate the residual stream from the first step; pair it with
    # train.embedding_lr_multiplier so the embedding still learns at the same relative pace (docs/config.md).
    embedding_init_std: Optional[float] = None

    # ------------------------------------------------------------------ derived shape

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer >= self.moe.first_dense_layers

    def layer_window(self, layer: int) -> Optional[int]:
        """The sliding window of `layer`, or None where it attends to the whole context.

        With `global_every: k`, layers k-1, 2k-1, ... (every k-th, counting from 1) are global.
        """
        if self.sliding_window is None:
            return None
        if self.global_every is not None and (layer + 1) % self.global_every == 0:
            return None
        return self.sliding_window

    # ------------------------------------------------------------------ validation

    def check(self, path: str) -> None:
        require_positive(
            path,
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            max_seq_len=self.max_seq_len,
            n_kv_heads=self.n_kv_heads,
            head_dim=self.head_dim,
            d_ff=self.d_ff,
            rope_theta=self.rope_theta,
            sliding_window=self.sliding_window,
            global_every=self.global_every,
            norm_eps=self.norm_eps,
            embedding_init_std=self.embedding_init_std,
        )
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ConfigError(
                f"{path}.n_heads: {self.n_heads} does not divide d_model ({self.d_model}); "
                "set head_dim or change n_heads"
            )
        if self.n_heads % self.kv_heads:
            raise ConfigError(
                f"{path}.n_kv_heads: {self.kv_heads} does not divide n_heads ({self.n_heads})"
            )
        if self.dim_per_head % 2:
            raise ConfigError(f"{path}.head_dim: RoPE needs an even head size, got {self.dim_per_head}")
        dense_layers = self.n_layers if self.moe is None else min(self.moe.first_dense_layers, self.n_layers)
        if dense_layers > 0 and self.d_ff is None:
            raise ConfigError(f"{path}.d_ff: missing required key (dense feed-forward layers need it)")
        if self.moe is not None and self.moe.first_dense_layers > self.n_layers:
            raise ConfigError(
                f"{path}.moe.first_dense_layers: {self.moe.first_dense_layers} is more than "
                f"n_layers ({self.n_layers})"
            )
        if self.tie_embeddings and self.embedding_init_std is not None:
            raise ConfigError(f"{path}.embedding_init_std: the head shares a tied embedding, and its logits would "
                              "grow with the std; set tie_embeddings: false or leave embedding_init_std out")
        if self.global_every is not None and self.sliding_window is None:
            raise ConfigError(f"{path}.global_every: needs sliding_window to be set")


def model_config_from_mapping(raw: dict[str, Any], source: str = "config") -> ModelConfig:
    if "model" not in raw:
        raise ConfigError(f"{source}: missing the model: section")
    return build_section(ModelConfig, raw["model"], "model")


def load_model_config(path: str | Path, overrides: list[str] | None = None) -> ModelConfig:
    """The validated `model:` section of a YAML file; ConfigError names file and key."""
    raw = apply_overrides(load_yaml(path), overrides or [])
    try:
        return model_config_from_mapping(raw, str(path))
    except GlassroomError as exc:
        message = str(exc)
        if not message.startswith(str(path)):
            message = f"{path}: {message}"
        raise ConfigError(message) from None
