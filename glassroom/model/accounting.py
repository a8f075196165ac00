"""Parameter counts, FLOPs per token, time and memory per GPU, from the config alone.

Nothing here allocates a model: the numbers behind `glassroom plan` come from the shapes in
ModelConfig, and tests check them against the instantiated model (parameter counts on the meta
device; memory against torch's allocations, FSDP2's shards and autograd's saved tensors:
tests/model/test_accounting_memory.py). docs/plan.md writes out every formula.

Memory per GPU (`memory_per_gpu`) models the trainer's layout on a (dp, ep) mesh: non-expert
parameters FSDP2-sharded over all dp * ep GPUs, routed experts split over ep then FSDP2-sharded over
dp (padding included); fp32 master weights, gradients and AdamW moments; the bf16 blocks gathered;
activations per micro-batch under each activation-checkpointing mode; logits; all-to-all buffers.

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

from glassroom.errors import GlassroomError
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

# Memory per GPU in GiB (2**30 bytes), as the vendors' data sheets give it (H100 SXM 80 GB, H200 141 GB,
# B200 180 GB in a DGX B200, GB200 NVL72 13.4 TB over 72 GPUs, A100 80 GB); a little less is usable
# (the CUDA context and the allocator's fragmentation take some).
GPU_MEMORY_GIB = {
    "a100": 80,
    "h100": 80,
    "h200": 141,
    "b200": 180,
    "gb200": 186,
}
GIB = 2**30

# Bytes per parameter under mixed precision with fp32 master weights and AdamW:
WEIGHT_BYTES = 4  # fp32 master weights (a bf16 working copy is gathered per block, transiently)
GRAD_BYTES = 4  # fp32 gradients (reduced in fp32)
OPTIMIZER_BYTES = 8  # AdamW first and second moments in fp32
STEP_BYTES = 4  # AdamW's `step`: one fp32 scalar per parameter tensor

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


# ---------------------------------------------------------------------------------------- memory

AC_MODES = ("none", "full", "selective")
PRECISIONS = ("bf16", "fp32")


@dataclass(frozen=True)
class Layout:
    """How a run is laid out and fed: the (dp, ep) mesh, micro-batch, sequence length, activation
    checkpointing and compute precision."""

    dp: int = 1
    ep: int = 1
    micro_batch: int = 1
    seq_len: int = 1
    activation_checkpointing: str = "none"
    precision: str = "bf16"

    @property
    def gpus(self) -> int:
        return self.dp * self.ep

    @property
    def regime(self) -> str:
        """fp32; `autocast` (one process: fp32 weights, bf16 matmuls); `fsdp-bf16` (FSDP2 gathers
        bf16 parameters, no autocast: the residual stream itself is bf16)."""
        if self.precision == "fp32":
            return "fp32"
        return "fsdp-bf16" if self.gpus > 1 else "autocast"


def block_tensors(cfg: ModelConfig, moe: bool) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name inside the block, shape, is a routed-expert tensor) of one block's parameters."""
    d, heads, kv, hd = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.dim_per_head
    out = [("attn_norm.weight", (d,), False), ("attn.wq.weight", (heads * hd, d), False),
           ("attn.wk.weight", (kv * hd, d), False), ("attn.wv.weight", (kv * hd, d), False),
           ("attn.wo.weight", (d, heads * hd), False)]
    if cfg.qk_norm:
        out += [("attn.q_norm.weight", (hd,), False), ("attn.k_norm.weight", (hd,), False)]
    out.append(("mlp_norm.weight", (d,), False))
    if moe:
        m = cfg.moe
        out += [("mlp.router.weight", (m.n_experts, d), False),
                ("mlp.experts.gate_up_proj", (m.n_experts, d, 2 * m.d_expert), True),
                ("mlp.experts.down_proj", (m.n_experts, m.d_expert, d), True)]
        if m.n_shared_experts:
            width = m.n_shared_experts * m.d_expert
            out += [("mlp.shared_experts.gate.weight", (width, d), False),
                    ("mlp.shared_experts.up.weight", (width, d), False),
                    ("mlp.shared_experts.down.weight", (d, width), False)]
    else:
        out += [("mlp.gate.weight", (cfg.d_ff, d), False), ("mlp.up.weight", (cfg.d_ff, d), False),
                ("mlp.down.weight", (d, cfg.d_ff), False)]
    return out


