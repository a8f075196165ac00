"""`init: {from: DIR}`: models made with transformers (random weights) imported, trained without moving
a weight, exported: bit-identical tensors; init from a run folder; resume after init; bad folders."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
import yaml

from hf_helpers import cli, hf_model, one_line_error, real_text
from train_helpers import TINY

pytestmark = pytest.mark.filterwarnings("ignore")

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


def write_run_config(path, dataset, init: dict, model: dict | None = None, **train) -> None:
    raw = yaml.safe_load(TINY.read_text())
    raw.pop("model")
    raw["data"]["path"] = str(dataset)
    # 0 steps: the imported model evaluated and checkpointed as step 0. Tests that train on give
    # steps; lr 1e-30 (below every weight's last bit) and no weight decay keep the weights still.
    raw["train"].update(steps=0, lr=1e-30, weight_decay=0.0, warmup_steps=0, checkpoint_every=1, eval_every=1)
    raw["train"].update(train)
    raw["init"] = init
    if model is not None:
        raw["model"] = model
    path.write_text(yaml.safe_dump(raw))


def tensors(folder) -> dict[str, torch.Tensor]:
    from glassroom.hf.load import read_hf_tensors

    return read_hf_tensors(folder)


def import_train_export(tmp_path, dataset, source, dtype="fp32", model=None):
    config = tmp_path / "run.yaml"
    write_run_config(config, dataset, {"from": str(source)}, model)
    train = cli("train", str(config), "--out", str(tmp_path / "run"), "--quiet")
    assert train.returncode == 0, train.stderr
    exported = cli("export", str(tmp_path / "run"), "--out", str(tmp_path / "out"), "--dtype", dtype)
    assert exported.returncode == 0, exported.stderr
    return tmp_path / "run", tmp_path / "out"


@pytest.mark.parametrize("arch", list(HF_CONFIGS))
def test_transformers_model_imported_trained_exported_bit_identical(tiny_dataset, tmp_path, arch):
    import glassroom

    source = make_hf_folder(tmp_path / "hf", arch, tiny_dataset / "tokenizer.json")
    # The folder's model; for the sigmoid routers only the balancing rate is set (held still).
    model = {"moe": {"bias_update_rate": 0.0}} if arch in ("glm4_moe", "dots1") else None
    run, out = import_train_export(tmp_path, tiny_dataset, source, model=model)
    want, got = tensors(source), tensors(out)
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    assert f"- initialised from: {source}" in (out / "README.md").read_text()
    ours, tok = glassroom.load(run)
    theirs, _ = hf_model(source)
    x = torch.tensor([tok.encode(real_text()).ids[:40]])
    with torch.no_grad():
        assert (ours(x).logits - theirs(x).logits).abs().max().item() < 1e-4


@pytest.mark.parametrize("arch", ["qwen3", "glm4_moe"])
def test_bf16_folder_round_trips_bit_for_bit(tiny_dataset, tmp_path, arch):
    source = make_hf_folder(tmp_path / "hf", arch, tiny_dataset / "tokenizer.json", dtype=torch.bfloat16)
    from glassroom.hf.load import model_section

    model = model_section(source)
    if "moe" in model:
        model["moe"]["bias_update_rate"] = 0.0
    _, out = import_train_export(tmp_path, tiny_dataset, source, dtype="bf16", model=model)
    want, got = tensors(source), tensors(out)
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert got[name].dtype == torch.bfloat16 and torch.equal(got[name], tensor), name


def test_init_from_a_run_folder_and_resume_uses_its_own_checkpoint(tiny_dataset, tmp_path):
    import glassroom

    source = make_hf_folder(tmp_path / "hf", "qwen3_moe", tiny_dataset / "tokenizer.json")
    first = tmp_path / "first.yaml"
    write_run_config(first, tiny_dataset, {"from": str(source)}, lr=3e-3, steps=2, checkpoint_every=2,
                     schedule="constant")
    assert cli("train", str(first), "--out", str(tmp_path / "a"), "--quiet").returncode == 0
    # A run started from the first run's checkpoint at step 2 holds its weights before any step.
    second = tmp_path / "second.yaml"
    write_run_config(second, tiny_dataset, {"from": str(tmp_path / "a"), "step": 2})
    assert cli("train", str(second), "--out", str(tmp_path / "b"), "--quiet").returncode == 0
    a, _ = glassroom.load(tmp_path / "a")
    b, _ = glassroom.load(tmp_path / "b")
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name
    # Straight to 4 steps, against 2 steps then --resume to 4 with the init weights gone: the resumed
    # run continues from its own checkpoint, bit for bit, and never reads the init folder's weights.
    straight = tmp_path / "straight.yaml"
    write_run_config(straight, tiny_dataset, {"from": str(source)}, lr=3e-3, steps=4, checkpoint_every=2,
                     schedule="constant")
    assert cli("train", str(straight), "--out", str(tmp_path / "c"), "--quiet").returncode == 0
    (source / "model.safetensors").rename(tmp_path / "moved.safetensors")
    resumed = cli("train", str(straight), "--out", str(tmp_path / "a"), "--quiet", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    c, _ = glassroom.load(tmp_path / "c")
    a4, _ = glassroom.load(tmp_path / "a")
    for (name, x), (_, y) in zip(c.state_dict().items(), a4.state_dict().items()):
        assert torch.equal(x, y), name
    one_line_error(cli("train", str(second), "--out", str(tmp_path / "b"), "--quiet", "--resume",
                             "--set", "init.step=4"), "init.step")


def _corrupt_truncated(folder):
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _corrupt_random(folder):
    (folder / "model.safetensors").write_bytes(os.urandom(4096))


def _not_json(folder):
    (folder / "config.json").write_text('{"model_type": "llama", ')


def _unknown_arch(folder):
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    (folder / "config.json").write_text(json.dumps(config))


def _other_tokenizer(folder):
    from glassroom.data.tokenizer import save_tokenizer, train_tokenizer

    save_tokenizer(train_tokenizer([real_text(4000)] * 3, 300), folder / "tokenizer.json")


@pytest.mark.parametrize("damage, words", [
    (_corrupt_truncated, ("model.safetensors", "not a readable safetensors file")),
    (_corrupt_random, ("model.safetensors", "not a readable safetensors file")),
    (_not_json, ("config.json", "not JSON")),
    (_unknown_arch, ("config.json", "'gpt2'")),
    (_other_tokenizer, ("data.path", "tokenizer: {path:")),
])
def test_bad_init_folders_are_one_line(tiny_dataset, tmp_path, damage, words):
    source = make_hf_folder(tmp_path / "hf", "llama", tiny_dataset / "tokenizer.json")
    damage(source)
    config = tmp_path / "run.yaml"
    write_run_config(config, tiny_dataset, {"from": str(source)})
    one_line_error(cli("train", str(config), "--out", str(tmp_path / "run"), "--quiet"), *words)
    assert not (tmp_path / "run").exists()


def test_disagreeing_model_section_and_init_keys(tiny_dataset, tmp_path):
    from glassroom.hf.load import model_section

    source = make_hf_folder(tmp_path / "hf", "mistral", tiny_dataset / "tokenizer.json")
    config = tmp_path / "run.yaml"
    model = {**model_section(source), "d_model": 128}
    write_run_config(config, tiny_dataset, {"from": str(source)}, model)
    one_line_error(cli("train", str(config), "--out", str(tmp_path / "run"), "--quiet"), "model.d_model", "128")
    for init, words in [({"from": str(tmp_path / "nowhere")}, ("init.from", "no such folder")),
                        ({"from": str(source), "step": 3}, ("init.step", "Hugging Face folder")),
                        ({"from": str(source), "steps": 3}, ("init.steps", "unknown key"))]:
        write_run_config(config, tiny_dataset, init)
        one_line_error(cli("train", str(config), "--out", str(tmp_path / "run"), "--quiet"), *words)
    assert not (tmp_path / "run").exists()
