"""train.activation_checkpointing: none, full and selective give the same gradients and router
counts, keep less for backward, and train the same run, alone and under torchrun with FSDP2."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import build_model
from glassroom.train import activation_checkpointing as ac
from train_helpers import ROOT, losses, run_train, run_train_here, train_cmd

MOE = MoEConfig(n_experts=4, top_k=2, d_expert=32, n_shared_experts=1, first_dense_layers=1)
CAPPED = MoEConfig(n_experts=4, top_k=2, d_expert=32, capacity_factor=1.0)


def tiny(moe=None, n_layers: int = 3) -> ModelConfig:
    return ModelConfig(vocab_size=128, d_model=64, n_layers=n_layers, n_heads=4, d_ff=128, max_seq_len=64, moe=moe)


def step(cfg: ModelConfig, mode: str, every: int = 1, early_stop: bool = True, bf16: bool = False,
         packed: bool = False):
    """One forward and backward (fp32, or under bf16 autocast) of a fresh model with `mode`: its
    gradients, tokens per expert and (dropped, routed) per MoE layer. `packed`: two conversations
    per row (segments and positions, as sft trains)."""
    model = build_model(cfg, seed=3)
    model.train()
    ac.apply(model, mode, every)
    ids = torch.randint(0, cfg.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    extra = {}
    if packed:
        segments = (torch.arange(47) >= 20).long().expand(2, 47)
        extra = {"segments": segments, "positions": torch.where(segments > 0, torch.arange(47) - 20, torch.arange(47))}
    # early_stop False: the recompute runs each block to its end (as when a later op's output is needed)
    with torch.utils.checkpoint.set_checkpoint_early_stop(early_stop), \
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(ids[:, :-1], **extra)
        loss = F.cross_entropy(out.logits.float().flatten(0, 1), ids[:, 1:].flatten()) + out.moe_loss
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    counts = model.step_tokens_per_expert()
    drops = [moe.step_drops.clone() for _, moe in model.moe_layers()]
    return grads, counts, drops


@pytest.mark.parametrize("moe", [None, MOE, CAPPED], ids=["dense", "moe", "moe-capacity"])
@pytest.mark.parametrize("mode,every", [("full", 1), ("selective", 1), ("full", 2)])
def test_checkpointing_gives_identical_gradients_and_router_counts(moe, mode, every):
    want_grads, want_counts, want_drops = step(tiny(moe), "none")
    for early_stop in (True, False):
        grads, counts, drops = step(tiny(moe), mode, every, early_stop)
        assert grads.keys() == want_grads.keys()
        for name, grad in want_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=0, atol=0, msg=name)
        if moe is not None:  # a recompute counts no token, and drops nothing, a second time
            assert torch.equal(counts, want_counts)
            assert [d.tolist() for d in drops] == [d.tolist() for d in want_drops]
    if moe is CAPPED:
        assert sum(int(d[0]) for d in want_drops) > 0  # the capacity really dropped some


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_bf16_autocast_and_packed_rows_give_identical_gradients_too(mode):
    for options in ({"bf16": True}, {"packed": True}):
        want_grads, want_counts, _ = step(tiny(CAPPED), "none", **options)
        grads, counts, _ = step(tiny(CAPPED), mode, **options)
        for name, grad in want_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=0, atol=0, msg=name)
        assert torch.equal(counts, want_counts)


def test_checkpointing_keeps_less_for_backward_and_selective_keeps_the_matmuls():
    cfg = tiny(MOE, n_layers=4)
    ids = torch.randint(0, cfg.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    kept = {}
    for mode in ac.MODES:
        model = build_model(cfg, seed=3)
        model.train()
        ac.apply(model, mode)
        kept[mode] = ac.saved_activation_bytes(model, lambda model=model: model(ids).logits.pow(2).mean())
    # full keeps each block's input (2 x 64 x 64 fp32 = 32 KiB) where none keeps every activation
    assert kept["full"] < kept["selective"] < kept["none"]
    assert kept["full"] < 0.25 * kept["none"]


def test_every_k_chooses_blocks_and_the_model_stays_the_same_model():
    cfg = tiny(MOE, n_layers=5)
    model = build_model(cfg, seed=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    names = [n for n, _ in model.named_parameters()]
    assert ac.apply(model, "full", 2) == [0, 2, 4]
    assert [getattr(b, "_activation_checkpointing", None) for b in model.blocks] == ["full", None, "full", None, "full"]
    assert [n for n, _ in model.named_parameters()] == names  # checkpoints, norms and exports see the same names
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items()) and model.state_dict().keys() == before.keys()
    assert ac.apply(build_model(cfg), "none", 3) == []
    assert ac.apply(build_model(cfg), "selective", 9) == [0]
    with pytest.raises(Exception, match="applied already"):
        ac.apply(model, "selective")


def test_without_gradients_the_blocks_run_plainly_and_generation_is_unchanged():
    cfg = tiny(MOE)
    plain, checked = build_model(cfg, seed=3), build_model(cfg, seed=3)
    ac.apply(checked, "full")
    plain.eval(), checked.eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(checked(ids).logits, plain(ids).logits, rtol=0, atol=0)
        cache_a, cache_b = plain.new_cache(1, 32), checked.new_cache(1, 32)
        torch.testing.assert_close(checked(ids, cache=cache_b).logits, plain(ids, cache=cache_a).logits, rtol=0, atol=0)


@pytest.mark.parametrize("setting,message", [
    ("train.activation_checkpointing=fully", "train.activation_checkpointing: 'fully' is not one of none, full, selective"),
    ("train.activation_checkpointing=true", "train.activation_checkpointing: True is not one of none, full, selective"),
    ("train.activation_checkpointing_every=0", "train.activation_checkpointing_every: must be positive, got 0"),
    ("train.activation_checkpointing_every=-2", "train.activation_checkpointing_every: must be positive, got -2"),
    ("train.activation_checkpointing_every=1.5", "train.activation_checkpointing_every: expected a whole number"),
])
def test_bad_settings_are_one_line_errors(tmp_path, setting, message):
    # the first through python -m glassroom (the one line and exit code 2 as a user gets them), the rest in this process
    train = run_train if setting == "train.activation_checkpointing=fully" else run_train_here
    result = train(tmp_path / "run", tmp_path / "data", setting)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def four_steps(tiny_dataset, tmp_path_factory) -> Path:
    """The tiny MoE trained 4 steps in one process without checkpointing (the default, none)."""
    out = tmp_path_factory.mktemp("ac") / "none"
    result = run_train_here(out, tiny_dataset, "train.steps=4")
    assert result.returncode == 0, result.stderr[-2000:]
    return out


@pytest.mark.slow
def test_runs_with_full_and_selective_match_a_run_without(tiny_dataset, four_steps, tmp_path):
    assert "activation_checkpointing: none" in (four_steps / "config.yaml").read_text()
    runs = {"none": four_steps}
    for mode in ac.MODES:
        if mode == "none":
            continue
        out = tmp_path / mode
        result = run_train_here(out, tiny_dataset, f"train.activation_checkpointing={mode}", "train.steps=4")
        assert result.returncode == 0, result.stderr[-2000:]
        runs[mode] = out
    for mode in ("full", "selective"):
        np.testing.assert_array_equal(losses(runs[mode]), losses(runs["none"]))
        np.testing.assert_array_equal(losses(runs[mode], "moe/layer_1/imbalance"), losses(runs["none"], "moe/layer_1/imbalance"))
    assert len(losses(runs["none"])) == 4
    # the mode is not fixed for --resume: killed after step 2 without, resumed with full, same run
    out = tmp_path / "switched"
    killed = run_train(out, tiny_dataset, "train.steps=4", "train.checkpoint_every=2",
                       env={"GLASSROOM_FAULTS": "kill_after_checkpoint@2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = run_train_here(out, tiny_dataset, "train.steps=4", "train.checkpoint_every=2",
                             "train.activation_checkpointing=full", resume=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    np.testing.assert_array_equal(losses(out), losses(runs["none"]))


def _torchrun_against_one(tiny_dataset, tmp_path, sets: tuple[str, ...], parallel: str,
                          one: Path | None = None) -> tuple[Path, Path]:
    """(one process run, 2-process torchrun with full checkpointing and `parallel`) of `sets`; the one
    process run trained here unless given."""
    if one is None:
        one = tmp_path / "one"
        assert run_train_here(one, tiny_dataset, *sets).returncode == 0
    out = tmp_path / "two-ac"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "glassroom",
           *train_cmd(out, tiny_dataset, *sets, "train.activation_checkpointing=full")[3:],
           "--set", f"train.parallel={parallel}"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(losses(out), losses(one), rtol=1e-3)
    return one, out


@pytest.mark.dist
def test_torchrun_two_processes_fsdp2_with_full_checkpointing_match_one_process(tiny_dataset, four_steps, tmp_path):
    _, out = _torchrun_against_one(tiny_dataset, tmp_path, ("train.steps=4",), "fsdp", one=four_steps)
    assert len(losses(out)) == 4


@pytest.mark.dist
def test_torchrun_ep2_with_full_checkpointing_and_capacity_matches_one_process(tiny_dataset, tmp_path):
    """Expert parallelism (train.parallel {ep: 2}) with full checkpointing and a capacity factor: each
    rank's micro-batch is one of the single process's, so the same assignments are dropped, and the
    drop fraction, summed over both ranks (512 assignments a step), is the single process's."""
    one, out = _torchrun_against_one(tiny_dataset, tmp_path, ("train.steps=4", "model.moe.capacity_factor=1.0"),
                                     "{ep: 2}")
    drops = losses(one, "moe/layer_1/drop_fraction")
    assert len(drops) == 4 and drops.max() > 0
    got = losses(out, "moe/layer_1/drop_fraction")
    # step 1 routes identical inputs (the MoE layer's input comes from the dense layer below): the
    # same drops exactly; later steps' weights differ by rounding (one process runs experts.py's
    # fused CPU path, ep its all-to-all path), which may move an assignment or two across a tie
    assert got[0] == drops[0]
    np.testing.assert_allclose(got, drops, atol=3 / 512)