def root_tensors(cfg: ModelConfig) -> list[tuple[str, tuple[int, ...], bool]]:
    """The parameters outside the blocks: embedding, final norm, untied head."""
    out = [("embed.weight", (cfg.vocab_size, cfg.d_model), False), ("norm.weight", (cfg.d_model,), False)]
    if not cfg.tie_embeddings:
        out.append(("head.weight", (cfg.vocab_size, cfg.d_model), False))
    return out


def param_tensors(cfg: ModelConfig) -> list[tuple[str, tuple[int, ...], bool]]:
    """Every parameter as (name, shape, is a routed-expert tensor), named as Transformer names them."""
    out = list(root_tensors(cfg))
    for layer in range(cfg.n_layers):
        out += [(f"blocks.{layer}.{n}", shape, e) for n, shape, e in block_tensors(cfg, cfg.is_moe_layer(layer))]
    return out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


def expert_shard_dim(shape: tuple[int, ...], shards: int) -> int:
    """The dimension FSDP2 splits a 3-D routed-expert tensor along: dim 0 (the experts) when it
    divides evenly, else the first other dimension that does (FSDP2 shards other dimensions only
    evenly), else dim 0 padded. FSDP2 gives every rank ceil(size / shards) of dim 0: 384 experts
    over 2,048 ranks would allocate a whole expert per rank (5.3x the even share), while d_model
    splits evenly."""
    if shape[0] % shards == 0:
        return 0
    return next((dim for dim in range(1, len(shape)) if shape[dim] % shards == 0), 0)


