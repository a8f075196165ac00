"""The demo's summary: the experts line read from the hero's router metrics, the per-stage times."""

from __future__ import annotations

import math
from types import SimpleNamespace

from glassroom.demo import _experts, _posttrain, format_summary, stage_times
from glassroom.pipeline.status import write_status
from glassroom.observe.store import StoreWriter
import json

BASE = {"dataset": "d", "rungs": [], "ladder": "l", "hero": "h", "achieved": None, "site": "lab/site",
        "seconds": {"train": 60.0, "publish": 1.0}}


def write_router_metrics(run_dir, rows):
    with StoreWriter(run_dir) as w:
        for step, row in rows:
            w.log(step, row)


def test_the_summary_gives_the_heros_last_load_imbalance_and_bias_range(tmp_path):
    rows = [(1, {"train/loss": 7.0, "moe/layer_0/imbalance": 3.9, "moe/layer_0/bias_min": -0.01, "moe/layer_0/bias_max": 0.01,
                 "moe/layer_1/imbalance": 4.0, "moe/layer_1/bias_min": -0.01, "moe/layer_1/bias_max": 0.01}),
            (2, {"train/loss": 6.0, "moe/layer_0/imbalance": 1.25, "moe/layer_0/bias_min": -0.17, "moe/layer_0/bias_max": 0.05,
                 "moe/layer_1/imbalance": 1.5, "moe/layer_1/bias_min": -0.02, "moe/layer_1/bias_max": 0.11})]
    write_router_metrics(tmp_path / "hero", rows)
    experts = _experts(tmp_path / "hero")
    assert experts["step"] == 2 and experts["imbalance"] == [1.25, 1.5]   # the last step's, layer by layer
    assert experts["bias_range"] == [-0.17, 0.11]                         # over every layer
    text = format_summary({**BASE, "experts": experts})
    assert ("experts:  load imbalance (max / mean tokens per expert, 1 = even) by layer at step 2: 1.25, 1.50; "
            "router bias in [-0.170, +0.110]") in text


def test_a_dense_hero_or_a_layer_without_tokens_gives_no_experts_line(tmp_path):
    write_router_metrics(tmp_path / "dense", [(1, {"train/loss": 7.0})])
    assert _experts(tmp_path / "dense") == {}
    assert "experts:" not in format_summary({**BASE, "experts": {}}) and "experts:" not in format_summary(BASE)
    # A layer whose imbalance is NaN (no tokens counted) is left out rather than printed as nan.
    write_router_metrics(tmp_path / "moe", [(3, {"moe/layer_0/imbalance": math.nan, "moe/layer_0/bias_min": 0.0,
                                                 "moe/layer_0/bias_max": 0.0,
                                                 "moe/layer_1/imbalance": 1.1, "moe/layer_1/bias_min": -0.1,
                                                 "moe/layer_1/bias_max": 0.1})])
    assert _experts(tmp_path / "moe") == {"step": 3, "imbalance": [1.1], "bias_range": [-0.1, 0.1]}


def test_the_summary_points_watchers_at_the_feed_and_the_heros_first_anomaly(tmp_path):
    from glassroom.demo import _watch

    with StoreWriter(tmp_path / "hero") as w:
        w.log(1, {"train/loss": 7.0})
        w.event("note", "warmup done", 1)
        w.event("anomaly", "train/loss +8.1 sigma at step 40: a spike", 40)
        w.event("anomaly", "grad norm spike", 90)
    watch = _watch(tmp_path / "hero")
    assert watch["anomalies"] == 2 and watch["first"]["step"] == 40
    text = format_summary({**BASE, "watch": watch, "hero": str(tmp_path / "hero")})
    assert "lab/site/feed.atom" in text and "lab/site/ladders/index.html" in text and "lab/site/incidents.html" in text
    assert (f"glassroom incident open {tmp_path / 'hero'} --step 40 --anomaly {watch['first']['id']} "
            '"what it looks like"') in text
    assert "incident open" not in format_summary({**BASE, "watch": _watch(tmp_path / "hero") | {"first": None}})


