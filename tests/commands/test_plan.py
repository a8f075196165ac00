"""`glassroom plan` as a user runs it: output, JSON, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import glassroom_in_process

ROOT = Path(__file__).resolve().parents[2]


def glassroom_process(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Through `python -m glassroom`: what a user's shell gets."""
    return subprocess.run(
        [sys.executable, "-m", "glassroom", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def glassroom(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The same command in the test process (the process itself is not what is checked)."""
    return glassroom_in_process(*args, cwd=cwd)


def test_plan_prints_the_llama_size():
    result = glassroom_process("plan", "experiments/llama3-8b.yaml")
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
    result = glassroom_process("plan", str(tmp_path / "nope.yaml"))
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


HERO_MESH = ("plan", "experiments/hero-530b.yaml", "--gpu", "h200", "--gpus", "704", "--ep", "64", "--seq-len", "4096")


def test_the_hero_on_704_h200_with_ep64_says_whether_it_fits():
    """The text report: the mesh, every memory line, and fits with the headroom (selective
    checkpointing) or the shortfall (none, two sequences per micro-step)."""
    fits = glassroom(*HERO_MESH, "--micro-batch", "1", "--activation-checkpointing", "selective")
    assert fits.returncode == 0, fits.stderr
    assert "704 GPUs = dp 11 x ep 64: 6 of 384 experts per expert-parallel rank" in fits.stdout
    assert "ceil(6/11) = 1 expert per layer" in fits.stdout
    for label in ("weights", "gradients", "optimizer", "gathered", "grad reduce", "activations", "logits",
                  "all-to-all", "total"):
        assert f" {label} " in fits.stdout, label
    assert "fits         yes on h200 (141.0 GiB): " in fits.stdout and " left (" in fits.stdout
    short = glassroom(*HERO_MESH, "--micro-batch", "2")
    assert short.returncode == 0 and "fits         NO on h200 (141.0 GiB): " in short.stdout
    assert " missing" in short.stdout


def test_memory_json_has_every_line():
    result = glassroom(*HERO_MESH, "--activation-checkpointing", "full", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    memory = report["memory_bytes_per_gpu"]
    assert set(memory) == {"weights", "gradients", "optimizer", "gathered_weights", "gradient_reduce", "activations",
                           "logits", "all_to_all", "total"}
    assert memory["total"] == sum(v for k, v in memory.items() if k != "total")
    assert report["mesh"] == {"dp": 11, "ep": 64} and report["gpus"] == 704
    assert report["params_per_gpu"]["experts_per_gpu"] == 6
    assert report["activation_checkpointing"] == "full" and report["micro_batch"] == 1  # the default
    assert report["gpu_memory_bytes"] == 141 * 2**30
    assert report["fits"] is True and report["headroom_bytes"] == report["gpu_memory_bytes"] - memory["total"]
    # --gpu-memory overrides the GPU's; derived gpus from --dp and --ep
    small = json.loads(glassroom("plan", "experiments/hero-530b.yaml", "--dp", "11", "--ep", "64", "--gpu-memory", "16",
                                 "--json").stdout)
    assert small["gpus"] == 704 and small["fits"] is False and small["headroom_bytes"] < 0


BAD_OPTIONS = {
    "ep does not divide the experts": (["experiments/hero-530b.yaml", "--gpus", "700", "--ep", "7"],
                                       "experiments/hero-530b.yaml: --ep: 7 does not divide model.moe.n_experts (384)"),
    "ep does not divide the gpus": (["experiments/hero-530b.yaml", "--gpus", "100", "--ep", "64"],
                                    "--ep: 64 does not divide --gpus 100"),
    "dp x ep is not gpus": (["experiments/hero-530b.yaml", "--gpus", "704", "--dp", "10", "--ep", "64"],
                            "--gpus: 704 is not --dp 10 x --ep 64 = 640"),
    "dense with ep": (["experiments/llama3-8b.yaml", "--gpus", "8", "--ep", "2"],
                      "--ep: 2 needs a Mixture-of-Experts model (model.moe); this model is dense"),
    "dense with ep from gpus and dp": (["experiments/llama3-8b.yaml", "--gpus", "8", "--dp", "2"],
                                       "--ep: 4 (--gpus 8 / --dp 2) needs a Mixture-of-Experts model (model.moe); "
                                       "this model is dense: use --ep 1, i.e. --dp 8"),
    "gpu memory past a byte count": (["experiments/llama3-8b.yaml", "--gpu-memory", "1e300"],
                                     "--gpu-memory: 1e+300 GiB is beyond any byte count"),
    "negative micro-batch": (["experiments/llama3-8b.yaml", "--micro-batch", "-4"],
                             "--micro-batch: must be at least 1 sequence, got -4"),
    "zero dp": (["experiments/llama3-8b.yaml", "--dp", "0"], "--dp: must be at least 1, got 0"),
    "unknown checkpointing": (["experiments/llama3-8b.yaml", "--activation-checkpointing", "some"], "invalid choice"),
    "negative gpu memory": (["experiments/llama3-8b.yaml", "--gpu-memory", "-80"],
                            "--gpu-memory: must be a positive number of GiB, got -80"),
    "nan gpu memory": (["experiments/llama3-8b.yaml", "--gpu-memory", "nan"], "--gpu-memory: 'nan' is not a number (NaN)"),
    "micro-batch past a float": (["experiments/llama3-8b.yaml", "--micro-batch", "1" + "0" * 400],
                                 "an integer of 401 digits; numbers here have at most 30 digits"),
    "micro-batch not a number": (["experiments/llama3-8b.yaml", "--micro-batch", "two"], "'two' is not a whole number"),
}


@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_bad_mesh_and_memory_options_are_one_line_and_exit_2(case):
    args, expected = BAD_OPTIONS[case]
    result = glassroom("plan", *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr
    assert result.stdout == ""


def test_help_names_every_memory_option():
    text = " ".join(glassroom("plan", "--help").stdout.split())  # argparse wraps lines
    for option in ("--dp", "--ep", "--micro-batch", "--activation-checkpointing", "--gpu-memory", "--precision",
                   "h200 141"):
        assert option in text, option
    docs = (ROOT / "docs" / "plan.md").read_text()
    for option in ("--dp", "--ep", "--micro-batch", "--activation-checkpointing", "--gpu-memory", "--precision"):
        assert f"`{option}" in docs, option
