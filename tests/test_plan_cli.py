"""`glassroom plan` as a user runs it: output, JSON, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def glassroom(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "glassroom", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_plan_prints_the_llama_size():
    result = glassroom("plan", "experiments/llama3-8b.yaml")
    assert result.returncode == 0, result.stderr
    assert "8.0B" in result.stdout and "8,030,261,248" in result.stdout


def test_plan_json_for_the_hero_with_tokens_and_gpus():
    result = glassroom(
        "plan", "experiments/hero-530b.yaml", "--tokens", "18T", "--gpu", "h200", "--gpus", "2048", "--mfu", "0.35", "--json"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for key in ("name", "total_params", "active_params", "embedding_params", "non_embedding_active_params",
                "flops_per_token", "tokens", "total_flops", "days"):
        assert key in report
    assert report["tokens"] == 18e12
    assert 2.0e24 < report["total_flops"] < 2.8e24
    assert 10 < report["days"] < 100


def test_set_overrides_a_model_value():
    result = glassroom("plan", "experiments/llama3-8b.yaml", "--set", "model.n_layers=16", "--json")
    assert json.loads(result.stdout)["total_params"] < 5e9


BAD_MODELS = {
    "unknown key": ("model:\n  vocab_size: 100\n  d_modle: 64\n  n_layers: 2\n  n_heads: 4\n  d_ff: 128\n  max_seq_len: 16\n",
                    "model.d_modle: unknown key (did you mean d_model?)"),
    "missing key": ("model:\n  d_model: 64\n  n_layers: 2\n  n_heads: 4\n  d_ff: 128\n  max_seq_len: 16\n",
                    "model.vocab_size: missing required key"),
    "top_k": ("model:\n  vocab_size: 100\n  d_model: 64\n  n_layers: 2\n  n_heads: 4\n  max_seq_len: 16\n"
              "  moe: {n_experts: 4, top_k: 5, d_expert: 32}\n", "model.moe.top_k: 5 is larger than n_experts (4)"),
    "heads": ("model:\n  vocab_size: 100\n  d_model: 64\n  n_layers: 2\n  n_heads: 5\n  d_ff: 128\n  max_seq_len: 16\n",
              "model.n_heads: 5 does not divide d_model (64)"),
    "kv heads": ("model:\n  vocab_size: 100\n  d_model: 64\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 3\n  d_ff: 128\n  max_seq_len: 16\n",
                 "model.n_kv_heads: 3 does not divide n_heads (4)"),
    "negative": ("model:\n  vocab_size: 100\n  d_model: -64\n  n_layers: 2\n  n_heads: 4\n  d_ff: 128\n  max_seq_len: 16\n",
                 "model.d_model: must be positive, got -64"),
    "zero": ("model:\n  vocab_size: 100\n  d_model: 64\n  n_layers: 0\n  n_heads: 4\n  d_ff: 128\n  max_seq_len: 16\n",
             "model.n_layers: must be positive, got 0"),
    "wrong type": ("model:\n  vocab_size: lots\n  d_model: 64\n  n_layers: 2\n  n_heads: 4\n  d_ff: 128\n  max_seq_len: 16\n",
                   "model.vocab_size: expected a whole number, got 'lots'"),
    "not yaml": ("model: [unclosed\n  d_model: 64\n", "not valid YAML"),
    "no model": ("train:\n  steps: 10\n", "missing the model: section"),
}


@pytest.mark.parametrize("case", list(BAD_MODELS))
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    text, expected = BAD_MODELS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = glassroom("plan", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert expected in lines[0]
    assert str(path) in lines[0]


def test_missing_file_and_bad_options(tmp_path):
    result = glassroom("plan", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "no such file" in result.stderr
    for args, expected in ((["--tokens", "many"], "--tokens"), (["--mfu", "2"], "--mfu"), (["--gpus", "0"], "--gpus")):
        result = glassroom("plan", "experiments/llama3-8b.yaml", *args)
        assert result.returncode == 2 and expected in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_usage_mistakes_are_one_line_too():
    result = glassroom("plan", "experiments/llama3-8b.yaml", "--gpu", "tpu")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "invalid choice" in result.stderr


def test_absurd_sizes_print_or_are_one_line():
    """A 1e31-parameter model prints in powers of ten (no 20-digit `T` counts); a billion layers,
    counted one by one, would never finish: refused; FLOPs past a float's range: refused."""
    wide = glassroom("plan", "experiments/train-moe.yaml", "--set", "model.d_model=1000000000000000",
                     "--set", "model.n_heads=1", "--tokens", "1e12")
    assert wide.returncode == 0, wide.stderr
    assert "total 2.4e+31 (" in wide.stdout and "weights       9.6e+31 B" in wide.stdout
    assert "000000T" not in wide.stdout.split("\n", 1)[1]  # the first line's name is units.model_name's
    deep = glassroom("plan", "experiments/train-moe.yaml", "--set", "model.n_layers=1000000000")
    assert deep.returncode == 2 and "1,000,000,000 layers" in deep.stderr
    assert len(deep.stderr.strip().splitlines()) == 1
    overflow = glassroom("plan", "experiments/train-moe.yaml", "--set", "model.d_model=1000000000000000",
                         "--set", "model.n_heads=1", "--tokens", "1e300", "--json")
    assert overflow.returncode == 2 and "more FLOPs than a float can hold" in overflow.stderr
    assert overflow.stdout == ""
    forever = glassroom("plan", "experiments/train-moe.yaml", "--gpu", "h200", "--tokens", "1T", "--mfu", "1e-320",
                        "--json")  # printed `"days": Infinity`, which is not JSON
    assert forever.returncode == 2 and "too small to time a run" in forever.stderr and forever.stdout == ""
