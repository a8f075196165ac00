"""The decoder-only transformer: embeddings, pre-norm blocks, RoPE, grouped-query attention, head.

Attention goes through `F.scaled_dot_product_attention` (causal, or causal within a sliding window
for the layers that have one); optional QK-norm normalises each head's queries and keys before
RoPE. Feed-forwards are SwiGLU, or the MoE of moe.py above `first_dense_layers`. Parallelism is
applied from outside (train/parallel.py), so this file stays a plain model.

For generation, `model.new_cache(batch, max_len)` pre-allocates every layer's keys and values and
`model(input_ids, cache=cache)` runs only the new tokens at positions cache.pos.. against them (a
window layer attends to the keys within its window); without a cache the forward is unchanged.

For packed post-training rows, `model(input_ids, segments=S, positions=P)`: S (batch, seq) is each
token's conversation index within its row (-1 = padding) and P its position within that conversation
(RoPE angles are looked up per row). Attention is then causal AND within the same segment (a
block-diagonal boolean mask, intersected with the window on window layers); padding attends only to
padding, so no query row is fully masked. Without S and P the pretraining path runs unchanged.

`build_model(cfg, seed)` constructs and initialises deterministically: every parameter draws from
its own generator seeded by (seed, parameter name), so the same seed gives the same weights
whatever the construction order; std 0.02 (the token embedding: model.embedding_init_std when set),
projections into the residual stream scaled by 1/sqrt(2 * n_layers).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from glassroom.model.config import ModelConfig, RopeScaling
from glassroom.model.layers import RMSNorm, SwiGLU
from glassroom.model.moe import MoEFeedForward

INIT_STD = 0.02


@dataclass
class TransformerOutput:
    logits: torch.Tensor
    # mean over tokens of logsumexp(logits)^2; the trainer scales it by its z-loss coefficient.
    logit_z_loss: Optional[torch.Tensor]
    # sum over MoE layers of aux_loss_coef * balance loss + z_loss_coef * router z-loss.
    moe_loss: torch.Tensor


def rope_frequencies(head_dim: int, theta: float, scaling: Optional[RopeScaling] = None) -> torch.Tensor:
    """The head_dim / 2 rotation frequencies (radians per position), float64, after `scaling`."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if scaling is None:
        return inv_freq
    if scaling.type == "linear":
        return inv_freq / scaling.factor
    # llama3: wavelengths shorter than original / high_freq_factor keep their frequency, longer than
    # original / low_freq_factor are divided by factor, and the band between blends the two linearly
    # in original / wavelength.
    wavelength = 2 * math.pi / inv_freq
    ratio = scaling.original_max_seq_len / wavelength
    blend = ((ratio - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)).clamp(0, 1)
    return (1 - blend) * inv_freq / scaling.factor + blend * inv_freq


