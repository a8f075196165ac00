"""`glassroom plan`'s memory per GPU checked against what torch allocates.

Parameters, gradients and AdamW state against a real step on one process; the per-GPU shares on a
(dp, ep) mesh against the shards FSDP2 and expert parallelism really make (a fake process group:
one process plays rank 0 of the mesh, collectives do nothing); activations against the bytes
autograd saves for backward (torch.autograd.graph.saved_tensors_hooks) in the three precision
regimes the plan models.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from glassroom.errors import GlassroomError
from glassroom.model import accounting as A
from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import build_model

# activations estimated within this fraction of the bytes autograd saves (measured: 0.1% to 1.7% low)
ACTIVATION_TOLERANCE = 0.05

MOE = ModelConfig(vocab_size=250, d_model=64, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=128, max_seq_len=64,
                  qk_norm=True, moe=MoEConfig(n_experts=4, top_k=2, d_expert=32, n_shared_experts=1,
                                              first_dense_layers=1))
MODELS = {
    "moe_shared_qk_first_dense": MOE,
    "dense": ModelConfig(vocab_size=512, d_model=64, n_layers=3, n_heads=4, d_ff=128, max_seq_len=64),
    "dense_tied_gqa": ModelConfig(vocab_size=300, d_model=48, n_layers=2, n_heads=6, n_kv_heads=3, d_ff=96,
                                  max_seq_len=64, tie_embeddings=True),
    "moe_wide_top4": ModelConfig(vocab_size=256, d_model=96, n_layers=2, n_heads=6, n_kv_heads=2, d_ff=192,
                                 max_seq_len=64, moe=MoEConfig(n_experts=16, top_k=4, d_expert=48)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_parameter_tensors_are_the_models(name):
    """The names and shapes the plan shards are exactly the model's parameters."""
    cfg = MODELS[name]
    model = build_model(cfg, device="meta")
    planned = {n: shape for n, shape, _ in A.param_tensors(cfg)}
    assert planned == {n: tuple(p.shape) for n, p in model.named_parameters()}
    experts = {n for n, _, expert in A.param_tensors(cfg) if expert}
    assert experts == {n for n in planned if ".experts." in n}


