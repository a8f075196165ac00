"""Parameter counts, FLOPs per token, time and memory, from the config alone.

Nothing here allocates a model: the numbers behind `glassroom plan` come from the shapes in
ModelConfig, and tests check them against `sum(p.numel())` of the instantiated model on the meta
device. docs/plan.md writes out every formula.

Conventions:
- total parameters count every weight, norms and router included; the router bias is a buffer.
- active parameters are those one token uses: all but the (n_experts - top_k) unchosen routed
  experts of each MoE layer.
- embedding parameters are the input embedding table; the output head (tied or not) counts as a
  matmul, so it is part of the non-embedding active parameters.
- training FLOPs per token = 6 * active matmul parameters (non-embedding active minus norm weights,
  plus the embedding table again when the head is tied to it, since it is still a matmul)
  + 12 * sum over layers of (n_heads * head_dim * context), context the sequence length, or the
  sliding window where smaller (the PaLM / Chinchilla attention term, causal masking not halved).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from glassroom.model.config import ModelConfig
from glassroom.units import model_name

# Peak dense bf16 tensor FLOP/s per GPU, without sparsity, from the vendors' data sheets
# (H100/H200 SXM: 989 TF; B200: 2.25 PF; GB200 NVL72: 2.5 PF per GPU; A100: 312 TF).
GPU_PEAK_BF16 = {
    "a100": 312e12,
    "h100": 989e12,
    "h200": 989e12,
    "b200": 2250e12,
    "gb200": 2500e12,
}

# Bytes per parameter under mixed precision with fp32 master weights and AdamW:
WEIGHT_BYTES = 4  # fp32 master weights (a bf16 working copy is gathered per layer, transiently)
GRAD_BYTES = 4  # fp32 gradients (reduced in fp32)
OPTIMIZER_BYTES = 8  # AdamW first and second moments in fp32


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    embedding: int
    norm_weights: int
    tied_head: bool = False

    @property
    def non_embedding_active(self) -> int:
        return self.active - self.embedding

    @property
    def active_matmul(self) -> int:
        """Weights every token multiplies by: the tied head reuses the embedding table as a matmul."""
        return self.non_embedding_active - self.norm_weights + (self.embedding if self.tied_head else 0)


def count_params(cfg: ModelConfig) -> ParamCounts:
    d, heads, kv, hd = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.dim_per_head
    embedding = cfg.vocab_size * d
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * d
    attention = d * heads * hd + 2 * d * kv * hd + heads * hd * d
    qk_norm = 2 * hd if cfg.qk_norm else 0
    layer_norms = 2 * d + qk_norm
    total = embedding + head + d  # + final norm
    active = total
    norms = d
    for layer in range(cfg.n_layers):
        total += attention + layer_norms
        active += attention + layer_norms
        norms += layer_norms
        if cfg.is_moe_layer(layer):
            moe = cfg.moe
            expert = 3 * d * moe.d_expert
            router = d * moe.n_experts
            shared = moe.n_shared_experts * expert
            total += router + moe.n_experts * expert + shared
            active += router + moe.top_k * expert + shared
        else:
            dense = 3 * d * cfg.d_ff
            total += dense
            active += dense
    return ParamCounts(total=total, active=active, embedding=embedding, norm_weights=norms,
                       tied_head=cfg.tie_embeddings)


def attention_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """12 * sum over layers of (n_heads * head_dim * context): QK^T and AV, forward and backward."""
    width = cfg.n_heads * cfg.dim_per_head
    total = 0
    for layer in range(cfg.n_layers):
        window = cfg.layer_window(layer)
        context = seq_len if window is None else min(window, seq_len)
        total += 12 * width * context
    return total


def flops_per_token(cfg: ModelConfig, seq_len: Optional[int] = None) -> int:
    """Training (forward + backward) FLOPs per token at `seq_len` (default max_seq_len)."""
    seq_len = seq_len or cfg.max_seq_len
    return 6 * count_params(cfg).active_matmul + attention_flops_per_token(cfg, seq_len)


def memory_per_gpu(total_params: int, gpus: int) -> dict[str, float]:
    """Bytes per GPU of weights, gradients and optimizer state, fully sharded over `gpus`."""
    return {
        "weights": total_params * WEIGHT_BYTES / gpus,
        "gradients": total_params * GRAD_BYTES / gpus,
        "optimizer": total_params * OPTIMIZER_BYTES / gpus,
    }


def plan(
    cfg: ModelConfig,
    *,
    seq_len: Optional[int] = None,
    tokens: Optional[float] = None,
    gpu: Optional[str] = None,
    gpus: int = 1,
    mfu: float = 0.4,
) -> dict:
    """Everything `glassroom plan` reports, as one JSON-ready mapping."""
    counts = count_params(cfg)
    seq_len = seq_len or cfg.max_seq_len
    per_token = flops_per_token(cfg, seq_len)
    result: dict = {
        "name": model_name(counts.total, counts.active),
        "total_params": counts.total,
        "active_params": counts.active,
        "embedding_params": counts.embedding,
        "non_embedding_active_params": counts.non_embedding_active,
        "active_matmul_params": counts.active_matmul,
        "seq_len": seq_len,
        "attention_flops_per_token": attention_flops_per_token(cfg, seq_len),
        "flops_per_token": per_token,
        "n_layers": cfg.n_layers,
        "d_model": cfg.d_model,
        "moe": None
        if cfg.moe is None
        else {
            "n_experts": cfg.moe.n_experts,
            "top_k": cfg.moe.top_k,
            "n_shared_experts": cfg.moe.n_shared_experts,
            "moe_layers": sum(cfg.is_moe_layer(i) for i in range(cfg.n_layers)),
        },
    }
    if tokens is not None:
        result["tokens"] = tokens
        result["total_flops"] = per_token * tokens
    result["gpus"] = gpus
    result["memory_bytes_per_gpu"] = memory_per_gpu(counts.total, gpus)
    if gpu is not None:
        result["gpu"] = gpu
        result["mfu"] = mfu
        result["peak_flops_per_gpu"] = GPU_PEAK_BF16[gpu]
        if tokens is not None:
            seconds = per_token * tokens / (gpus * GPU_PEAK_BF16[gpu] * mfu)
            result["days"] = seconds / 86400
    return result
