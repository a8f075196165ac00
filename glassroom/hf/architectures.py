"""Glassroom models as Hugging Face `transformers` architectures: the config mapping both ways and
the tensor names of each architecture.

`choose(cfg)` names the one architecture that computes exactly what a glassroom model computes
(docs/export.md has the table), or raises one line naming the option none expresses.
`hf_config(cfg, arch)` writes its config.json mapping; `model_config(hf, where)` reads one back.
The tensors' names are glassroom/hf/tensors.py's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from glassroom.errors import GlassroomError
from glassroom.model.config import ModelConfig, RopeScaling

CLASSES = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM",
    "glm4_moe": "Glm4MoeForCausalLM", "dots1": "Dots1ForCausalLM",
}
SIGMOID_ARCHS = ("glm4_moe", "dots1")


def _refuse(key: str, what: str) -> GlassroomError:
    return GlassroomError(f"model.{key}: {what}; no transformers architecture expresses this model exactly "
                          "(docs/export.md lists what each one takes)")


def _slides_everywhere(cfg: ModelConfig) -> bool:
    return all(cfg.layer_window(i) is not None for i in range(cfg.n_layers))


def choose(cfg: ModelConfig, router_bias_zero: bool = True) -> str:
    """The architecture for `cfg`; `router_bias_zero`: every router bias of the weights is 0."""
    moe = cfg.moe
    if moe is None or moe.first_dense_layers >= cfg.n_layers:
        if cfg.qk_norm:
            return "qwen3"
        if cfg.sliding_window is None:
            return "llama"
        if cfg.global_every is None or _slides_everywhere(cfg):
            return "mistral"
        raise _refuse("global_every", "sliding and global layers without qk_norm (Qwen3 has them with qk_norm: true)")
    if moe.router == "softmax":
        if not router_bias_zero:
            raise _refuse("moe.bias_update_rate", "softmax routing with a router bias moved by balancing "
                          "(the weights' router_bias is not zero; train softmax routers with bias_update_rate: 0)")
        if moe.routed_scale != 1.0:
            raise _refuse("moe.routed_scale", f"{moe.routed_scale} with softmax routing (Qwen3-MoE and Mixtral take 1.0)")
        if moe.n_shared_experts:
            raise _refuse("moe.n_shared_experts", "shared experts with softmax routing (use router: sigmoid)")
        if cfg.sliding_window is not None and not _slides_everywhere(cfg):
            raise _refuse("global_every", "global layers in a softmax-routed MoE (Qwen3-MoE and Mixtral slide on every layer or none)")
        if cfg.qk_norm:
            return "qwen3_moe"
        if not moe.renormalises():
            raise _refuse("moe.norm_topk_prob", "false without qk_norm (Mixtral always renormalises; Qwen3-MoE needs qk_norm: true)")
        if moe.first_dense_layers:
            raise _refuse("moe.first_dense_layers", "leading dense layers without qk_norm in a softmax MoE (Qwen3-MoE needs qk_norm: true)")
        return "mixtral"
    if moe.n_experts < 2:
        raise _refuse("moe.n_experts", "1 with sigmoid routing (GLM-4-MoE and dots.llm1 need 2 or more)")
    if cfg.qk_norm:
        return "dots1"
    if cfg.sliding_window is not None:
        raise _refuse("sliding_window", "sliding layers in a sigmoid MoE without qk_norm (dots.llm1 has them with qk_norm: true)")
    return "glm4_moe"


def import_note(hf: dict, where: str) -> Optional[str]:
    """One line for a folder whose architecture glassroom reads but exports under another name: a
    GLM-4-MoE with use_qk_norm is read as a sigmoid MoE with qk_norm, which `choose` exports as
    dots.llm1 (the same tensors and logits: docs/export.md)."""
    if hf.get("model_type") == "glm4_moe" and hf.get("use_qk_norm") is True:
        return (f"note: {where}: GLM-4-MoE with use_qk_norm is read as a sigmoid MoE with qk_norm, which glassroom "
                "export writes as dots.llm1 (Dots1ForCausalLM): the same tensors and logits under another "
                "model_type (docs/export.md)")
    return None


def exported_shared_experts(moe) -> int:
    """Shared experts in the exported folder: GLM-4-MoE and dots.llm1 always have one, so a model
    without is written with one whose weights are zero (its output is exactly 0)."""
    return max(1, moe.n_shared_experts)


# ------------------------------------------------------------------------------- config.json


def _rope(cfg: ModelConfig) -> dict[str, Any]:
    scaling = cfg.rope_scaling
    if scaling is None:
        return {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if scaling.type == "linear":
        return {"rope_type": "linear", "rope_theta": cfg.rope_theta, "factor": scaling.factor}
    return {"rope_type": "llama3", "rope_theta": cfg.rope_theta, "factor": scaling.factor,
            "low_freq_factor": scaling.low_freq_factor, "high_freq_factor": scaling.high_freq_factor,
            "original_max_position_embeddings": scaling.original_max_seq_len}


def hf_config(cfg: ModelConfig, arch: str, eos_token_id: int, dtype: str) -> dict[str, Any]:
    """config.json for `arch`; readable by transformers 5 (rope_parameters) and 4.5x/vLLM (rope_theta,
    rope_scaling at the top level)."""
    rope = _rope(cfg)
    out: dict[str, Any] = {
        "architectures": [CLASSES[arch]], "model_type": arch, "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.dim_per_head,
        "intermediate_size": cfg.d_ff if cfg.d_ff is not None else cfg.moe.d_expert,
        "max_position_embeddings": cfg.max_seq_len, "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings, "hidden_act": "silu", "attention_bias": False,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
        "rope_parameters": rope, "rope_theta": cfg.rope_theta,
        "rope_scaling": rope if cfg.rope_scaling is not None else None,
        "bos_token_id": None, "eos_token_id": eos_token_id, "pad_token_id": eos_token_id,
        "dtype": dtype, "torch_dtype": dtype,
    }
    layer_types = ["full_attention" if cfg.layer_window(i) is None else "sliding_attention" for i in range(cfg.n_layers)]
    if arch == "qwen3":
        out.update(use_sliding_window=cfg.sliding_window is not None, sliding_window=cfg.sliding_window,
                   max_window_layers=0, layer_types=layer_types)
    elif arch in ("mistral", "mixtral"):
        out["sliding_window"] = cfg.sliding_window
    moe = cfg.moe
    if arch == "qwen3_moe":
        out.update(num_experts=moe.n_experts, num_experts_per_tok=moe.top_k, moe_intermediate_size=moe.d_expert,
                   norm_topk_prob=moe.renormalises(), decoder_sparse_step=1,
                   mlp_only_layers=list(range(moe.first_dense_layers)),
                   use_sliding_window=cfg.sliding_window is not None, sliding_window=cfg.sliding_window,
                   max_window_layers=0, router_aux_loss_coef=moe.aux_loss_coef)
    elif arch == "mixtral":
        out.update(num_local_experts=moe.n_experts, num_experts_per_tok=moe.top_k,
                   intermediate_size=moe.d_expert, router_jitter_noise=0.0, router_aux_loss_coef=moe.aux_loss_coef)
    elif arch in SIGMOID_ARCHS:
        out.update(n_routed_experts=moe.n_experts, num_experts_per_tok=moe.top_k, moe_intermediate_size=moe.d_expert,
                   n_shared_experts=exported_shared_experts(moe), first_k_dense_replace=moe.first_dense_layers,
                   norm_topk_prob=moe.renormalises(), routed_scaling_factor=moe.routed_scale,
                   n_group=1, topk_group=1)
        if arch == "glm4_moe":
            rope["partial_rotary_factor"] = 1.0
            out.update(use_qk_norm=False, partial_rotary_factor=1.0, num_nextn_predict_layers=0)
        else:
            out.update(sliding_window=cfg.sliding_window, max_window_layers=cfg.n_layers, layer_types=layer_types)
    return out


def _get(hf: dict, key: str, where: str, default: Any = dataclasses.MISSING) -> Any:
    value = hf.get(key, default)
    if value is dataclasses.MISSING or value is None:
        raise GlassroomError(f"{where}: lacks {key}; not a complete {hf.get('model_type')} config")
    return value


def _windows(hf: dict, where: str) -> tuple[Optional[int], Optional[int]]:
    """(sliding_window, global_every) from layer_types (or a window on every layer)."""
    n = int(hf["num_hidden_layers"])
    window = hf.get("sliding_window")
    if hf.get("model_type") in ("llama", "glm4_moe"):  # transformers' Llama and GLM-4-MoE ignore the key
        return None, None
    types = hf.get("layer_types")
    if hf.get("model_type") not in ("qwen3", "dots1") and types is not None:
        # Mistral, Mixtral and Qwen3-MoE have no layer_types of their own (transformers warns); which
        # layers slide then is not one rule glassroom can match: only 'every layer sliding' is read.
        if window is None or not isinstance(types, list) or any(t != "sliding_attention" for t in types):
            raise GlassroomError(f"{where}: layer_types in a {hf.get('model_type')} config.json (its layers all "
                                 "slide or none do); remove the key, or use Qwen3 for sliding and global layers")
        types = None
    if window is None or (hf.get("model_type") in ("qwen3", "qwen3_moe") and not hf.get("use_sliding_window")):
        return None, None
    if types is None:
        if hf.get("model_type") in ("qwen3", "dots1"):
            start = int(hf.get("max_window_layers", 0))
            types = ["sliding_attention" if i >= start else "full_attention" for i in range(n)]
        else:
            return int(window), None
    kinds = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != n or any(t not in kinds for t in types):
        raise GlassroomError(f"{where}: layer_types must list {n} entries (num_hidden_layers), each "
                             f"sliding_attention or full_attention; got {str(types)[:80]}")
    sliding = [t == "sliding_attention" for t in types]
    if not any(sliding):
        return None, None
    if all(sliding):
        return int(window), None
    for every in range(2, n + 1):
        if all(sliding[i] == ((i + 1) % every != 0) for i in range(n)):
            return int(window), every
    raise GlassroomError(f"{where}: layer_types {types} is not a pattern glassroom has (every layer sliding, "
                         "or every k-th layer global)")


def _rope_scaling(rope: dict, where: str) -> Optional[RopeScaling]:
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return None
    if kind == "linear":
        return RopeScaling(type="linear", factor=float(rope["factor"]))
    if kind == "llama3":
        return RopeScaling(type="llama3", factor=float(rope["factor"]), low_freq_factor=float(rope["low_freq_factor"]),
                           high_freq_factor=float(rope["high_freq_factor"]),
                           original_max_seq_len=int(rope["original_max_position_embeddings"]))
    raise GlassroomError(f"{where}: rope_parameters.rope_type {kind!r} is not one glassroom has (default, linear, llama3)")


# Settings a config.json may leave out, for which transformers then takes its config class's default
# (Mixtral: rms_norm_eps 1e-5 and rope_theta 1e6; GLM-4-MoE: norm_topk_prob true, first_k_dense_replace
# 1; Mistral: sliding_window 4096; ...): read from the installed transformers, so glassroom's model of a
# hand-written config.json computes what transformers computes.
_DEFAULTED = ("rms_norm_eps", "tie_word_embeddings", "hidden_act", "attention_bias", "mlp_bias", "norm_topk_prob",
              "routed_scaling_factor", "n_group", "topk_group", "sliding_window", "use_sliding_window",
              "max_window_layers", "first_k_dense_replace", "n_shared_experts", "use_qk_norm", "decoder_sparse_step",
              "mlp_only_layers", "num_experts_per_tok")
_CONFIG_CLASSES = {name: cls.replace("ForCausalLM", "Config") for name, cls in CLASSES.items()}


def _with_defaults(hf: dict, arch: str) -> dict:
    import transformers  # lazy: transformers loads only when this runs

    default = getattr(transformers, _CONFIG_CLASSES[arch])()
    out = dict(hf)
    for key in _DEFAULTED:
        if key not in out and hasattr(default, key):
            out[key] = getattr(default, key)
    if not any(key in out for key in ("rope_parameters", "rope_scaling", "rope_theta")):
        out["rope_parameters"] = dict(getattr(default, "rope_parameters", None) or {"rope_theta": default.rope_theta})
    return out


def model_config(hf: dict, where: str) -> dict[str, Any]:
    """The `model:` mapping (plain values, as in a YAML file) that `hf` (a config.json) describes."""
    arch = hf.get("model_type")
    if not isinstance(arch, str) or arch not in CLASSES:
        raise GlassroomError(f"{where}: model_type {arch!r} (architectures {hf.get('architectures')}) is not one "
                             f"glassroom reads ({', '.join(CLASSES)})")
    hf = _with_defaults(hf, arch)
    if hf.get("hidden_act", "silu") != "silu":
        raise GlassroomError(f"{where}: hidden_act {hf.get('hidden_act')!r}; glassroom's feed-forwards are SwiGLU (silu)")
    if hf.get("attention_bias") or hf.get("mlp_bias"):
        raise GlassroomError(f"{where}: attention_bias/mlp_bias true; glassroom's projections have no bias")
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if float(rope.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0 if arch != "glm4_moe" else 0.5))) != 1.0:
        raise GlassroomError(f"{where}: partial_rotary_factor is not 1.0; glassroom rotates the whole head")
    heads = int(_get(hf, "num_attention_heads", where))
    window, every = _windows(hf, where)
    model: dict[str, Any] = {
        "vocab_size": int(_get(hf, "vocab_size", where)), "d_model": int(_get(hf, "hidden_size", where)),
        "n_layers": int(_get(hf, "num_hidden_layers", where)), "n_heads": heads,
        "n_kv_heads": int(hf.get("num_key_value_heads") or heads),
        "head_dim": int(hf.get("head_dim") or int(hf["hidden_size"]) // heads),
        "d_ff": int(_get(hf, "intermediate_size", where)), "max_seq_len": int(_get(hf, "max_position_embeddings", where)),
        "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
        "qk_norm": arch in ("qwen3", "qwen3_moe", "dots1") or (arch == "glm4_moe" and bool(hf.get("use_qk_norm"))),
        "rope_theta": float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
        "sliding_window": window, "global_every": every,
        "norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
    }
    scaling = _rope_scaling(rope, where)
    model["rope_scaling"] = dataclasses.asdict(scaling) if scaling else None
    if arch == "qwen3_moe":
        dense = sorted(hf.get("mlp_only_layers") or [])
        if dense != list(range(len(dense))) or int(hf.get("decoder_sparse_step", 1)) != 1:
            raise GlassroomError(f"{where}: mlp_only_layers {dense} / decoder_sparse_step: glassroom's dense layers "
                                 "are the first ones (moe.first_dense_layers)")
        model["moe"] = {"n_experts": int(_get(hf, "num_experts", where, hf.get("num_local_experts"))), "top_k": int(hf["num_experts_per_tok"]),
                        "d_expert": int(hf["moe_intermediate_size"]), "first_dense_layers": len(dense),
                        "router": "softmax", "norm_topk_prob": bool(hf.get("norm_topk_prob", False)),
                        "bias_update_rate": 0.0}
    elif arch == "mixtral":
        model["moe"] = {"n_experts": int(hf["num_local_experts"]), "top_k": int(hf["num_experts_per_tok"]),
                        "d_expert": model.pop("d_ff"), "router": "softmax", "norm_topk_prob": True,
                        "bias_update_rate": 0.0}
    elif arch in SIGMOID_ARCHS:
        if int(hf.get("n_group") or 1) != 1 or int(hf.get("topk_group") or 1) != 1:
            raise GlassroomError(f"{where}: n_group/topk_group above 1 (expert groups); glassroom routes without groups")
        if not hf.get("n_shared_experts"):
            raise GlassroomError(f"{where}: n_shared_experts is 0; glassroom reads this architecture with shared experts only")
        model["moe"] = {"n_experts": int(_get(hf, "n_routed_experts", where, hf.get("num_local_experts"))), "top_k": int(hf["num_experts_per_tok"]),
                        "d_expert": int(hf["moe_intermediate_size"]), "n_shared_experts": int(hf["n_shared_experts"]),
                        "first_dense_layers": int(hf.get("first_k_dense_replace") or 0), "router": "sigmoid",
                        "norm_topk_prob": bool(hf.get("norm_topk_prob", False)),
                        "routed_scale": float(hf.get("routed_scaling_factor", 1.0))}
    if "moe" in model and model["moe"].get("first_dense_layers", 0) == 0:
        model.pop("d_ff", None)  # no dense layer: intermediate_size is unused
    return model