def test_states_equal_what_torch_allocates_after_a_step():
    """fp32 weights, their gradients after a backward and AdamW's state after a step (moments and
    the per-tensor step count): the plan's bytes at one GPU are torch's, to the byte."""
    torch.manual_seed(0)
    model = build_model(MOE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, MOE.vocab_size, (2, 17))
    out = model(ids[:, :-1])
    F.cross_entropy(out.logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
    optimizer.step()

    def nbytes(tensors):
        return sum(t.numel() * t.element_size() for t in tensors)

    planned = A.memory_per_gpu(MOE, A.Layout(precision="fp32"))["bytes"]
    assert planned["weights"] == nbytes(model.parameters())
    assert planned["gradients"] == nbytes(p.grad for p in model.parameters())
    assert planned["optimizer"] == nbytes(v for state in optimizer.state.values() for v in state.values())


def _rank0_shares(cfg: ModelConfig, dp: int, ep: int) -> tuple[int, int]:
    """(non-expert, expert) elements rank 0 of a dp x ep mesh holds after glassroom's parallelize."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from glassroom.train.parallel import DistInfo, parallelize

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=dp * ep)
    try:
        model = build_model(cfg)
        parallelize(model, DistInfo(rank=0, world_size=dp * ep), "fsdp", torch.device("cpu"), False, ep=ep)
        shares = {True: 0, False: 0}
        for name, param in model.named_parameters():
            shares[".experts." in name and "shared" not in name] += param.to_local().numel()
        return shares[False], shares[True]
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("dp, ep", [(1, 2), (2, 2), (3, 2), (1, 4), (3, 1), (8, 1), (4, 2)])
def test_per_gpu_shares_equal_the_real_shards(dp, ep):
    """ep 2, dp 1: each GPU holds n_experts / ep experts, whole; dp 3 over 2 local experts: FSDP2
    pads the expert dimension to ceil(2 / 3) = 1 expert per GPU (no other dimension divides by 3);
    dp 8 over 4 experts and dp 4 over 2: the expert tensors are split along d_model / d_expert
    instead, evenly; everything else over dp x ep."""
    non_expert, expert = _rank0_shares(MOE, dp, ep)
    params = A.memory_per_gpu(MOE, A.Layout(dp=dp, ep=ep))["params"]
    assert (params["non_expert"], params["expert"]) == (non_expert, expert)
    assert params["experts_per_gpu"] == MOE.moe.n_experts // ep
    per_expert = 3 * MOE.d_model * MOE.moe.d_expert
    if (dp, ep) == (1, 2):
        assert expert == 2 * per_expert * 2  # 2 MoE layers x 2 local experts
    if (dp, ep) in ((8, 1), (4, 2)):  # no padding: the even share of 2 layers x 4 experts
        assert expert * dp * ep == 2 * MOE.moe.n_experts * per_expert


def _gpu_path_model(cfg: ModelConfig):
    """The model as a GPU or expert-parallel run computes it: on a CPU experts.py may fuse dispatch,
    experts and combine (keeping less); the plan counts the unfused path."""
    model = build_model(cfg)
    for _, moe in model.moe_layers():
        moe.experts.fuse = False
    return model


def _saved_bytes(cfg: ModelConfig, regime: str, batch: int, seq: int) -> int:
    """Bytes of the distinct storages autograd saves in one forward and loss (parameters excluded):
    `fp32`; `autocast` (fp32 weights, bf16 autocast, one process); `fsdp-bf16` (bf16 parameters and
    no autocast, what FSDP2's mixed precision computes with)."""
    model = _gpu_path_model(cfg)
    if regime == "fsdp-bf16":
        model = model.bfloat16()
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in own:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    ids = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=regime == "autocast"):
            out = model(ids[:, :-1])
        F.cross_entropy(out.logits.float().flatten(0, 1), ids[:, 1:].flatten())
    return sum(seen.values())


@pytest.mark.parametrize("regime", ["fp32", "autocast", "fsdp-bf16"])
@pytest.mark.parametrize("name", ["moe_shared_qk_first_dense", "dense_tied_gqa", "moe_wide_top4"])
def test_activations_are_what_autograd_saves(name, regime):
    """At checkpointing none: the blocks' activations + the head's saved tensors (+ autocast's bf16
    weight copies, which it saves too) within ACTIVATION_TOLERANCE of the measured bytes."""
    cfg = MODELS[name]
    precision, gpus = {"fp32": ("fp32", 1), "autocast": ("bf16", 1), "fsdp-bf16": ("bf16", 2)}[regime]
    layout = A.Layout(dp=gpus, micro_batch=2, seq_len=32, precision=precision)
    assert layout.regime == regime
    estimate = A.activation_bytes(cfg, layout) + A.head_activation_bytes(cfg, layout)["saved"]
    if regime == "autocast":
        estimate += A.memory_per_gpu(cfg, layout)["bytes"]["gathered_weights"]
    measured = _saved_bytes(cfg, regime, 2, 32)
    assert estimate == pytest.approx(measured, rel=ACTIVATION_TOLERANCE)


def _malloc_in_use():
    """Bytes glibc's malloc has handed out and not taken back (every arena, mmapped blocks too):
    what torch's CPU tensors occupy, with a little of Python's own."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        pytest.skip("needs glibc 2.33 or later (mallinfo2)")
    mallinfo2.restype = MallInfo2

    def in_use() -> int:
        info = mallinfo2()
        return info.uordblks + info.hblkhd
    return in_use


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name", ["moe_shared_qk_first_dense", "dense"])
def test_checkpointing_modes_keep_what_the_plan_says(name, precision):
    """The bytes a forward leaves allocated (malloc's count, the logits taken out) under the trainer's
    train/activation_checkpointing.py: none, full and selective each within 3% of none's activations
    of the plan's kept bytes (blocks + final norm and head input + autocast's weight copies kept; the
    one-block recompute happens in backward), none and selective also within 8% of their own.
    Measured: within 1.6% of none's; none -1.3% to +1.3%, selective 1.5% to 4.6% under."""
    import gc

    from glassroom.train import activation_checkpointing

    in_use = _malloc_in_use()
    cfg = dataclasses.replace(MODELS[name], max_seq_len=128)
    batch, seq = 8, 128
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    none = A.activation_breakdown(cfg, A.Layout(micro_batch=batch, seq_len=seq, precision=precision))["kept"]
    for mode in A.AC_MODES:
        model = _gpu_path_model(cfg)
        activation_checkpointing.apply(model, mode)
        kept = []
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            model(ids)  # warm-up: lazily made tables and caches
            for _ in range(2):  # the smaller of two: the allocator now and then holds on to a block
                gc.collect()
                before = in_use()
                out = model(ids)
                kept.append(in_use() - before - out.logits.numel() * out.logits.element_size())
                del out
        kept = min(kept)
        layout = A.Layout(micro_batch=batch, seq_len=seq, precision=precision, activation_checkpointing=mode)
        estimate = A.activation_breakdown(cfg, layout)["kept"] + A.head_activation_bytes(cfg, layout)["saved"]
        estimate -= 4 * batch * seq * cfg.vocab_size  # no loss: no log-softmax kept
        if precision == "bf16":  # autocast's copies: every block's without checkpointing, else the head's
            gathered = A.memory_per_gpu(cfg, layout)["bytes"]["gathered_weights"]
            estimate += gathered if mode == "none" else 2 * cfg.vocab_size * cfg.d_model
        assert abs(estimate - kept) <= 0.03 * none, (mode, estimate, kept)
        if mode != "full":  # full keeps ~1.6 MB here, where a few untracked bytes per token weigh 5-11%
            assert estimate == pytest.approx(kept, rel=0.08), mode
        del model
        gc.collect()


def test_activations_scale_and_checkpointing_orders_them():
    """Activations are linear in micro-batch x seq; full < selective < none, and full keeps one
    block input per layer plus one block's recompute."""
    hero = dataclasses.replace(MOE, n_layers=8)
    base = A.Layout(dp=4, ep=2, micro_batch=1, seq_len=32)
    one = A.activation_bytes(hero, base)
    offsets = 7 * 8 * hero.moe.n_experts  # the counts per expert do not grow with tokens
    assert A.activation_bytes(hero, dataclasses.replace(base, micro_batch=3)) - offsets == 3 * (one - offsets)
    assert A.activation_bytes(hero, dataclasses.replace(base, seq_len=64)) - offsets == 2 * (one - offsets)
    full = A.activation_bytes(hero, dataclasses.replace(base, activation_checkpointing="full"))
    selective = A.activation_bytes(hero, dataclasses.replace(base, activation_checkpointing="selective"))
    assert full < selective < one
    per_moe = A.activation_bytes_per_layer(hero, True, base)
    per_dense = A.activation_bytes_per_layer(hero, False, base)
    assert per_moe["input"] == 2 * 32 * hero.d_model  # a bf16 residual under FSDP2
    assert full == 8 * per_moe["input"] + max(per_moe["none"], per_dense["none"])


def test_all_to_all_is_send_and_receive_of_one_layer():
    layout = A.Layout(dp=2, ep=2, micro_batch=2, seq_len=32)
    rows = 2 * 32 * MOE.moe.top_k
    assert A.memory_per_gpu(MOE, layout)["bytes"]["all_to_all"] == 2 * rows * MOE.d_model * 2
    def with_factor(factor):
        capped = dataclasses.replace(MOE, moe=dataclasses.replace(MOE.moe, capacity_factor=factor))
        return A.memory_per_gpu(capped, layout)["bytes"]["all_to_all"] / (rows * MOE.d_model * 2)
    assert with_factor(1.5) == 1 + 1.5  # sends its rows, receives up to 1.5x a balanced share
    assert with_factor(0.5) == 0.5 + 0.5  # drops: half the rows at most, both ways
    assert with_factor(1e9) == 1 + 2  # never more than what the ep = 2 senders hold
    assert A.memory_per_gpu(MOE, dataclasses.replace(layout, ep=1))["bytes"]["all_to_all"] == 0
    all_dense = dataclasses.replace(MOE, moe=dataclasses.replace(MOE.moe, first_dense_layers=MOE.n_layers))
    assert A.memory_per_gpu(all_dense, layout)["bytes"]["all_to_all"] == 0


def test_gathered_weights_and_total():
    """FSDP2: the root (embedding, norm, head) plus two of the largest block in bf16, experts at
    this GPU's ep share; the total is the sum of the lines; fits and headroom from the GPU memory."""
    layout = A.Layout(dp=2, ep=2, seq_len=MOE.max_seq_len)  # plan's default: micro-batch 1 x max_seq_len
    lines = A.memory_per_gpu(MOE, layout)["bytes"]
    root = 2 * (2 * MOE.vocab_size * MOE.d_model + MOE.d_model)
    blocks = build_model(MOE, device="meta").blocks
    experts = 3 * MOE.d_model * MOE.moe.d_expert * MOE.moe.n_experts
    moe_block = sum(p.numel() for p in blocks[1].parameters()) - experts + experts // 2
    dense_block = sum(p.numel() for p in blocks[0].parameters())
    assert lines["gathered_weights"] == root + 2 * 2 * max(moe_block, dense_block)
    wide = dataclasses.replace(MOE, moe=dataclasses.replace(MOE.moe, n_experts=16))  # now the MoE block is larger
    moe_block += 3 * (experts // 2) + MOE.d_model * 12  # 12 more experts (half here) and router rows
    assert moe_block > dense_block
    assert A.memory_per_gpu(wide, layout)["bytes"]["gathered_weights"] == root + 2 * 2 * moe_block
    assert lines["total"] == sum(v for k, v in lines.items() if k != "total")
    report = A.plan(MOE, dp=2, ep=2, gpu_memory=lines["total"] + 5)
    assert report["fits"] and report["headroom_bytes"] == 5
    report = A.plan(MOE, dp=2, ep=2, gpu="h200")
    assert report["gpu_memory_bytes"] == 141 * 2**30


def test_the_hero_on_704_h200_with_ep64():
    """The story's hero: 6 experts per expert-parallel rank over dp 11 (padded to 1 per GPU), fits
    with selective checkpointing at micro-batch 1 x 4096; at micro-batch 2 only with checkpointing."""
    from pathlib import Path

    from glassroom.model.config import load_model_config

    hero = load_model_config(Path(__file__).resolve().parents[2] / "experiments" / "hero-530b.yaml")
    report = A.plan(hero, gpu="h200", gpus=704, ep=64, seq_len=4096, activation_checkpointing="selective")
    assert report["mesh"] == {"dp": 11, "ep": 64}
    assert report["params_per_gpu"]["experts_per_gpu"] == 6
    assert report["params_per_gpu"]["expert"] == 48 * 3 * 6144 * 1536  # one padded expert per layer
    assert report["fits"] and 40 * 2**30 < report["headroom_bytes"] < 100 * 2**30
    assert not A.plan(hero, gpu="h200", gpus=704, ep=64, seq_len=4096, micro_batch=2)["fits"]
    assert A.plan(hero, gpu="h200", gpus=704, ep=64, seq_len=4096, micro_batch=2,
                  activation_checkpointing="full")["fits"]


@pytest.mark.parametrize("kwargs, message", [
    ({"gpus": 8, "ep": 3}, "--ep: 3 does not divide --gpus 8"),
    ({"dp": 2, "ep": 2, "gpus": 8}, "--gpus: 8 is not --dp 2 x --ep 2 = 4"),
    ({"gpus": 8, "ep": 8}, "--ep: 8 does not divide model.moe.n_experts (4)"),
    ({"ep": 0}, "--ep: must be at least 1, got 0"),
    ({"dp": -1}, "--dp: must be at least 1, got -1"),
    ({"micro_batch": -2}, "--micro-batch: must be at least 1 sequence, got -2"),
    ({"activation_checkpointing": "some"}, "--activation-checkpointing: 'some' is not one of none, full, selective"),
])
def test_inconsistent_layouts_are_refused(kwargs, message):
    with pytest.raises(GlassroomError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        A.plan(MOE, **kwargs)


def test_mesh_from_any_two_of_gpus_dp_ep():
    assert A.resolve_mesh(MOE, 8, None, 2) == (4, 2)
    assert A.resolve_mesh(MOE, 8, 2, None) == (2, 4)
    assert A.resolve_mesh(MOE, None, 3, 2) == (3, 2)
    assert A.resolve_mesh(MOE, 6, None, None) == (6, 1)
    assert A.resolve_mesh(MOE, None, None, None) == (1, 1)
    assert A.resolve_mesh(MOE, None, None, 2) == (1, 2)  # --ep alone: dp 1
    with pytest.raises(GlassroomError, match=r"^--dp: 3 does not divide --gpus 8"):
        A.resolve_mesh(MOE, 8, 3, None)
    dense = MODELS["dense"]
    with pytest.raises(GlassroomError, match="needs a Mixture-of-Experts model"):
        A.resolve_mesh(dense, 4, None, 2)