def test_the_backtest_line_names_each_held_out_seed_and_the_measured_noise():
    backtest = {"held_out": "221K-A159K", "predicted_loss": 4.4066, "actual_loss": 4.3165, "relative_error": 0.0209,
                "covered": True, "runs": [{"seed": 0, "actual_loss": 4.2442, "relative_error": 0.038},
                                          {"seed": 1, "actual_loss": 4.3889, "relative_error": 0.004}],
                "noise": {"sigma": 0.0171, "source": "measured", "dof": 4}}
    text = format_summary({**BASE, "backtest": backtest})
    assert "the mean of its 2 seeds reached 4.3165 (+2.09%, inside the interval)" in text
    assert "seed 0 4.2442, seed 1 4.3889; seed-to-seed noise 1.71% of the loss, measured (4 dof)" in text
    one = format_summary({**BASE, "backtest": {**backtest, "runs": backtest["runs"][:1]}})   # one seed: as before
    assert "it reached 4.3165" in one and "its seeds" not in one


def test_the_summary_times_each_stage_by_the_wall_clock_and_says_which_steps_were_reused(tmp_path):
    started = 1_000_000.0
    # two rungs side by side (30 s and 50 s, overlapping by 20 s: 60 s of wall clock, 80 s of steps)
    steps = [("demo-data", "data", 70.0, started - 500), ("r1", "rungs", 30.0, started + 40),
             ("r2", "rungs", 50.0, started + 70), ("demo-fit", "ladders", 20.0, started + 110),
             ("hero", "runs", 300.0, started + 410), ("chat-sft-data", "data", 15.0, started + 130),
             ("hero-sft", "runs", 45.0, started + 455)]
    graph = []
    for name, kind, took, finished in steps:
        out = tmp_path / name
        out.mkdir()
        write_status(out, "done", finished=finished, duration_s=took)
        graph.append(SimpleNamespace(output=out, step=SimpleNamespace(name=name, kind=kind)))
    graph.append(SimpleNamespace(output=tmp_path / "never", step=SimpleNamespace(name="hero-dpo", kind="runs")))
    stages = {t["stage"]: t for t in stage_times(graph, started, publish_s=12.0)}
    assert list(stages) == ["corpus", "rungs", "fit", "hero", "post-training", "publish"]
    assert (stages["corpus"]["ran"], stages["corpus"]["reused"]) == (0, 1)        # finished before this run began
    assert (stages["rungs"]["seconds"], stages["rungs"]["step_seconds"], stages["rungs"]["ran"]) == (60.0, 80.0, 2)
    # post-training: the chat data built while the hero trained (from +115 s) to the end of SFT (+455 s)
    assert stages["post-training"]["ran"] == 3 and stages["post-training"]["seconds"] == 340.0
    assert stages["post-training"]["step_seconds"] == 60.0
    text = format_summary({**BASE, "stages": list(stages.values())})
    assert "stages:   corpus reused, rungs 1m00s, fit 20s, hero 5m00s, post-training 5m40s, publish 12s" in text


def test_demo_has_the_atlas_at_k40():
    from glassroom.demo import demo_steps

    steps = demo_steps()
    names = [s.name for s in steps]
    atlas = steps[names.index("demo-atlas")]
    assert names.index("demo-atlas") == names.index("demo-data") + 1
    assert atlas.config["k"] == 40 and atlas.config["dataset"].step_name == "demo-data"


def test_demo_summary_names_the_atlas():
    from glassroom.demo import format_summary

    s = {"dataset": "lab/data/x/dataset", "rungs": [], "ladder": "l", "hero": "h", "achieved": None, "site": "lab/site",
         "seconds": {"train": 60, "publish": 1}, "atlas": {"site": "lab/site/atlas/index.html", "k": 40, "domain_purity": 0.9671}}
    text = format_summary(s)
    assert "atlas:    lab/site/atlas/index.html" in text and "40 topics" in text and "0.967" in text
    del s["atlas"]
    assert "atlas:" not in format_summary(s)




