"""`glassroom export`: each architecture loads in transformers with glassroom's logits and token ids;
bf16 and sharded folders; the model card; bad input is one line and exit 2, nothing destroyed."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from hf_helpers import ARCHS, cli, export_folder, hf_model, one_line_error, real_text, train_tiny_run_here
from hf_helpers import cli_here
from hf_helpers import cli_here as glassroom
from hf_helpers import train_here
from train_helpers import TINY
import yaml

from glassroom.data.chat import ChatTemplate
from glassroom.data.tokenizer import train_tokenizer

from chat_helpers import conversations, docstring_answers

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def runs(tiny_dataset, tmp_path_factory):
    """Tiny runs, trained on first use, one per architecture."""
    root, made = tmp_path_factory.mktemp("hf-runs"), {}

    def get(arch: str):
        if arch not in made:
            made[arch] = train_tiny_run_here(root, arch, tiny_dataset)
        return made[arch]
    return get


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(ARCHS))
def test_exported_model_matches_glassroom_in_transformers(runs, tmp_path, arch):
    import glassroom
    from safetensors import safe_open

    run = runs(arch)
    out = export_folder(run, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == arch
    model, tok = glassroom.load(run)
    hf, hf_tok = hf_model(out)
    assert type(hf).__name__ == config["architectures"][0]
    text = real_text()
    ids = tok.encode(text).ids
    assert hf_tok(text)["input_ids"] == ids and len(ids) > 48
    x = torch.tensor([ids[:48], ids[10:58]])
    with torch.no_grad():
        ours, theirs = model(x).logits, hf(x).logits
    assert (ours - theirs).abs().max().item() < 1e-4
    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
    if "moe" in arch or arch in ("mixtral", "dots1"):
        part = "block_sparse_moe.experts.3.w2" if arch == "mixtral" else "mlp.experts.3.down_proj"
        assert f"model.layers.1.{part}.weight" in keys  # the hub's per-expert keys
    if arch in ("glm4_moe", "dots1"):  # the balancing bias moved and was exported
        bias = hf.model.layers[1].mlp.gate.e_score_correction_bias
        assert torch.equal(bias, model.blocks[1].mlp.router_bias) and bias.abs().max() > 0


VARIANTS = {  # more of what each architecture takes, beyond ARCHS
    "qwen3_moe": ("model.sliding_window=16", "model.moe.first_dense_layers=0", "model.moe.norm_topk_prob=true"),
    "glm4_moe": ("model.moe.top_k=1", "model.moe.norm_topk_prob=", "model.moe.n_shared_experts=2",
                 "model.moe.first_dense_layers=0"),
    # no shared experts: written as one whose weights are zero (dots.llm1 and GLM-4-MoE always have one)
    "dots1": ("model.sliding_window=", "model.global_every=", "model.moe.routed_scale=0.5",
              "model.moe.n_shared_experts=0"),
    "llama": ("model.rope_scaling={type: linear, factor: 2.0}", "model.n_kv_heads=1", "model.rope_theta=500.0"),
    "qwen3": ("model.sliding_window=", "model.global_every=", "model.norm_eps=1e-3"),
}


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(VARIANTS))
def test_more_variants_match_transformers(tiny_dataset, tmp_path, arch):
    """In process, random weights (norms and router biases too): the config mapping is what is tested."""
    import yaml

    from glassroom.config import apply_overrides
    from glassroom.hf.export import write_folder
    from glassroom.hf.load import build_from_state
    from glassroom.model.config import model_config_from_mapping
    from glassroom.model.transformer import build_model
    from train_helpers import TINY

    raw = apply_overrides(yaml.safe_load(TINY.read_text()), [*ARCHS[arch], *VARIANTS[arch]])
    cfg = model_config_from_mapping(raw)
    state = build_model(cfg, seed=3).state_dict()
    generator = torch.Generator().manual_seed(5)
    for name, tensor in state.items():
        if name.endswith("norm.weight"):
            tensor.add_(0.1 * torch.randn(tensor.shape, generator=generator))
        elif name.endswith("router_bias") and cfg.moe.router == "sigmoid":
            tensor.add_(0.05 * torch.randn(tensor.shape, generator=generator))
    out = write_folder(tmp_path / "hf", raw["model"], state, tiny_dataset / "tokenizer.json")
    assert json.loads((out / "config.json").read_text())["model_type"] == arch
    model = build_from_state(cfg, state, "test")
    hf, hf_tok = hf_model(out)
    x = torch.tensor([hf_tok(real_text())["input_ids"][:48]])
    with torch.no_grad():
        assert (model(x).logits - hf(x).logits).abs().max().item() < 1e-4


def test_bf16_sharded_export_loads_and_keeps_the_values(runs, tmp_path):
    from safetensors.torch import load_file

    run = runs("glm4_moe")
    full = export_folder(run, tmp_path / "fp32")
    half = export_folder(run, tmp_path / "bf16", dtype="bf16", max_shard_size=100_000)
    index = json.loads((half / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and not (half / "model.safetensors").exists()
    assert json.loads((half / "config.json").read_text())["dtype"] == "bfloat16"
    reference = load_file(str(full / "model.safetensors"))
    got = {}
    for shard in shards:
        got.update(load_file(str(half / shard)))
    assert set(got) == set(reference)
    for name, tensor in reference.items():
        assert got[name].dtype == torch.bfloat16
        assert torch.equal(got[name], tensor.to(torch.bfloat16)), name
    hf, _ = hf_model(half)
    assert hf.model.layers[1].mlp.experts.gate_up_proj.shape[0] == 4


def test_model_card_and_tokenizer_files(runs, tiny_dataset, tmp_path):
    out = export_folder(runs("llama"), tmp_path / "hf")
    card = (out / "README.md").read_text()
    for needle in ("LlamaForCausalLM", "## Parameters", "| prose |", "| docs |", "| code |",
                   "## Bits per byte", "dataset manifest sha256 (data.path at export): ", "- step: 4", "## Config"):
        assert needle in card, needle
    assert "unknown (dataset not found)" not in card
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tok_config["eos_token"] == "<|endoftext|>" and tok_config["bos_token"] is None
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 0
    assert (out / "tokenizer.json").read_bytes() == (tiny_dataset / "tokenizer.json").read_bytes()


@pytest.mark.slow
def test_cli_export_then_out_rules(runs, tmp_path):
    run = runs("llama")
    out = tmp_path / "hf"
    result = glassroom("export", str(run), "--out", str(out), "--dtype", "bf16")
    assert result.returncode == 0, result.stderr
    before = (out / "model.safetensors").read_bytes()
    # through `python -m glassroom`: the one line and exit code 2 reach a user's terminal
    one_line_error(cli("export", str(run), "--out", str(out)), "--force")
    assert (out / "model.safetensors").read_bytes() == before
    assert glassroom("export", str(run), "--out", str(out), "--force").returncode == 0
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    one_line_error(glassroom("export", str(run), "--out", str(other), "--force"), "holds keep.txt", "not replacing it")
    assert (other / "keep.txt").read_text() == "mine"
    one_line_error(glassroom("export", str(run), "--out", str(run / "hf")), "inside the run folder")
    assert not (run / "hf").exists()
    assert not list(tmp_path.glob(".*tmp*"))


def test_cli_missing_or_damaged_checkpoint(runs, tiny_dataset, tmp_path):
    run = tmp_path / "two"
    shutil.copytree(runs("mistral"), run)
    one_line_error(glassroom("export", str(run), "--out", str(tmp_path / "a"), "--step", "3"), "no checkpoint at step 3")
    data = run / "checkpoints" / "step_0000004" / "__0_0.distcp"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    one_line_error(glassroom("export", str(run), "--out", str(tmp_path / "b"), "--step", "4"), "checksum mismatch")
    one_line_error(glassroom("export", str(run), "--out", str(tmp_path / "c")), "no intact checkpoint")
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
    empty = tmp_path / "fresh"
    assert train_here(empty, tiny_dataset, "train.steps=2", "train.checkpoint_every=4",
                     "train.eval_every=4", "model.moe=").returncode == 0
    shutil.rmtree(empty / "checkpoints")
    one_line_error(glassroom("export", str(empty), "--out", str(tmp_path / "d")), "no checkpoint yet")


def test_cli_newest_damaged_falls_back_with_a_warning(runs, tmp_path, tiny_dataset):
    run = tmp_path / "run"
    assert train_here(run, tiny_dataset, "train.steps=4", "train.checkpoint_every=2", "train.eval_every=4",
                     "model.moe=").returncode == 0
    (run / "checkpoints" / "step_0000004" / "trainer.json").write_text("{}")
    result = glassroom("export", str(run), "--out", str(tmp_path / "hf"))
    assert result.returncode == 0, result.stderr
    assert "step_0000004/trainer.json" in result.stderr and "using step 2" in result.stderr
    assert json.loads((tmp_path / "hf" / "glassroom-export.json").read_text())["step"] == 2


@pytest.mark.parametrize("sets, key", [
    (("model.moe=", "model.sliding_window=8", "model.global_every=2"), "model.global_every"),
    (("model.moe.router=softmax", "model.moe.n_shared_experts=1", "model.moe.bias_update_rate=0"),
     "model.moe.n_shared_experts"),
    (("model.moe.router=softmax", "model.moe.n_shared_experts=0"), "model.moe.bias_update_rate"),
])
def test_cli_unsupported_option_is_named(tiny_dataset, tmp_path, sets, key):
    run = tmp_path / "run"
    # 3 steps: the balancer moves each bias by +-rate a step, and two steps can cancel to exactly 0 (data-dependent)
    result = train_here(run, tiny_dataset, "train.steps=3", "train.checkpoint_every=3", "train.eval_every=3", *sets)
    assert result.returncode == 0, result.stderr
    one_line_error(glassroom("export", str(run), "--out", str(tmp_path / "hf")), key)
    assert not (tmp_path / "hf").exists()


def test_card_has_downstream_scores_and_redacts(tiny_dataset, tmp_path):
    from glassroom.observe.store import StoreWriter

    run = tmp_path / "run"
    secret = "hf_" + "a1B2c3D4e5F6g7H8i9J0"
    assert train_here(run, tiny_dataset, "train.steps=2", "train.checkpoint_every=2", "train.eval_every=2",
                     "model.moe=", f"observe.wandb_project={secret}").returncode == 0
    with StoreWriter(run) as writer:
        writer.log(2, {"downstream/glassroom_mc/acc": 0.625})
        writer.log(3, {"downstream/glassroom_mc/acc": 0.9})  # after the exported step: not on the card
    card = (export_folder(run, tmp_path / "hf") / "README.md").read_text()
    assert "## Downstream scores" in card and "| glassroom_mc/acc | 0.6250 |" in card and "0.9000" not in card
    assert secret not in card and "wandb_project" in card
    assert card.startswith("---\nlibrary_name: transformers\n")


def test_load_run_steps_and_exported_folder(runs, tmp_path, tiny_dataset):
    import glassroom
    from glassroom.errors import GlassroomError

    run = tmp_path / "run"
    assert train_here(run, tiny_dataset, "train.steps=4", "train.checkpoint_every=2", "train.eval_every=4",
                     *ARCHS["qwen3"]).returncode == 0
    newest, tok = glassroom.load(run)
    early, _ = glassroom.load(run, step=2)
    assert not newest.training and next(newest.parameters()).dtype == torch.float32
    assert not torch.equal(newest.embed.weight, early.embed.weight)
    assert tok.encode("<|endoftext|>").ids != [0]  # special-token text is ordinary text, as in the data
    exported, _ = glassroom.load(export_folder(run, tmp_path / "hf", step=2))
    for (name, x), (_, y) in zip(early.state_dict().items(), exported.state_dict().items()):
        assert torch.equal(x, y), name
    for path, step, words in [(tmp_path / "nowhere", None, "no such folder"), (run, 3, "no checkpoint at step 3"),
                              (tmp_path / "hf", 2, "step applies to run folders")]:
        with pytest.raises(GlassroomError, match=words):
            glassroom.load(path, step)
    (tmp_path / "hf" / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(GlassroomError, match="not a readable safetensors file"):
        glassroom.load(tmp_path / "hf")




@pytest.fixture(scope="module")
def tok():
    texts = [answer for _, answer in docstring_answers()]
    return train_tokenizer(texts, 500)


@pytest.fixture(scope="module")
def template(tok):
    return ChatTemplate.for_tokenizer(tok)


def real_conversation() -> list[dict]:
    (q1, a1), (q2, a2) = docstring_answers()[3:5]
    return [{"role": "system", "content": "Answer from the Python documentation."},
            {"role": "user", "content": f"What does {q1} do?"}, {"role": "assistant", "content": a1},
            {"role": "user", "content": f"And {q2}?"}, {"role": "assistant", "content": a2}]


def test_exported_folder_applies_the_same_template(tmp_path, monkeypatch):
    """transformers' AutoTokenizer.apply_chat_template on a glassroom export gives render's and prompt's ids."""
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(key, "1")
    import yaml
    from transformers import AutoTokenizer

    from glassroom.config import apply_overrides
    from glassroom.data.tokenizer import save_tokenizer
    from glassroom.hf.export import write_folder
    from glassroom.model.config import model_config_from_mapping
    from glassroom.model.transformer import build_model
    from train_helpers import TINY

    fresh = train_tokenizer([a for _, a in docstring_answers()], 400)
    template = ChatTemplate.for_tokenizer(fresh)
    save_tokenizer(fresh, tmp_path / "tokenizer.json")
    raw = apply_overrides(yaml.safe_load(TINY.read_text()), ["model.moe=", f"model.vocab_size={fresh.get_vocab_size()}"])
    state = build_model(model_config_from_mapping(raw), seed=0).state_dict()
    out = write_folder(tmp_path / "hf", raw["model"], state, tmp_path / "tokenizer.json")
    hf_tok = AutoTokenizer.from_pretrained(str(out))
    for conv in conversations(6)[2:6] + [real_conversation()]:
        messages = conv["messages"] if isinstance(conv, dict) else conv
        ids, _ = template.render(messages)
        theirs = hf_tok.apply_chat_template(messages, tokenize=True, return_dict=False)
        assert list(theirs) == ids.tolist()
        prompt = hf_tok.apply_chat_template(messages[:-1], tokenize=True, add_generation_prompt=True, return_dict=False)
        assert list(prompt) == template.prompt(messages[:-1]).tolist()


