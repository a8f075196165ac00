"""Tensor names and layouts: a glassroom state dict <-> an architecture's Hugging Face tensors.

`to_hf(state, cfg, arch)` renames a glassroom state dict to the architecture's tensors, MoE experts
written as the hub's per-expert keys (`model.layers.N.mlp.experts.E.gate_proj.weight`, Mixtral's
`block_sparse_moe.experts.E.w1.weight`), which every transformers version and vLLM read;
`from_hf` reverses it, and also takes experts fused the way transformers 5 keeps them in memory
(`mlp.experts.gate_up_proj` (E, 2I, H), `mlp.experts.down_proj` (E, H, I)). Glassroom keeps
experts packed as gate_up_proj (E, H, 2I) and down_proj (E, I, H): transposes only, so bit exact.
"""

from __future__ import annotations

import torch

from glassroom.errors import GlassroomError
from glassroom.hf.architectures import SIGMOID_ARCHS
from glassroom.model.config import ModelConfig

_ATTN = {"wq": "q_proj", "wk": "k_proj", "wv": "v_proj", "wo": "o_proj"}
_FFN = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
_MIXTRAL = {"gate": "w1", "up": "w3", "down": "w2"}


def _renames(cfg: ModelConfig, arch: str) -> dict[str, str]:
    """glassroom name -> HF name for every tensor that is copied as is (experts aside)."""
    names = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    if not cfg.tie_embeddings:
        names["head.weight"] = "lm_head.weight"
    for i in range(cfg.n_layers):
        g, h = f"blocks.{i}.", f"model.layers.{i}."
        names[g + "attn_norm.weight"] = h + "input_layernorm.weight"
        names[g + "mlp_norm.weight"] = h + "post_attention_layernorm.weight"
        for ours, theirs in _ATTN.items():
            names[f"{g}attn.{ours}.weight"] = f"{h}self_attn.{theirs}.weight"
        if cfg.qk_norm:
            names[g + "attn.q_norm.weight"] = h + "self_attn.q_norm.weight"
            names[g + "attn.k_norm.weight"] = h + "self_attn.k_norm.weight"
        if not cfg.is_moe_layer(i):
            for ours, theirs in _FFN.items():
                names[f"{g}mlp.{ours}.weight"] = f"{h}mlp.{theirs}.weight"
            continue
        moe = "block_sparse_moe" if arch == "mixtral" else "mlp"
        names[g + "mlp.router.weight"] = f"{h}{moe}.gate.weight"
        if arch in SIGMOID_ARCHS:
            names[g + "mlp.router_bias"] = h + "mlp.gate.e_score_correction_bias"
        if cfg.moe.n_shared_experts:
            for ours, theirs in _FFN.items():
                names[f"{g}mlp.shared_experts.{ours}.weight"] = f"{h}mlp.shared_experts.{theirs}.weight"
    return names


def _expert_key(arch: str, layer: int, expert: int, part: str) -> str:
    if arch == "mixtral":
        return f"model.layers.{layer}.block_sparse_moe.experts.{expert}.{_MIXTRAL[part]}.weight"
    return f"model.layers.{layer}.mlp.experts.{expert}.{_FFN[part]}.weight"


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig, arch: str) -> dict[str, torch.Tensor]:
    """HF tensors (contiguous, in HF's layout) from a glassroom state dict."""
    out = {theirs: state[ours].contiguous() for ours, theirs in _renames(cfg, arch).items()}
    for i in range(cfg.n_layers):
        if not cfg.is_moe_layer(i):
            continue
        if arch in SIGMOID_ARCHS and not cfg.moe.n_shared_experts:  # architectures.exported_shared_experts
            like = state["embed.weight"]
            for part in ("gate", "up"):
                out[f"model.layers.{i}.mlp.shared_experts.{_FFN[part]}.weight"] = like.new_zeros(cfg.moe.d_expert, cfg.d_model)
            out[f"model.layers.{i}.mlp.shared_experts.down_proj.weight"] = like.new_zeros(cfg.d_model, cfg.moe.d_expert)
        gate_up, down = state[f"blocks.{i}.mlp.experts.gate_up_proj"], state[f"blocks.{i}.mlp.experts.down_proj"]
        d = cfg.moe.d_expert
        for e in range(cfg.moe.n_experts):
            out[_expert_key(arch, i, e, "gate")] = gate_up[e, :, :d].T.contiguous()
            out[_expert_key(arch, i, e, "up")] = gate_up[e, :, d:].T.contiguous()
            out[_expert_key(arch, i, e, "down")] = down[e].T.contiguous()
    return out


def from_hf(tensors: dict[str, torch.Tensor], cfg: ModelConfig, arch: str, where: str) -> dict[str, torch.Tensor]:
    """A glassroom state dict from HF tensors; a missing tensor is one line naming it."""
    def take(name: str) -> torch.Tensor:
        if name not in tensors:
            raise GlassroomError(f"{where}: lacks the tensor {name}; the weights do not match config.json")
        return tensors[name]

    state = {ours: take(theirs) for ours, theirs in _renames(cfg, arch).items()}
    for i in range(cfg.n_layers):
        if not cfg.is_moe_layer(i):
            continue
        fused = f"model.layers.{i}.mlp.experts.gate_up_proj"
        if fused in tensors:  # transformers 5's in-memory layout: (E, 2I, H) and (E, H, I)
            gate_up = take(fused).transpose(1, 2)
            down = take(f"model.layers.{i}.mlp.experts.down_proj").transpose(1, 2)
        else:
            experts = range(cfg.moe.n_experts)
            try:
                gate_up = torch.stack([torch.cat([take(_expert_key(arch, i, e, "gate")).T,
                                                  take(_expert_key(arch, i, e, "up")).T], dim=1) for e in experts])
                down = torch.stack([take(_expert_key(arch, i, e, "down")).T for e in experts])
            except RuntimeError:
                raise GlassroomError(f"{where}: the experts of layer {i} have different shapes; the weights "
                                     "do not match config.json") from None
        state[f"blocks.{i}.mlp.experts.gate_up_proj"] = gate_up.contiguous()
        state[f"blocks.{i}.mlp.experts.down_proj"] = down.contiguous()
        if arch not in SIGMOID_ARCHS:
            state[f"blocks.{i}.mlp.router_bias"] = torch.zeros(cfg.moe.n_experts)
    return state