def test_checkpointing_is_operational_for_the_hero_digest():
    """A hero may switch checkpointing on to fit memory without leaving its preregistered prediction."""
    from glassroom.observe.prediction import predicted_run, run_digest
    from glassroom.train.config import load_run_config
    from train_helpers import TINY

    digests = {run_digest(predicted_run(load_run_config(TINY, [f"train.activation_checkpointing={mode}",
                                                               f"train.activation_checkpointing_every={every}"]).to_dict()))
               for mode in ac.MODES for every in (1, 2)}
    assert len(digests) == 1


class _ScaledMatmul(torch.autograd.Function):
    """A custom Function that scales a matmul's output in place in its forward (as experts.py's
    fused experts do): selective checkpointing must not cache that output."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return (x @ w).mul_(2.0)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return 2.0 * grad @ w.T, 2.0 * x.T @ grad


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        return torch.tanh(_ScaledMatmul.apply(torch.sin(x @ self.w), self.w))


def test_selective_recomputes_what_a_custom_function_computes_without_gradient():
    grads = {}
    for mode in ac.MODES:
        model = torch.nn.Module()
        model.blocks = torch.nn.ModuleList([_Block(), _Block()])
        ac.apply(model, mode)
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
        for block in model.blocks:
            x = block(x)
        x.pow(2).sum().backward()
        grads[mode] = [p.grad.clone() for p in model.parameters()]
    for mode in ("full", "selective"):
        for got, want in zip(grads[mode], grads["none"]):
            torch.testing.assert_close(got, want, rtol=0, atol=0)




def test_off_for_a_checkpointing_mode_names_yamls_boolean():
    """`activation_checkpointing: off` is YAML's False: the one-line error says so instead of only
    "False is not one of none, full, selective"."""
    import pytest

    from glassroom.errors import ConfigError
    from glassroom.train.config import load_run_config
    from train_helpers import TINY

    with pytest.raises(ConfigError) as caught:
        load_run_config(TINY, ["train.activation_checkpointing=off"])
    message = str(caught.value)
    assert "train.activation_checkpointing: False is not one of none, full, selective; YAML reads off" in message
    assert "\n" not in message