def test_export_without_template_tokens_writes_no_chat_template(template):
    from glassroom.hf.export import _chat_template

    plain = train_tokenizer([a for _, a in docstring_answers()], 300)
    assert _chat_template(plain) == {}
    assert _chat_template(template.tok)["chat_template"] == template.jinja




@pytest.fixture(scope="module")
def dense_run(tiny_dataset, tmp_path_factory):
    run = tmp_path_factory.mktemp("review") / "run"
    result = train_here(run, tiny_dataset, "model.moe=", "train.steps=2", "train.checkpoint_every=1", "train.eval_every=2")
    assert result.returncode == 0, result.stderr
    return run


def _pruned_while_read(monkeypatch, copy_of):
    """The next checkpoint read finds its folder removed by the trainer's retention mid-read."""
    import glassroom.train.run_folder as load

    real, pruned = load.run_state, []

    def run_state(run):
        if not pruned:
            pruned.append(run.step)
            shutil.copytree(run.checkpoint, copy_of)
            shutil.rmtree(run.checkpoint)
        return real(run)
    monkeypatch.setattr(load, "run_state", run_state)
    return pruned


def _run_config(path, dataset, init) -> None:
    raw = yaml.safe_load(TINY.read_text())
    raw.pop("model")
    raw["data"]["path"] = str(dataset)
    raw["train"].update(steps=1, warmup_steps=0, checkpoint_every=1, eval_every=1)
    raw["init"] = init
    path.write_text(yaml.safe_dump(raw))


