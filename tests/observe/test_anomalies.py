"""Spike detection and attribution: unit checks, and real runs with a planted router-bias jump
and a planted corrupt batch."""

from __future__ import annotations

import random

import pytest

from glassroom.observe.anomalies import AnomalyDetector
from glassroom.observe.store import StoreReader
from train_helpers import ROOT, run_train
import math

import numpy as np

WATCH = ROOT / "tests" / "configs" / "train-watch.yaml"


def _norms(param_total, bias, weights):
    return {"norm/param/total": param_total, "norm/param/router_bias": bias, "norm/param/experts": weights,
            "norm/param/router_bias/layer_3": bias * 0.8, "norm/param/router_bias/layer_4": bias * 0.6,
            "norm/param/experts/layer_3": weights}


def test_a_router_bias_jump_in_the_param_norm_is_named_as_the_balancer():
    detector = AnomalyDetector(window=50, sigma=4, min_history=10)
    rng = random.Random(0)
    weights, bias = 30.0, 0.1
    events = []
    for step in range(10, 610, 10):
        weights += 0.05 + rng.gauss(0, 0.005)
        if step == 500:
            bias = 6.0
        total = (weights**2 + bias**2) ** 0.5
        metrics = {"train/loss": 3.0 + rng.gauss(0, 0.01), **_norms(total, bias, weights)}
        events += detector.observe(step, metrics)
    assert len(events) == 1
    event = events[0]
    assert event["data"]["step"] == 500 and event["data"]["metric"] == "norm/param/total"
    assert event["data"]["not_trained_by_gradient"] == "router_bias"
    assert event["text"].startswith("param norm +")
    assert "from the MoE router bias (layers 3-4), which the load balancer sets, not the gradient" in event["text"]


def test_loss_spike_by_ratio_and_rolling_test_names_the_domains():
    detector = AnomalyDetector(window=30, sigma=6, min_history=10, loss_ratio=1.5)
    rng = random.Random(1)
    events = []
    for step in range(1, 80):
        loss = 3.0 + rng.gauss(0, 0.02)
        code = loss + (4.0 if step == 60 else 0.0)
        metrics = {"train/loss": (loss + code) / 2 if step != 60 else loss * 2, "train/loss/code": code,
                   "train/loss/prose": loss}
        events += detector.observe(step, metrics)
    assert [e["data"]["step"] for e in events] == [60]
    assert events[0]["text"].startswith("loss +") and "rose most in code +" in events[0]["text"]


def test_detector_state_round_trips_for_checkpoints():
    a = AnomalyDetector(window=20, min_history=5)
    for step in range(30):
        a.observe(step, {"train/loss": 2.0 + 0.01 * (step % 3), "train/grad_norm": 1.0})
    b = AnomalyDetector(window=20, min_history=5)
    b.load_state(a.state())
    assert b.observe(30, {"train/loss": 9.0}) == a.observe(30, {"train/loss": 9.0})


