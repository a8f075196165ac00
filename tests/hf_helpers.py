"""Helpers for tests of Hugging Face export and import (also used by the sampling and eval tests).

`ARCHS` maps each transformers architecture glassroom exports to `--set` overrides of
tests/configs/train-tiny.yaml that make a model only that architecture expresses; `train_tiny_run`
trains one a few steps through the real CLI (`train_tiny_run_here`: the same command in the test
process); `export_folder` exports it; `hf_model` loads a folder with transformers offline; `real_text`
is a few hundred characters of real Python source. `cli` runs `python -m glassroom` offline in a
subprocess, `cli_here` and `train_here` the same commands in the test process (no torch import to pay).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from cli_helpers import glassroom_in_process
from train_helpers import ROOT, TINY, run_train, train_cmd
import shutil

import torch

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
os.environ.update(OFFLINE)

DENSE = ("model.moe=",)
SHORT = ("train.steps=4", "train.checkpoint_every=4", "train.eval_every=4")
# 3 steps: the balancing bias has moved (after 4 it happens to be back at zero on this data)
BIAS_MOVED = ("train.steps=3", "train.checkpoint_every=3", "train.eval_every=3")
ARCHS: dict[str, tuple[str, ...]] = {
    "llama": DENSE + ("model.norm_eps=1e-5", "model.tie_embeddings=true",
                      "model.rope_scaling={type: llama3, factor: 8.0, low_freq_factor: 1.0, "
                      "high_freq_factor: 4.0, original_max_seq_len: 16}"),
    "mistral": DENSE + ("model.sliding_window=16", "model.n_kv_heads=2"),
    "qwen3": DENSE + ("model.qk_norm=true", "model.sliding_window=16", "model.global_every=2", "model.head_dim=32"),
    "qwen3_moe": ("model.qk_norm=true", "model.moe.router=softmax", "model.moe.n_shared_experts=0",
                  "model.moe.bias_update_rate=0", "model.moe.norm_topk_prob=false"),
    "mixtral": ("model.moe.router=softmax", "model.moe.n_shared_experts=0", "model.moe.bias_update_rate=0",
                "model.moe.first_dense_layers=0", "model.sliding_window=16"),
    "glm4_moe": ("model.moe.routed_scale=2.5", "model.moe.norm_topk_prob=true", "model.moe.bias_update_rate=0.05", *BIAS_MOVED),
    "dots1": ("model.qk_norm=true", "model.sliding_window=16", "model.global_every=2",
              "model.moe.norm_topk_prob=false", "model.moe.bias_update_rate=0.05", *BIAS_MOVED),
}


def train_tiny_run(tmp: Path, arch: str, dataset: Path, *sets: str) -> Path:
    """A run of `arch`'s tiny model trained 4 steps (3 for the sigmoid MoEs), one checkpoint, in tmp/arch."""
    out = Path(tmp) / arch
    result = run_train(out, dataset, *SHORT, *ARCHS[arch], *sets)
    assert result.returncode == 0, result.stderr
    return out


def train_here(out: Path, dataset: Path, *sets: str, resume: bool = False, config: Path = TINY,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """train_helpers.run_train's `glassroom train` run in this process, offline."""
    argv = train_cmd(out, dataset, *sets, resume=resume, config=config)[3:]  # past `python -m glassroom`
    return glassroom_in_process(*argv, env={**OFFLINE, **(env or {})})


def train_tiny_run_here(tmp: Path, arch: str, dataset: Path, *sets: str) -> Path:
    """train_tiny_run's run, trained in this process."""
    out = Path(tmp) / arch
    result = train_here(out, dataset, *SHORT, *ARCHS[arch], *sets)
    assert result.returncode == 0, result.stderr
    return out


def export_folder(run: Path, out: Path, **options) -> Path:
    """`glassroom export` in process (options: step, dtype, max_shard_size, force)."""
    from glassroom.train.run_folder import export_run

    return export_run(run, out, **options)


def hf_model(folder: Path):
    """(AutoModelForCausalLM in fp32, eval mode, AutoTokenizer) of `folder`, offline."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True)
    return model.eval(), AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def real_text(chars: int = 400) -> str:
    source = Path(sysconfig.get_paths()["stdlib"]) / "json" / "decoder.py"
    return source.read_text()[:chars]


def cli(*args: str) -> subprocess.CompletedProcess:
    """`glassroom ARGS` as a user runs it, offline."""
    return subprocess.run([sys.executable, "-m", "glassroom", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **OFFLINE})


def cli_here(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`glassroom ARGS` in this process, offline: exit code, stdout and stderr as `cli` gives them."""
    return glassroom_in_process(*args, cwd=cwd, env=OFFLINE)


def one_line_error(result: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2 with one line `error: ...` holding each of `words`."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


SMALL = dict(vocab_size=2048, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, intermediate_size=96, max_position_embeddings=64, eos_token_id=0, rms_norm_eps=1e-5)


MOE = dict(num_experts_per_tok=2, moe_intermediate_size=32)


HF_CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rope_parameters={
        "rope_type": "llama3", "rope_theta": 50000.0, "factor": 4.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=16)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(use_sliding_window=True, sliding_window=16, tie_word_embeddings=True,
                                                      layer_types=["sliding_attention", "sliding_attention", "full_attention"])),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(MOE, num_experts=4, mlp_only_layers=[0], norm_topk_prob=True)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=32)),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(MOE, n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1,
                                                           routed_scaling_factor=1.5, norm_topk_prob=True, partial_rotary_factor=1.0,
                                                           num_nextn_predict_layers=0)),
    "dots1": ("Dots1Config", "Dots1ForCausalLM", dict(MOE, n_routed_experts=4, n_shared_experts=2, first_k_dense_replace=1,
                                                    routed_scaling_factor=2.0, norm_topk_prob=False, sliding_window=16,
                                                    layer_types=["sliding_attention", "full_attention"] * 1 + ["sliding_attention"])),
}


def make_hf_folder(folder, arch: str, tokenizer, dtype=torch.float32):
    """A transformers model of `arch` with random weights (norms and router biases too), saved with
    save_pretrained, with the test dataset's tokenizer.json beside it."""
    import transformers

    config_name, model_name, extra = HF_CONFIGS[arch]
    config = getattr(transformers, config_name)(**{**SMALL, **extra})
    torch.manual_seed(7)
    model = getattr(transformers, model_name)(config)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name.endswith("norm.weight"):
                tensor.copy_(1 + 0.1 * torch.randn_like(tensor))
            elif name.endswith("e_score_correction_bias"):
                tensor.copy_(0.01 * torch.randn_like(tensor))
    model.to(dtype).save_pretrained(str(folder))
    shutil.copyfile(tokenizer, folder / "tokenizer.json")
    return folder
