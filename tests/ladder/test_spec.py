"""Ladder specs: expansion by the rules, and the `glassroom ladder plan` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from glassroom.ladder.spec import expand, load_spec, spec_from_mapping
from glassroom.train.config import run_config_from_mapping
from cli_helpers import glassroom_in_process

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "experiments" / "ladder-demo.yaml"
STORY = ROOT / "experiments" / "ladder-story.yaml"
RUNG_NAMES = ["37.4K-A35.1K", "75.0K-A61.2K", "102K-A83.6K", "221K-A159K"]  # the demo's MoE rungs (total-Aactive)


def real_glassroom(*args, cwd=ROOT):
    """`python -m glassroom ARGS`: a real process, for one check per command that the one-line error and exit
    code 2 arrive through the interpreter."""
    return subprocess.run([sys.executable, "-m", "glassroom", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def glassroom(*args, cwd=ROOT):
    """The same command in this process (no torch import per call): exit code, stdout, stderr (and warnings)."""
    return glassroom_in_process(*args, cwd=cwd)


def test_demo_expansion_follows_the_written_rules():
    spec = load_spec(DEMO)
    rungs, hero = expand(spec)
    assert [r.dial for r in rungs] == [16, 24, 32, 48] and hero.dial == 56
    for run in rungs + [hero]:
        model, train = run.config["model"], run.config["train"]
        assert model["n_layers"] == max(1, round(run.dial / 16))
        assert model["n_heads"] == run.dial // 8 and model["d_ff"] == 4 * run.dial
        # The story's MoE: 8 routed experts of d_model / 2 (rounded up to 8), top-2, one shared expert,
        # sigmoid router balanced by its bias (no auxiliary loss).
        moe = model["moe"]
        assert moe["d_expert"] == max(8, -(-run.dial // 2 // 8) * 8)
        assert (moe["n_experts"], moe["top_k"], moe["n_shared_experts"], moe["router"]) == (8, 2, 1, "sigmoid")
        assert moe["bias_update_rate"] > 0 and not moe.get("aux_loss_coef")
        assert train["steps"] == round(run.params * 10 / (train["batch_size"] * 128))
        assert run.tokens == train["steps"] * train["batch_size"] * 128
        c = run.flops_per_token * run.params * 10  # the compute the rules were evaluated at
        assert train["lr"] == pytest.approx(0.5 * 0.3118 * c ** -0.125, rel=2e-3)
        assert train["batch_size"] % 4 == 0
        assert train["warmup_steps"] == 0   # no warmup, the token embedding at std 0.3 with 10x its lr: stable rungs
        assert model["embedding_init_std"] == 0.3 and train["embedding_lr_multiplier"] == 10
        assert train["eval_every"] == max(1, round(0.05 * train["steps"]))
        run_config_from_mapping(run.config)  # a valid `glassroom train` config
    assert [r.name for r in rungs] == RUNG_NAMES and hero.name == "361K-A232K"
    flops = [r.flops for r in rungs]
    assert flops == sorted(flops) and hero.flops > flops[-1]


def test_story_names_and_tokens_are_story_shaped():
    rungs, hero = expand(load_spec(STORY))
    assert [r.name for r in rungs] == ["1.8B-A255M", "3.9B-A400M", "12.1B-A825M", "28.8B-A1.6B"]
    assert hero.name.startswith("530B-A")
    ratios = {round(r.tokens / r.params) for r in rungs}
    assert max(ratios) - min(ratios) <= 2  # a fixed tokens-per-parameter ratio (to whole steps)
    assert hero.config["model"]["n_layers"] == 48 and hero.config["model"]["moe"]["d_expert"] == 1536


def test_compute_budgets_pick_the_nearest_dial_values():
    raw = yaml.safe_load(DEMO.read_text())
    del raw["rungs"]
    raw["rung_budgets"] = [3e10, 2e11, 1e12]  # the rungs at 16, 32 and 48 plan 2.6e10, 2.1e11, 9.6e11
    rungs, _ = expand(spec_from_mapping(raw))
    assert [r.dial for r in rungs] == [16, 32, 48]


def test_plan_prints_rungs_and_hero_with_time():
    result = glassroom("ladder", "plan", str(STORY), "--gpu", "h200", "--gpus", "704", "--mfu", "0.22")
    assert result.returncode == 0, result.stderr
    assert "28.8B-A1.6B" in result.stdout and "hero" in result.stdout and "days" in result.stdout
    result = glassroom("ladder", "plan", str(DEMO), "--cpu-flops", "1e11", "--json")
    report = json.loads(result.stdout)
    assert [r["name"] for r in report["rungs"]] == RUNG_NAMES
    hero = report["hero"]
    assert hero["seconds"] == pytest.approx(hero["flops"] / (1e11 * 0.15))


BAD_SPECS = [
    (lambda r: r.update(rungz=[1]), "bad.yaml: rungz: unknown key (did you mean rungs?)"),
    (lambda r: r.pop("dial"), "dial: missing required key"),
    (lambda r: r.update(rungs=[]), "rungs: needs at least two rungs, got none"),
    (lambda r: r.update(rungs=[16, 32, 24]), "rungs[2]: rungs must increase, got 32 then 24"),
    (lambda r: r["base"]["model"].update(d_model=64), "base.model.d_model: set by the dial"),
    (lambda r: r.update(rungs=[16, 20]), "dial 20: d_model must be a multiple of shape.head_dim"),
    (lambda r: r["scaling"].update(lr={"preset": "deepseek", "base": 1.0}), "scaling.lr: set exactly one"),
    # The demo's MoE keys edited carelessly: one line naming the key.
    (lambda r: r["base"]["model"]["moe"].update(top_k=9), "model.moe.top_k: 9 is larger than n_experts (8)"),
    (lambda r: r["shape"].pop("expert_ratio"), "shape.expert_ratio: needed for a MoE base model"),
    (lambda r: r["base"]["model"]["moe"].update(bias_update_rate=-1), "model.moe.bias_update_rate: must be zero or more"),
    (lambda r: r["base"]["model"]["moe"].update(n_experts="lots"), "model.moe.n_experts: expected a whole number"),
]


@pytest.mark.parametrize("edit, message", BAD_SPECS)
def test_bad_specs_are_one_line_errors(tmp_path, edit, message):
    raw = yaml.safe_load(DEMO.read_text())
    edit(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    run = real_glassroom if message == BAD_SPECS[0][1] else glassroom  # one case through `python -m glassroom`
    result = run("ladder", "plan", str(path), "--cpu-flops", "1e11")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert "Traceback" not in result.stderr


def test_the_demo_hero_is_exported_as_a_sigmoid_moe_with_a_shared_expert():
    """The demo's later stages (export, eval, SFT, DPO) start from the hero: an MoE with sigmoid
    routing, a router bias and a shared expert is written as GLM-4-MoE (no qk_norm), not as a
    softmax MoE that would refuse the moved router bias."""
    from glassroom.config import build_section
    from glassroom.hf.architectures import choose
    from glassroom.model.config import ModelConfig

    _, hero = expand(load_spec(DEMO))
    cfg = build_section(ModelConfig, hero.config["model"], "model")
    assert cfg.moe is not None and cfg.moe.n_shared_experts == 1
    assert choose(cfg, router_bias_zero=False) == "glm4_moe"