def test_force_never_deletes_what_no_export_wrote(dense_run, tmp_path):
    out = export_folder(dense_run, tmp_path / "hf")
    (out / "notes.txt").write_text("mine")
    one_line_error(cli_here("export", str(dense_run), "--out", str(out), "--force"), "notes.txt", "did not write")
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    (out / "lab").mkdir()  # e.g. a run folder moved inside it
    (out / "lab" / "config.yaml").write_text("x")
    one_line_error(cli_here("export", str(dense_run), "--out", str(out), "--force"), "lab/config.yaml")
    assert (out / "lab" / "config.yaml").is_file() and (out / "model.safetensors").is_file()
    shutil.rmtree(out / "lab")
    assert cli_here("export", str(dense_run), "--out", str(out), "--force").returncode == 0


def test_export_of_a_training_run_whose_checkpoint_is_pruned_while_read(dense_run, tmp_path, monkeypatch):
    from glassroom.errors import GlassroomError
    from glassroom.train.run_folder import export_run

    keep = tmp_path / "kept"
    pruned = _pruned_while_read(monkeypatch, keep)
    try:
        out = export_run(dense_run, tmp_path / "hf")  # the newest is gone: the next newest intact one
        assert pruned == [2] and json.loads((out / "glassroom-export.json").read_text())["step"] == 1
        assert "| total | 256 |" in (out / "README.md").read_text()  # step 1's counters, not none
    finally:
        shutil.move(keep, dense_run / "checkpoints" / "step_0000002")
    pruned.clear()
    try:
        with pytest.raises(GlassroomError, match="step_0000002: removed while it was read"):
            export_run(dense_run, tmp_path / "hf2", step=2)  # the step asked for: one line, no other step
        assert not (tmp_path / "hf2").exists()
    finally:
        shutil.move(keep, dense_run / "checkpoints" / "step_0000002")


