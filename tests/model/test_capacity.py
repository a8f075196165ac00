"""moe.capacity_factor: tokens over an expert's capacity are dropped in token order, counted, and
reported as moe/layer_<i>/drop_fraction; dropless (the default) and eval drop nothing."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
import torch

from glassroom.model.config import MoEConfig
from glassroom.model.moe import MoEFeedForward, apply_capacity
from glassroom.train.probes import router_metrics
from glassroom.observe.store import StoreReader
from train_helpers import run_train

# Each token's planted expert: 12 of 16 tokens pick expert 0 (top_k 1).
PLANTED = [0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0]


def planted_layer(capacity_factor, shared: int = 1) -> tuple[MoEFeedForward, torch.Tensor]:
    """A layer of 4 experts, top-1, whose router sends token t to PLANTED[t], and its 16 tokens."""
    cfg = MoEConfig(n_experts=4, top_k=1, d_expert=8, n_shared_experts=shared, capacity_factor=capacity_factor)
    torch.manual_seed(0)
    layer = MoEFeedForward(8, cfg)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.3)
        layer.router.weight.zero_()
        layer.router.weight[:, :4] = 10 * torch.eye(4)  # expert e scores feature e
    x = 0.1 * torch.randn(len(PLANTED), 8)
    x[torch.arange(len(PLANTED)), torch.tensor(PLANTED)] += 1.0
    return layer, x


def hand_dropped(planted: list[int], capacity: int) -> list[int]:
    """Token indices dropped when each expert keeps its first `capacity` tokens."""
    seen: dict[int, int] = {}
    dropped = []
    for t, expert in enumerate(planted):
        seen[expert] = seen.get(expert, 0) + 1
        if seen[expert] > capacity:
            dropped.append(t)
    return dropped


def test_capacity_one_drops_what_a_hand_count_says_and_dropped_tokens_get_only_shared_experts():
    layer, x = planted_layer(1.0)
    layer.train()
    capacity = layer.capacity(16)
    assert capacity == math.ceil(1.0 * 16 * 1 / 4) == 4
    dropped = hand_dropped(PLANTED, capacity)
    # expert 0's tokens are 0, 1, 3, 4, 6, 7, 9, 10, 11, 13, 14, 15: the first four are kept
    assert dropped == [6, 7, 9, 10, 11, 13, 14, 15]

    out, _ = layer(x)
    assert layer.step_drops.tolist() == [8, 16]
    # The balancer counts what the router chose, before dropping.
    assert layer.step_tokens_per_expert.tolist() == [12, 2, 1, 1]
    scalars, _ = router_metrics(_Model(layer))
    assert scalars["moe/layer_0/drop_fraction"] == 8 / 16

    with torch.no_grad():
        shared_only = layer.shared_experts(x)
        layer.eval()
        dropless, _ = layer(x)
    kept = [t for t in range(16) if t not in dropped]
    # dropped tokens: the shared expert's output alone; kept ones: exactly the dropless output.
    torch.testing.assert_close(out[dropped], shared_only[dropped], rtol=0, atol=0)
    torch.testing.assert_close(out[kept], dropless[kept], rtol=0, atol=0)
    assert (out[kept] - shared_only[kept]).abs().max() > 1e-3


def test_without_shared_experts_a_dropped_token_gets_zero_from_the_layer():
    layer, x = planted_layer(1.0, shared=0)
    layer.train()
    out, _ = layer(x)
    dropped = hand_dropped(PLANTED, 4)
    assert torch.count_nonzero(out[dropped]) == 0
    assert torch.count_nonzero(out[[0, 1, 2, 3]]) > 0


@pytest.mark.parametrize("factor", [None, 4.0, 1e300, 1.7e308])  # 1.7e308 * tokens is inf
def test_dropless_and_a_large_capacity_drop_nothing(factor):
    layer, x = planted_layer(factor)
    layer.train()
    out, _ = layer(x)
    assert layer.step_drops.tolist() == [0, 16]
    layer.eval()
    with torch.no_grad():
        again, _ = layer(x)
    torch.testing.assert_close(out, again, rtol=0, atol=0)
    scalars, _ = router_metrics(_Model(layer))
    if factor is None:
        assert not any(k.endswith("drop_fraction") for k in scalars)  # dropless runs log no drop series
    else:
        assert scalars["moe/layer_0/drop_fraction"] == 0.0


def test_eval_mode_is_dropless_and_counts_nothing():
    capped, x = planted_layer(1.0)
    dropless, _ = planted_layer(None)
    capped.eval(), dropless.eval()
    with torch.no_grad():
        torch.testing.assert_close(capped(x)[0], dropless(x)[0], rtol=0, atol=0)
    assert capped.step_drops.tolist() == [0, 0]


def test_drop_fraction_sums_the_steps_micro_batches_and_survives_the_bias_update():
    layer, x = planted_layer(1.0)
    layer.train()
    layer(x)  # 8 of 16 dropped
    layer(x[:4])  # tokens 0..3 go to experts 0, 0, 1, 0: capacity 1, so two of expert 0's are dropped
    assert layer.step_drops.tolist() == [10, 20]
    layer.update_router_bias()
    assert layer.step_drops.tolist() == [0, 0]
    scalars, _ = router_metrics(_Model(layer))
    assert scalars["moe/layer_0/drop_fraction"] == 10 / 20
    # summed over ranks before dividing: another rank that routed 20 and dropped none halves it
    reduced, _ = router_metrics(_Model(layer), all_reduce=lambda t: t.add_(torch.tensor([[0.0, 20.0]], dtype=t.dtype)))
    assert reduced["moe/layer_0/drop_fraction"] == 10 / 40


def test_apply_capacity_keeps_each_experts_first_assignments_in_token_then_choice_order():
    chosen = torch.tensor([[0, 1], [1, 0], [0, 2], [0, 1], [2, 0]])
    counts = torch.bincount(chosen.flatten(), minlength=3)
    kept, kept_counts = apply_capacity(chosen, counts, capacity=2)
    # expert 0: tokens 0, 1 kept, 2, 3, 4 dropped; expert 1: tokens 0, 1 kept, 3 dropped
    assert kept.tolist() == [[0, 1], [1, 0], [-1, 2], [-1, -1], [2, -1]]
    assert kept_counts.tolist() == [2, 2, 2]
    assert kept_counts.tolist() == torch.bincount(kept[kept >= 0], minlength=3).tolist()


class _Model:
    """What router_metrics needs of a Transformer: its MoE layers."""

    def __init__(self, layer):
        self.layer = layer

    def moe_layers(self):
        yield 0, self.layer


@pytest.mark.parametrize("value,message", [
    ("0", "model.moe.capacity_factor: must be positive, got 0"),
    ("-1.5", "model.moe.capacity_factor: must be positive, got -1.5"),
    (".nan", "model.moe.capacity_factor: must be a finite number"),
    ("lots", "model.moe.capacity_factor: expected a number, got 'lots'"),
    ("true", "model.moe.capacity_factor: expected a number, got True"),
])
def test_bad_capacity_factors_are_one_line_errors(tmp_path, value, message):
    result = run_train(tmp_path / "run", tmp_path / "data", f"model.moe.capacity_factor={value}")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def capped_run(tiny_dataset, tmp_path_factory):
    """Three steps of the tiny MoE with capacity factor 1.0: a lab folder holding run `capped`."""
    lab = tmp_path_factory.mktemp("lab")
    result = run_train(lab / "capped", tiny_dataset, "model.moe.capacity_factor=1.0", "train.steps=3")
    assert result.returncode == 0, result.stderr[-2000:]
    return lab


@pytest.mark.slow
def test_a_capped_training_run_logs_the_drop_fraction_per_layer(capped_run):
    with StoreReader(capped_run / "capped") as reader:
        steps, values = reader.series("moe/layer_1/drop_fraction")
        assert list(steps) == [1, 2, 3]
        assert all(0 <= v < 1 for v in values) and max(values) > 0
        assert "moe/layer_0/drop_fraction" not in reader.names()  # layer 0 is dense


DROP_CHART = "Dropped by capacity (fraction of assignments)"


@pytest.mark.browser
def test_the_dashboard_and_the_published_site_draw_the_drop_fraction(capped_run, tmp_path):
    from glassroom.web.publish import publish
    from web_helpers import Chromium, Server, StaticSiteServer, chromium_path

    if chromium_path() is None:
        pytest.skip("chromium not installed (scripts/install-system.sh)")
    points = f"GR.charts.find(c => c.title === {DROP_CHART!r}).u.data[1].filter(v => v !== null && v !== undefined).length"
    site = tmp_path / "site"
    publish(capped_run, site)
    with Chromium() as browser:
        with Server(capped_run) as server:
            browser.navigate(f"{server.url}/runs/capped")
            titles = browser.eval("GR.charts.map(c => c.title)")
            assert DROP_CHART in titles and "Expert load, layer 1" in titles
            assert browser.eval(points) == 3
        with StaticSiteServer(site) as url:
            browser.navigate(f"{url}/runs/capped/index.html")
            assert browser.eval(points) == 3


@pytest.mark.slow
def test_a_capped_run_exports_as_its_dropless_self_and_an_init_may_set_a_capacity(capped_run, tmp_path):
    import glassroom
    from glassroom.train.init import model_for_init
    from glassroom.train.config import InitSection
    from hf_helpers import export_folder, hf_model, real_text

    run = capped_run / "capped"
    out = export_folder(run, tmp_path / "hf")  # capacity is training-only: nothing new is refused
    assert "capacity" not in (out / "config.json").read_text()
    model, tok = glassroom.load(run)
    hf, _ = hf_model(out)
    ids = torch.tensor([tok.encode(real_text()).ids[:48]])
    with torch.no_grad():
        assert (model(ids).logits - hf(ids).logits).abs().max().item() < 1e-4
    # a training knob: a run starting from the folder may set its own capacity factor
    merged = model_for_init(InitSection(source=str(out)), {"moe": {"capacity_factor": 1.25}})
    assert merged["moe"]["capacity_factor"] == 1.25


@pytest.mark.slow
def test_a_capped_run_killed_and_resumed_drops_and_trains_as_the_uninterrupted_one(capped_run, tiny_dataset, tmp_path):
    import signal

    import numpy as np

    from train_helpers import losses

    out = tmp_path / "killed"
    sets = ("model.moe.capacity_factor=1.0", "train.steps=3", "train.checkpoint_every=1")
    killed = run_train(out, tiny_dataset, *sets, env={"GLASSROOM_FAULTS": "kill_after_checkpoint@1"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = run_train(out, tiny_dataset, *sets, resume=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for name in ("train/loss", "moe/layer_1/drop_fraction"):
        np.testing.assert_array_equal(losses(out, name), losses(capped_run / "capped", name))
    changed = run_train(out, tiny_dataset, *sets[1:], "model.moe.capacity_factor=2.0", resume=True)
    assert changed.returncode == 2 and "model.moe.capacity_factor (1.0 -> 2.0)" in changed.stderr


def capacity_cases(count: int = 60, seed: int = 0) -> list[tuple[int, int, int, float]]:
    """(tokens, top_k, n_experts, capacity_factor) where factor * tokens * top_k / n_experts is not a
    whole number (so rounding it down and up differ) and below `tokens` (so the capacity binds).
    Factors are dyadic, exact in binary: the float product is the exact one."""
    rng = np.random.default_rng(seed)
    factors = (0.25, 0.5, 0.625, 0.75, 1.0, 1.125, 1.25, 1.5, 2.0)
    cases: list[tuple[int, int, int, float]] = []
    while len(cases) < count:
        n_experts = int(rng.integers(2, 9))
        top_k = int(rng.integers(1, min(n_experts, 4) + 1))
        tokens = int(rng.integers(3, 41))
        factor = float(rng.choice(factors))
        exact = Fraction(factor) * tokens * top_k / n_experts
        if exact.denominator != 1 and exact < tokens:
            cases.append((tokens, top_k, n_experts, factor))
    return cases


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_capacity_rounds_a_fractional_share_up_and_each_expert_keeps_exactly_that_many(seed):
    """capacity = ceil(capacity_factor * tokens * top_k / n_experts) (moe.py, docs/design.md), over
    generated sizes where the share is fractional; a skewed router makes most experts overflow, and
    each expert keeps min(routed, capacity) assignments: its first ones in token, then choice, order."""
    for tokens, top_k, n_experts, factor in capacity_cases(seed=seed):
        expected = math.ceil(Fraction(factor) * tokens * top_k / n_experts)   # independent, exact
        cfg = MoEConfig(n_experts=n_experts, top_k=top_k, d_expert=4, capacity_factor=factor)
        torch.manual_seed(seed * 1000 + tokens)
        layer = MoEFeedForward(8, cfg)
        with torch.no_grad():
            layer.router_bias.copy_(3.0 * torch.randn(n_experts))   # skewed: a few experts take most tokens
        assert layer.capacity(tokens) == expected, (tokens, top_k, n_experts, factor)

        seen = {}
        layer.experts.register_forward_pre_hook(lambda m, args, seen=seen: seen.update(chosen=args[1], counts=args[3]))
        x = torch.randn(tokens, 8)
        layer.train()
        with torch.no_grad():
            _, _, chosen, _ = layer.route(x)
            layer(x)
        routed = Counter(chosen.flatten().tolist())
        assert max(routed.values()) > expected, "the case never fills an expert: the capacity is not tested"
        # by hand: walk the assignments in token order, then choice order; keep an expert's first `expected`
        kept_by_hand, taken = [], Counter()
        for e in chosen.flatten().tolist():
            taken[e] += 1
            kept_by_hand.append(e if taken[e] <= expected else -1)
        assert seen["chosen"].flatten().tolist() == kept_by_hand, (tokens, top_k, n_experts, factor)
        want_counts = [min(routed.get(e, 0), expected) for e in range(n_experts)]
        assert seen["counts"].tolist() == want_counts, (tokens, top_k, n_experts, factor)
        dropped = sum(routed.values()) - sum(want_counts)
        assert layer.step_drops.tolist() == [dropped, tokens * top_k]