def test_the_demo_summary_names_the_seal_and_how_to_verify_it():
    from glassroom.demo import format_summary

    summary = {"dataset": "lab/data/d", "rungs": ["a", "b"], "ladder": "lab/ladders/f", "hero": "lab/runs/hero-1",
               "site": "lab/site", "metric": "eval/macro/loss", "predicted": 3.75, "interval": [3.7, 3.8],
               "achieved": 3.78, "relative_error": -0.008, "inside": True, "preregistered": "2026-11-30T00:33:34Z",
               "seal": "ab" * 32, "seconds": {"train": 60.0, "publish": 1.0}}
    text = format_summary(summary)
    assert f"sealed:   sha256 {'ab' * 32}" in text and "glassroom ladder verify lab/runs/hero-1" in text
    assert "sealed:" not in format_summary({**summary, "seal": None})


def test_the_demo_summary_without_a_prediction_says_why_and_the_way_forward(tmp_path):
    from glassroom.demo import _prediction_summary, format_summary
    from glassroom.observe.store import StoreWriter

    fit = tmp_path / "fit"
    fit.mkdir()
    (fit / "no-prediction.json").write_text(json.dumps({"metric": "eval/macro/loss", "reason": "rungs refused",
                                                        "way_forward": "more seeds"}))
    with StoreWriter(tmp_path / "hero") as w:
        w.log(10, {"eval/macro/loss": 4.25})
    part = _prediction_summary(fit, tmp_path / "hero")
    assert part["predicted"] is None and part["achieved"] == 4.25
    summary = {"dataset": "d", "rungs": [], "ladder": str(fit), "hero": "h", "site": "lab/site",
               "seconds": {"train": 60.0, "publish": 1.0}, **part}
    text = format_summary(summary)
    assert ("hero eval/macro/loss: no prediction (the ladder's fit failed: rungs refused); it reached "
            "eval/macro/loss 4.2500") in text and "way forward: more seeds" in text and "sealed:" not in text




def test_demo_summary_skips_samples_events_of_another_shape(tmp_path):
    """The demo's summary is read after the whole demo has trained: a samples event an old or foreign
    version wrote (data a list, samples a dict, no prompt, a bare string, no step) used to raise
    (AttributeError, KeyError, TypeError) there; it is left out, and a DPO run without a margin
    series still prints its accuracy."""
    from glassroom.observe.store import StoreWriter

    sft, dpo = tmp_path / "sft", tmp_path / "dpo"
    with StoreWriter(sft) as w:
        for data in (["x"], {"samples": {"a": 1}}, {"samples": [{"text": "t"}]}, {"samples": ["hello"]}, None):
            w.event("samples", "old shape", 0, data)
        w.event("samples", "no step", None, {"samples": [{"prompt": "p", "text": "t"}]})
        w.event("samples", "samples at step 0", 0, {"samples": [{"prompt": "What is ls?", "text": "the the"}]})
        w.event("samples", "samples at step 4", 4, {"samples": [{"prompt": "What is ls?", "text": "lists files"}]})
        w.event("samples", "newer, old shape", 6, {"samples": [{"prompt": 1, "text": 2}]})
        w.log(0, {"eval/macro/loss": 3.0})
        w.log(4, {"eval/macro/loss": 2.5})
    with StoreWriter(dpo) as w:
        w.log(4, {"eval/dpo/accuracy": 0.75})
    post = _posttrain(sft, dpo)
    assert post["sample"] == {"prompt": "What is ls?", "base": [0, "the the"], "tuned": [4, "lists files"]}
    assert post["sft_loss"] == {"base": [0, 3.0], "tuned": [4, 2.5]}
    text = format_summary({"dataset": "d", "rungs": [], "ladder": "l", "hero": "h", "achieved": None, "site": "s",
                           "seconds": {"train": 60, "publish": 1}, "posttrain": post})
    assert "held-out assistant loss 3.0000 at step 0 (the hero) -> 2.5000 at step 4" in text
    assert f"dpo:      {dpo}: held-out accuracy 0.750 at step 4" in text