def rope_tables(head_dim: int, max_seq_len: int, theta: float,
                scaling: Optional[RopeScaling] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (max_seq_len, head_dim / 2), computed in float64 for accuracy."""
    inv_freq = rope_frequencies(head_dim, theta, scaling)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., :h/2], x[..., h/2:]) of x (B, heads, T, h) by the position angles."""
    first, second = x.float().chunk(2, dim=-1)
    rotated = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    return rotated.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, window: Optional[int]):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.dim_per_head
        self.window = window
        self.wq = nn.Linear(cfg.d_model, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kv: Optional[tuple[torch.Tensor, torch.Tensor]] = None, pos: int = 0,
                segment_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        gqa = self.n_kv_heads != self.n_heads
        if kv is not None:
            out = self._attend_cached(q, k, v, kv, pos, gqa)
        elif segment_mask is not None:
            mask = segment_mask
            if self.window is not None and self.window < seq:
                mask = mask & sliding_window_mask(seq, self.window, x.device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        elif self.window is None or self.window >= seq:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            mask = sliding_window_mask(seq, self.window, x.device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))

    def _attend_cached(self, q, k, v, kv, pos: int, gqa: bool) -> torch.Tensor:
        """Write the new keys and values at positions pos.. of the cache, then attend the new
        queries to every cached key they may see (within the window, for a window layer)."""
        keys, values = kv
        new = q.shape[2]
        end = pos + new
        keys[:, :, pos:end] = k
        values[:, :, pos:end] = v
        start = 0 if self.window is None else max(0, pos - self.window + 1)
        k, v = keys[:, :, start:end], values[:, :, start:end]
        if new == 1:  # one query sees every key kept
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        if pos == 0 and (self.window is None or self.window >= new):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        mask = band_mask(torch.arange(pos, end, device=q.device), torch.arange(start, end, device=q.device), self.window)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


class KVCache:
    """Keys and values of every layer, pre-allocated (batch, kv_heads, max_len, head_dim), and
    `pos`, the number of positions written: the next forward's tokens go at pos, pos + 1, ..."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self.keys, self.values = keys, values
        self.batch, self.max_len = keys[0].shape[0], keys[0].shape[2]
        self.pos = 0


_MASKS: dict[tuple[int, int, str], torch.Tensor] = {}


def sliding_window_mask(seq: int, window: int, device: torch.device) -> torch.Tensor:
    """Boolean (seq, seq): query i sees keys j with i - window < j <= i."""
    key = (seq, window, str(device))
    if key not in _MASKS:
        pos = torch.arange(seq, device=device)
        _MASKS[key] = band_mask(pos, pos, window)
    return _MASKS[key]


def segment_mask(segments: torch.Tensor) -> torch.Tensor:
    """Boolean (batch, 1, seq, seq) from segments (batch, seq): query i sees key j when j <= i and
    both belong to the same segment (padding, -1, is one segment of its own)."""
    seq = segments.shape[1]
    pos = torch.arange(seq, device=segments.device)
    same = segments[:, :, None] == segments[:, None, :]
    return (same & band_mask(pos, pos, None)).unsqueeze(1)


def band_mask(queries: torch.Tensor, keys: torch.Tensor, window: Optional[int]) -> torch.Tensor:
    """Boolean (len(queries), len(keys)) from positions: query i sees key j when j <= i and, with a
    window, i - window < j."""
    distance = queries[:, None] - keys[None, :]
    mask = distance >= 0
    if window is not None:
        mask &= distance < window
    return mask


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, cfg.layer_window(layer))
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        if cfg.is_moe_layer(layer):
            self.mlp: nn.Module = MoEFeedForward(cfg.d_model, cfg.moe)
        else:
            self.mlp = SwiGLU(cfg.d_model, cfg.d_ff)

    def forward(self, x, cos, sin, kv=None, pos=0, segment_mask=None):
        x = x + self.attn(self.attn_norm(x), cos, sin, kv, pos, segment_mask)
        if isinstance(self.mlp, MoEFeedForward):
            out, moe_loss = self.mlp(self.mlp_norm(x))
            return x + out, moe_loss
        return x + self.mlp(self.mlp_norm(x)), None


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.dim_per_head, cfg.max_seq_len, cfg.rope_theta, cfg.rope_scaling)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, input_ids: torch.Tensor, segments: Optional[torch.Tensor] = None,
                positions: Optional[torch.Tensor] = None, *, z_loss: bool = False,
                cache: Optional[KVCache] = None) -> TransformerOutput:
        """input_ids (batch, seq) -> logits (batch, seq, vocab), plus the auxiliary loss terms.

        `segments` / `positions` (batch, seq) pack several sequences in a row (see the module doc);
        either may be given alone (segments alone: positions count from the row's start).
        With a `cache` (from new_cache), input_ids are the next tokens after the cache's `pos`
        positions: only they run, and their logits come back (no auxiliary losses)."""
        if cache is not None:
            if segments is not None or positions is not None:
                raise ValueError("segments/positions are not supported with a KV cache")
            return self._forward_cached(input_ids, cache)
        seq = input_ids.shape[1]
        if seq > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {seq} tokens is longer than max_seq_len {self.cfg.max_seq_len}")
        if positions is None:
            cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        else:
            if positions.shape != input_ids.shape:
                raise ValueError(f"positions of shape {tuple(positions.shape)} for input_ids of {tuple(input_ids.shape)}")
            # (batch, 1, seq, head_dim / 2): broadcast over heads in apply_rope.
            cos, sin = self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1)
        mask = None
        if segments is not None:
            if segments.shape != input_ids.shape:
                raise ValueError(f"segments of shape {tuple(segments.shape)} for input_ids of {tuple(input_ids.shape)}")
            mask = segment_mask(segments)
        x = self.embed(input_ids)
        moe_loss = torch.zeros((), device=x.device)
        for block in self.blocks:
            x, block_loss = block(x, cos, sin, segment_mask=mask)
            if block_loss is not None:
                moe_loss = moe_loss + block_loss
        x = self.norm(x)
        weight = self.embed.weight if self.head is None else self.head.weight
        logits = F.linear(x, weight)
        logit_z = torch.logsumexp(logits.float(), dim=-1).pow(2).mean() if z_loss else None
        return TransformerOutput(logits=logits, logit_z_loss=logit_z, moe_loss=moe_loss)

    # ------------------------------------------------------------------ generation

    def new_cache(self, batch: int, max_len: Optional[int] = None, dtype: Optional[torch.dtype] = None) -> KVCache:
        """An empty KV cache for `batch` sequences of up to `max_len` positions (default max_seq_len),
        in `dtype` (default the model's), on the model's device."""
        max_len = self.cfg.max_seq_len if max_len is None else max_len
        if not 0 < max_len <= self.cfg.max_seq_len:
            raise ValueError(f"a cache of {max_len} positions does not fit the model's max_seq_len {self.cfg.max_seq_len}")
        weight = self.embed.weight
        shape = (batch, self.cfg.kv_heads, max_len, self.cfg.dim_per_head)
        dtype = dtype or weight.dtype
        keys = [torch.zeros(shape, dtype=dtype, device=weight.device) for _ in self.blocks]
        values = [torch.zeros(shape, dtype=dtype, device=weight.device) for _ in self.blocks]
        return KVCache(keys, values)

    def _forward_cached(self, input_ids: torch.Tensor, cache: KVCache) -> TransformerOutput:
        batch, new = input_ids.shape
        pos = cache.pos
        if batch != cache.batch:
            raise ValueError(f"a batch of {batch} sequences given to a cache made for a batch of {cache.batch}")
        if pos + new > cache.max_len:
            raise ValueError(f"{pos} cached + {new} new positions: the cache has room for {cache.max_len} positions "
                             f"(the model's max_seq_len is {self.cfg.max_seq_len})")
        cos, sin = self.rope_cos[pos:pos + new], self.rope_sin[pos:pos + new]
        x = self.embed(input_ids)
        for block, keys, values in zip(self.blocks, cache.keys, cache.values):
            x, _ = block(x, cos, sin, (keys, values), pos)
        x = self.norm(x)
        weight = self.embed.weight if self.head is None else self.head.weight
        cache.pos = pos + new
        return TransformerOutput(logits=F.linear(x, weight), logit_z_loss=None, moe_loss=torch.zeros((), device=x.device))

    # ------------------------------------------------------------------ MoE helpers

    def moe_layers(self) -> Iterator[tuple[int, MoEFeedForward]]:
        for block in self.blocks:
            if isinstance(block.mlp, MoEFeedForward):
                yield block.layer, block.mlp

    def step_tokens_per_expert(self) -> Optional[torch.Tensor]:
        """(n_moe_layers, n_experts) counts accumulated this optimizer step, or None if dense."""
        counts = [moe.step_tokens_per_expert for _, moe in self.moe_layers()]
        return torch.stack(counts) if counts else None

    def update_router_biases(self, tokens_per_expert: Optional[torch.Tensor] = None) -> None:
        """Balance every MoE layer once per optimizer step; counts as from step_tokens_per_expert
        (already summed across ranks when distributed), or each layer's own when None."""
        for row, (_, moe) in enumerate(self.moe_layers()):
            moe.update_router_bias(None if tokens_per_expert is None else tokens_per_expert[row])

    # ------------------------------------------------------------------ initialisation

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        residual_std = INIT_STD / math.sqrt(2 * self.cfg.n_layers)
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            is_residual_out = name.endswith(("attn.wo.weight", "down.weight", "down_proj"))
            std = residual_std if is_residual_out else INIT_STD
            if name == "embed.weight" and self.cfg.embedding_init_std is not None:
                std = self.cfg.embedding_init_std
            generator = torch.Generator().manual_seed(_param_seed(seed, name))
            values = torch.empty(param.shape, dtype=torch.float32)
            values.normal_(0.0, std, generator=generator)
            param.copy_(values)
        for _, moe in self.moe_layers():
            moe.router_bias.zero_()


def _param_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def build_model(cfg: ModelConfig, seed: int = 0, device: str | torch.device | None = None) -> Transformer:
    """A Transformer for `cfg`, initialised from `seed`; on the meta device nothing is allocated."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    with device:
        model = Transformer(cfg)
    if device.type != "meta":
        model.init_weights(seed)
    return model