def shard_numel(shape: tuple[int, ...], expert: bool, layout: Layout) -> int:
    """Elements one GPU holds of a parameter: FSDP2 splits one dimension into equal chunks, the last
    padded (every rank allocates ceil(size / shards) of it): dim 0 for every tensor but the routed
    experts', which first keep n_experts / ep experts (the ep split) and are then chunked over dp
    along expert_shard_dim (train/parallel.py uses the same rule); every other tensor over all
    dp * ep GPUs."""
    shape, shards = tuple(shape), layout.gpus
    if expert:
        shape, shards = (shape[0] // layout.ep, *shape[1:]), layout.dp
    dim = expert_shard_dim(shape, shards) if expert else 0
    return -(-shape[dim] // shards) * _numel(shape) // shape[dim]


def _unit_bytes(tensors, layout: Layout, per_param: int) -> int:
    """Bytes of an FSDP unit gathered whole on a GPU: expert tensors hold this GPU's ep share only."""
    return sum(_numel(shape) // (layout.ep if expert else 1) for _, shape, expert in tensors) * per_param


def _layer_kinds(cfg: ModelConfig) -> dict[bool, int]:
    """How many blocks are MoE (True) and dense (False): every block of a kind costs the same."""
    moe = 0 if cfg.moe is None else max(0, cfg.n_layers - cfg.moe.first_dense_layers)
    return {kind: n for kind, n in ((False, cfg.n_layers - moe), (True, moe)) if n}


def activation_bytes_per_layer(cfg: ModelConfig, moe: bool, layout: Layout) -> dict[str, int]:
    """Bytes one block saves for backward, per micro-batch, under no checkpointing (`none`), under
    `selective` (matmul and attention outputs, and the block's input), and its `input` (all `full`
    keeps). docs/plan.md writes the terms out."""
    t = layout.micro_batch * layout.seq_len
    d, heads, kv, hd = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.dim_per_head
    regime = layout.regime
    a = 4 if regime == "fp32" else 2  # bytes of a compute-precision element
    residual = 2 if regime == "fsdp-bf16" else 4  # the residual stream's element

    def norm(rows: int, width: int) -> int:  # RMSNorm in fp32: input, normalised, 1/rms
        return rows * (8 * width + 4)

    def linear_inputs(users: int) -> int:
        """The normalised input of `users` projections: fp32 shared, autocast copies it per matmul."""
        if regime == "fp32":
            return 4 * t * d
        return (users if regime == "autocast" else 1) * a * t * d

    none = norm(t, d) + linear_inputs(3)  # attention: norm, q/k/v input
    if cfg.qk_norm:
        none += norm(t * heads, hd) + norm(t * kv, hd)
    none += a * t * hd * (heads + 2 * kv)  # q, k after RoPE, v: kept by SDPA
    none += a * t * heads * hd + 4 * t * heads  # SDPA output and logsumexp (flash: no score matrix)
    none += a * t * heads * hd  # the output projection's input (heads merged: a copy)
    selective = residual * t * d + a * t * hd * (heads + 2 * kv) + a * t * heads * hd + 4 * t * heads + a * t * d
    none += norm(t, d)  # the feed-forward's norm
    if moe:
        m = cfg.moe
        k, n_exp, de = m.top_k, m.n_experts, m.d_expert
        shared = m.n_shared_experts * de
        none += 4 * t * d  # the router's fp32 input
        if shared and regime != "fp32":
            none += linear_inputs(2)
        none += 2 * 4 * t * n_exp + t * k * (8 + 4) + 3 * 4 * t  # logits, scores; chosen, weights; sums
        # (experts.py) per row: routed input, gate|up, silu(gate)*up, expert output; combine weight;
        # sort order, token index, row of the token's bag; per token its bag offset; counts per expert
        none += t * k * (a * (2 * d + 3 * de) + a + 24) + 8 * t + 8 * n_exp
        none += 4 * a * t * shared  # shared experts: gate, up, silu(gate), product
        # selective keeps the router's and shared experts' matmul outputs; the routed experts run inside
        # experts.py's autograd Functions, without autograd, and the policy recomputes them whole
        selective += 4 * t * n_exp + a * t * (2 * shared + (d if shared else 0))
    else:
        none += linear_inputs(2) + 4 * a * t * cfg.d_ff  # gate, up, silu(gate), product
        selective += a * t * (2 * cfg.d_ff + d)
    return {"none": none, "selective": selective, "input": residual * t * d}


def activation_breakdown(cfg: ModelConfig, layout: Layout) -> dict[str, int]:
    """Bytes all blocks keep for backward per micro-batch under the layout's checkpointing (`kept`),
    and the extra of recomputing one block in backward (`recompute`: full, its whole activations;
    selective, what it dropped; none, 0)."""
    kinds = _layer_kinds(cfg)
    per = {moe: activation_bytes_per_layer(cfg, moe, layout) for moe in kinds}
    mode = layout.activation_checkpointing
    if mode == "none":
        return {"kept": sum(n * per[moe]["none"] for moe, n in kinds.items()), "recompute": 0}
    if mode == "full":
        return {"kept": sum(n * per[moe]["input"] for moe, n in kinds.items()),
                "recompute": max(p["none"] for p in per.values())}
    return {"kept": sum(n * per[moe]["selective"] for moe, n in kinds.items()),
            "recompute": max(p["none"] - p["selective"] for p in per.values())}


def activation_bytes(cfg: ModelConfig, layout: Layout) -> int:
    """Activations per GPU at their peak: what the blocks keep plus one block's recompute."""
    return sum(activation_breakdown(cfg, layout).values())


def head_activation_bytes(cfg: ModelConfig, layout: Layout) -> dict[str, int]:
    """The final norm and head's saved tensors, and the loss's: the fp32 log-softmax of the logits
    (`saved`); at the start of backward the logits' fp32 gradient and its compute-precision copy."""
    t = layout.micro_batch * layout.seq_len
    a = 4 if layout.regime == "fp32" else 2
    d, vocab = cfg.d_model, cfg.vocab_size
    saved = t * (8 * d + 4) + a * t * d + 4 * t * vocab  # final norm; head input; fp32 log-softmax
    return {"saved": saved, "gradient": (4 + (a if a != 4 else 0)) * t * vocab}


def memory_per_gpu(cfg: ModelConfig, layout: Layout) -> dict:
    """Bytes per GPU, line by line, of training `cfg` under `layout` (docs/plan.md: the formulas)."""
    kinds = _layer_kinds(cfg)
    expert_numel = non_expert_numel = n_tensors = 0
    for moe, n in kinds.items():
        for _, shape, expert in block_tensors(cfg, moe):
            share = shard_numel(shape, expert, layout) * n
            if expert:
                expert_numel += share
            else:
                non_expert_numel += share
            n_tensors += n
    for _, shape, expert in root_tensors(cfg):
        non_expert_numel += shard_numel(shape, expert, layout)
        n_tensors += 1
    numel = expert_numel + non_expert_numel
    regime = layout.regime
    a = 4 if regime == "fp32" else 2
    if layout.gpus == 1:
        # autocast keeps a bf16 copy of every matmul weight from the forward to the backward:
        # all but norms, routers and the embedding table (which the tied head does multiply); a
        # checkpointed block casts again when it is recomputed, one block at a time.
        gathered, reduce = 0, 0
        if regime == "autocast":
            per_block = {moe: sum(_numel(shape) for name, shape, _ in block_tensors(cfg, moe)
                                  if "norm" not in name and "router" not in name) for moe in kinds}
            if layout.activation_checkpointing == "none":
                copies = sum(n * per_block[moe] for moe, n in kinds.items())
            else:
                copies = max(per_block.values())
            gathered = a * (copies + cfg.vocab_size * cfg.d_model)
    else:
        # FSDP2: the root (embedding, final norm, head) stays gathered from forward to backward; blocks
        # are gathered one at a time with the next one prefetched; a block's gradient is reduced from
        # its unsharded compute-precision copy (plus an fp32 copy to reduce-scatter in bf16).
        biggest = max(_unit_bytes(block_tensors(cfg, moe), layout, a) for moe in kinds)
        root = _unit_bytes(root_tensors(cfg), layout, a)
        gathered = root + 2 * biggest
        reduce = biggest * (a + (4 if a != 4 else 0)) // a
    head = head_activation_bytes(cfg, layout)
    all_to_all = 0
    if kinds.get(True) and layout.ep > 1:  # MoE layers exchange tokens; dense ones do not
        # A GPU sends its t*k rows (fewer when a capacity factor below 1 drops some) and receives as
        # many at a balanced load; with a capacity factor, at most factor x that, and never more
        # than all ep senders' rows.
        rows = layout.micro_batch * layout.seq_len * cfg.moe.top_k
        factor = cfg.moe.capacity_factor
        send, receive = (rows, rows) if factor is None else (rows * min(1.0, factor), rows * min(factor, layout.ep))
        all_to_all = int((send + receive) * cfg.d_model * a)
    lines = {
        "weights": numel * WEIGHT_BYTES,
        "gradients": numel * GRAD_BYTES,
        "optimizer": numel * OPTIMIZER_BYTES + n_tensors * STEP_BYTES,
        "gathered_weights": gathered,
        "gradient_reduce": reduce,
        "activations": activation_bytes(cfg, layout),
        "logits": head["saved"] + head["gradient"],
        "all_to_all": all_to_all,
    }
    lines["total"] = sum(lines.values())
    return {"bytes": lines, "params": {"non_expert": non_expert_numel, "expert": expert_numel,
                                       "experts_per_gpu": cfg.moe.n_experts // layout.ep if cfg.moe else 0}}


def resolve_mesh(cfg: ModelConfig, gpus: Optional[int], dp: Optional[int], ep: Optional[int]) -> tuple[int, int]:
    """(dp, ep) from any of --gpus, --dp, --ep: any two give the third; alone, --gpus is dp (ep 1) and
    --dp or --ep take 1 for the other; all three must agree (dp * ep = gpus);
    a GlassroomError naming the option when they disagree or ep does not fit the model."""
    given_ep = ep
    for option, value in (("--gpus", gpus), ("--dp", dp), ("--ep", ep)):
        if value is not None and value < 1:
            raise GlassroomError(f"{option}: must be at least 1, got {value}")
    if gpus is not None and dp is not None and ep is None:
        if gpus % dp:
            raise GlassroomError(f"--dp: {dp} does not divide --gpus {gpus}; give --gpus a multiple of {dp}")
        ep = gpus // dp
    ep = 1 if ep is None else ep
    if dp is None:
        if gpus is None:
            dp = 1
        elif gpus % ep:
            raise GlassroomError(f"--ep: {ep} does not divide --gpus {gpus}; give --gpus a multiple of {ep}, "
                                 "or --dp and --ep")
        else:
            dp = gpus // ep
    if gpus is not None and dp * ep != gpus:
        raise GlassroomError(f"--gpus: {gpus} is not --dp {dp} x --ep {ep} = {dp * ep}; give two of the three")
    if ep > 1:
        if cfg.moe is None:
            derived = "" if given_ep is not None else f" (--gpus {gpus} / --dp {dp})"
            raise GlassroomError(f"--ep: {ep}{derived} needs a Mixture-of-Experts model (model.moe); this model is "
                                 "dense: use --ep 1" + ("" if given_ep is not None else f", i.e. --dp {gpus}"))
        if cfg.moe.n_experts % ep:
            raise GlassroomError(f"--ep: {ep} does not divide model.moe.n_experts ({cfg.moe.n_experts}); "
                                 "give an ep that divides it")
    return dp, ep


def plan(
    cfg: ModelConfig,
    *,
    seq_len: Optional[int] = None,
    tokens: Optional[float] = None,
    gpu: Optional[str] = None,
    gpus: Optional[int] = None,
    mfu: float = 0.4,
    dp: Optional[int] = None,
    ep: Optional[int] = None,
    micro_batch: int = 1,
    activation_checkpointing: str = "none",
    precision: str = "bf16",
    gpu_memory: Optional[float] = None,
) -> dict:
    """Everything `glassroom plan` reports, as one JSON-ready mapping. `gpu_memory` (bytes, default
    the `gpu`'s from GPU_MEMORY_GIB) adds whether the memory per GPU fits and by how much."""
    counts = count_params(cfg)
    seq_len = seq_len or cfg.max_seq_len
    dp, ep = resolve_mesh(cfg, gpus, dp, ep)
    if micro_batch < 1:
        raise GlassroomError(f"--micro-batch: must be at least 1 sequence, got {micro_batch}")
    if activation_checkpointing not in AC_MODES:
        raise GlassroomError(f"--activation-checkpointing: {activation_checkpointing!r} is not one of "
                             f"{', '.join(AC_MODES)}")
    if precision not in PRECISIONS:
        raise GlassroomError(f"--precision: {precision!r} is not one of {', '.join(PRECISIONS)}")
    layout = Layout(dp=dp, ep=ep, micro_batch=micro_batch, seq_len=seq_len,
                    activation_checkpointing=activation_checkpointing, precision=precision)
    gpus = layout.gpus
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
    result["mesh"] = {"dp": dp, "ep": ep}
    result["micro_batch"] = micro_batch
    result["activation_checkpointing"] = activation_checkpointing
    result["precision"] = precision
    try:
        memory = memory_per_gpu(cfg, layout)
        too_big = memory["bytes"]["total"] > 1e300  # beyond this, floats (and JSON readers) overflow
    except OverflowError:
        too_big = True
    if too_big:
        raise GlassroomError("--micro-batch x --seq-len: the memory per GPU is beyond what a float can hold; "
                             "give smaller sizes")
    result["memory_bytes_per_gpu"] = memory["bytes"]
    result["params_per_gpu"] = memory["params"]
    if gpu is not None:
        result["gpu"] = gpu
        result["mfu"] = mfu
        result["peak_flops_per_gpu"] = GPU_PEAK_BF16[gpu]
        if tokens is not None:
            seconds = per_token * tokens / (gpus * GPU_PEAK_BF16[gpu] * mfu)
            result["days"] = seconds / 86400
    if gpu_memory is None and gpu is not None:
        gpu_memory = GPU_MEMORY_GIB[gpu] * GIB
    if gpu_memory is not None:
        result["gpu_memory_bytes"] = gpu_memory
        result["headroom_bytes"] = gpu_memory - memory["bytes"]["total"]
        result["fits"] = result["headroom_bytes"] >= 0
    return result
