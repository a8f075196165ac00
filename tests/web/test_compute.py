"""The compare page's compute axes: FLOPs per token and tokens per step from a run's config."""

from glassroom import yaml_io
from glassroom.model.accounting import flops_per_token
from glassroom.model.config import load_model_config
from glassroom.web.compute import run_compute


def test_flops_and_tokens_match_the_accounting_the_ladder_uses(tmp_path):
    config = yaml_io.load_file("experiments/tiny-moe.yaml")
    config["train"] = {"seq_len": 64, "batch_size": 6}
    got = run_compute(config)
    cfg = load_model_config("experiments/tiny-moe.yaml")
    assert got["flops_per_token"] == float(flops_per_token(cfg, 64))
    assert got["flops_per_token"] != float(flops_per_token(cfg, cfg.max_seq_len))   # the run's length counts
    assert got["tokens_per_step"] == 64 * 6


def test_configs_it_cannot_read_give_nulls_not_errors():
    nulls = {"flops_per_token": None, "tokens_per_step": None}
    assert run_compute(None) == nulls
    assert run_compute("model: 3") == nulls
    assert run_compute({"train": {"seq_len": True, "batch_size": -2}, "model": {"d_model": "[REDACTED]"}}) == nulls
    assert run_compute({"train": {"seq_len": 128, "batch_size": 4}, "model": []})["tokens_per_step"] == 512.0