def test_out_as_a_symlink_to_a_folder_is_refused(dense_run, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    one_line_error(cli_here("export", str(dense_run), "--out", str(tmp_path / "link")), "symbolic link")
    assert list(elsewhere.iterdir()) == [] and (tmp_path / "link").is_symlink()


def test_load_a_checkpoint_folder_or_another_folder_says_what_to_give(dense_run, tmp_path):
    import glassroom
    from glassroom.errors import GlassroomError

    with pytest.raises(GlassroomError, match=r"a checkpoint folder; give its run folder .* with step 2$"):
        glassroom.load(dense_run / "checkpoints" / "step_0000002")
    with pytest.raises(GlassroomError, match="not a run folder .* nor a Hugging Face folder") as info:
        glassroom.load(tmp_path)
    assert "resume" not in str(info.value)
    hf = export_folder(dense_run, tmp_path / "hf")
    one_line_error(cli_here("export", str(hf), "--out", str(tmp_path / "again")), "a Hugging Face folder, not a run folder")


def test_init_step_missing_or_no_checkpoint_is_named_and_nothing_is_left(dense_run, tiny_dataset, tmp_path):
    config = tmp_path / "run.yaml"
    _run_config(config, tiny_dataset, {"from": str(dense_run), "step": 5})
    one_line_error(cli_here("train", str(config), "--out", str(tmp_path / "new"), "--quiet"), "init.step", "(checkpoints: 1, 2)")
    assert not (tmp_path / "new").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.yaml").write_text((dense_run / "config.yaml").read_text())
    _run_config(config, tiny_dataset, {"from": str(bare)})
    one_line_error(cli_here("train", str(config), "--out", str(tmp_path / "new"), "--quiet"), "init.from", "no checkpoint yet")
    assert not (tmp_path / "new").exists()


def test_files_put_at_out_while_the_export_is_written_are_kept(dense_run, tmp_path, monkeypatch):
    import glassroom.hf.export as export
    from glassroom.train.run_folder import export_run
    from glassroom.errors import GlassroomError

    out = tmp_path / "hf"
    real = export._write_weights

    def write_weights(folder, tensors, max_bytes):  # meanwhile, someone else makes --out theirs
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        return real(folder, tensors, max_bytes)
    monkeypatch.setattr(export, "_write_weights", write_weights)
    with pytest.raises(GlassroomError, match="notes.txt|not empty"):
        export_run(dense_run, out)
    assert (out / "notes.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".hf")] == []  # no temporary folder left