@pytest.fixture(scope="module")
def bias_jump_run(tiny_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("watch") / "bias"
    result = run_train(out, tiny_dataset, config=WATCH, env={"GLASSROOM_FAULTS": "router_bias@500:5"})
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
def test_a_run_whose_router_bias_jumps_at_step_500_explains_it(bias_jump_run):
    with StoreReader(bias_jump_run) as reader:
        anomalies = [e for e in reader.events(kinds=["anomaly"]) if e["data"]["metric"] == "norm/param/total"]
    assert [e["step"] for e in anomalies] == [500], anomalies
    text = anomalies[0]["text"]
    assert "param norm +" in text and "at step 500" in text
    assert "the MoE router bias (layers 1-2), which the load balancer sets, not the gradient" in text
    attribution = anomalies[0]["data"]["attribution"]
    assert max(attribution, key=attribution.get) == "router_bias" and attribution["router_bias"] > 0.5


@pytest.mark.slow
def test_a_planted_loss_spike_is_named_as_the_loss(tiny_dataset, tmp_path):
    # One step at 2000x the learning rate (a broken schedule): the next loss jumps.
    out = tmp_path / "spike"
    result = run_train(out, tiny_dataset, "train.steps=60", config=WATCH, env={"GLASSROOM_FAULTS": "lr@50:2000"})
    assert result.returncode == 0, result.stderr
    with StoreReader(out) as reader:
        loss_events = [e for e in reader.events(kinds=["anomaly"]) if e["data"]["metric"] == "train/loss"]
        losses = reader.series("train/loss")[1]
    assert losses[50] > 1.5 * losses[:50].min()
    assert [e["step"] for e in loss_events] == [51]
    assert loss_events[0]["text"].startswith("loss ") and "at step 51" in loss_events[0]["text"]
    assert "training loss rose most in" in loss_events[0]["text"]


def test_detector_explains_with_exact_numbers():
    """The event's data and text, number by number, on streams worked out by hand: a loss at twice
    its running minimum with per-domain rises ranked (only rising domains named, three at most), and
    a param-norm jump split by group (shares of the change in squared norm) and by layer."""
    import math

    detector = AnomalyDetector(window=10, sigma=1e9, min_history=3, loss_ratio=1.5)
    domains = ("code", "prose", "math", "wiki", "legal")
    for step in range(1, 6):
        assert detector.observe(step, {"train/loss": 2.0, **{f"train/loss/{d}": 2.0 for d in domains}}) == []
    spike = {"train/loss": 4.0, "train/loss/code": 6.0, "train/loss/prose": 3.0, "train/loss/math": 2.5,
             "train/loss/wiki": 2.25, "train/loss/legal": 1.5, "train/loss/web": 9.0}   # web: no history yet
    assert detector.observe(6, spike) == [{
        "text": "loss 2.00x its running minimum at step 6: training loss rose most in code +4.00, prose +1.00, math +0.50",
        "data": {"metric": "train/loss", "step": 6, "value": 4.0, "test": "ratio", "ratio": 2.0, "running_min": 2.0,
                 "domains": {"code": 4.0, "prose": 1.0, "math": 0.5, "wiki": 0.25, "legal": -0.5}}}]

    detector = AnomalyDetector(window=10, sigma=6, min_history=3)
    steady = {"norm/param/total": 10.0, "norm/param/experts": 8.0, "norm/param/router_bias": 6.0,
              **{f"norm/param/router_bias/layer_{i}": 1.0 for i in (1, 2, 3)}}
    for step in range(1, 6):
        assert detector.observe(step, {"train/loss": 2.0, **steady}) == []
    # squared norms: total +100 = experts +25 + router bias +75; bias layers +60, +15, +0.5
    jump = {"norm/param/total": math.sqrt(200), "norm/param/experts": math.sqrt(89),
            "norm/param/router_bias": math.sqrt(111), "norm/param/router_bias/layer_1": math.sqrt(61),
            "norm/param/router_bias/layer_2": 4.0, "norm/param/router_bias/layer_3": math.sqrt(1.5)}
    [event] = detector.observe(6, {"train/loss": 2.0, **jump})
    assert event["text"].endswith(": 75% from the MoE router bias (layers 1-2), which the load balancer sets, "
                                  "not the gradient")
    data = event["data"]
    assert data["attribution"] == {"router_bias": 0.75, "experts": 0.25} and list(data["attribution"]) == [
        "router_bias", "experts"]
    assert data["layers"] == [1, 2] and data["not_trained_by_gradient"] == "router_bias"
    assert (data["test"], data["mean"], data["std"], data["window"]) == ("rolling", 0.0, 0.0, 4)


def anomalies_of(run_dir) -> list[tuple]:
    with StoreReader(run_dir) as reader:
        return [(e["step"], e["data"]["metric"], e["text"]) for e in reader.events(kinds=["anomaly"])]


@pytest.mark.slow
def test_a_resumed_run_flags_exactly_what_the_uninterrupted_run_flags(tiny_dataset, tmp_path):
    """The detector's history is part of the checkpoint: a run killed right after its step-20
    checkpoint and resumed flags the same anomalies as the run that never stopped, among them a loss
    spike at step 26 that only a detector with more than 10 values of history can flag (a fresh one
    after the resume would have 5). The checkpoint is checked to carry a non-empty state first, so
    the comparison is not of two empty states."""
    import json
    import signal

    sets = ("train.steps=40", "train.checkpoint_every=20", "observe.anomaly_min_history=10")
    spike = "lr@25:2000"   # step 25 at 2000x the learning rate: the loss of step 26 jumps
    reference = tmp_path / "reference"
    result = run_train(reference, tiny_dataset, *sets, config=WATCH, env={"GLASSROOM_FAULTS": spike})
    assert result.returncode == 0, result.stderr[-2000:]
    want = anomalies_of(reference)
    assert any(21 <= step <= 30 for step, _, _ in want), want   # flagged after the resume point, from history

    out = tmp_path / "killed"
    killed = run_train(out, tiny_dataset, *sets, config=WATCH,
                       env={"GLASSROOM_FAULTS": f"{spike},kill_after_checkpoint@20"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    saved = json.loads((out / "checkpoints" / "step_0000020" / "trainer.json").read_text())["train_state"]["extra"]
    state = saved["AnomalyObserver"]
    assert len(state["history"]["train/loss"]) == 20 and len(state["history"]["train/grad_norm"]) == 20
    assert state["loss_min"] < 100 and state["previous"], state
    resumed = run_train(out, tiny_dataset, *sets, config=WATCH, resume=True, env={"GLASSROOM_FAULTS": spike})
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert anomalies_of(out) == want




def test_anomaly_names_the_layer_that_changed_not_the_largest():
    """Layer 1 of the routed experts is large and steady; layer 2 is small and jumps at step 500."""
    from glassroom.observe.anomalies import AnomalyDetector

    detector = AnomalyDetector(window=50, sigma=4, min_history=10)
    rng = np.random.default_rng(0)
    big, small = 30.0, 1.0
    events = []
    for step in range(10, 610, 10):
        big += 0.002 + rng.normal(0, 0.0005)
        if step == 500:
            small = 8.0
        experts = math.hypot(big, small)
        metrics = {"train/loss": 3.0 + rng.normal(0, 0.01), "norm/param/total": math.hypot(experts, 5.0),
                   "norm/param/attention": 5.0, "norm/param/experts": experts,
                   "norm/param/experts/layer_1": big, "norm/param/experts/layer_2": small}
        events += detector.observe(step, metrics)
    assert [e["data"]["step"] for e in events] == [500]
    event = events[0]
    assert event["data"]["layers"] == [2], event
    assert "from the routed experts (layer 2)" in event["text"], event["text"]
    assert max(event["data"]["attribution"], key=event["data"]["attribution"].get) == "experts"
