"""Export, import and glassroom.load at their edges, as a careless or hostile user meets them: a model
card that shows a hostile run name as text and says at which step each value was measured; --force
that never deletes what no export wrote; a config.json that claims sizes its weights do not have,
nests without end or is of the wrong types; a checkpoint folder given where a run folder belongs;
init.step that does not exist. Each is one line (exit 2 at the CLI), nothing allocated or destroyed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import yaml

from hf_helpers import OFFLINE, cli, export_folder, one_line_error
from test_hf_import import make_hf_folder
from train_helpers import ROOT, TINY, run_train

pytestmark = pytest.mark.filterwarnings("ignore")

DENSE = {"vocab_size": 2048, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128, "max_seq_len": 64}
HOSTILE_NAME = "evil<img src=x onerror=alert(1)>\n\nOwned | x ** [link](javascript:alert(1))\n==="






@pytest.fixture(scope="module")
def dense_run(tiny_dataset, tmp_path_factory):
    run = tmp_path_factory.mktemp("review") / "run"
    result = run_train(run, tiny_dataset, "model.moe=", "train.steps=2", "train.checkpoint_every=1", "train.eval_every=2")
    assert result.returncode == 0, result.stderr
    return run


# ------------------------------------------------------------------------------- the model card


def test_card_shows_a_hostile_run_name_and_init_path_as_text(tmp_path):
    from glassroom.hf.card import model_card

    run = tmp_path / HOSTILE_NAME
    run.mkdir()
    config = {"model": DENSE, "data": {"path": str(tmp_path)},
              "init": {"from": "/models/x\n## Fake section <script>alert(1)</script>", "step": None},
              "observe": {"wandb_project": "p ```` x"}}
    card = model_card(run, config, 4, "LlamaForCausalLM", {})
    lines = card.splitlines()
    heading = [line for line in lines if line.startswith("# ")]
    assert len(heading) == 1 and "Owned" in heading[0]  # the name's newlines do not start new lines
    assert not any(line.startswith(("Owned", "===", "## Fake")) for line in lines)
    prose = card[:card.index("## Config")]  # the config itself is shown inside a fenced code block
    for raw in ("<img", "<script", "](javascript", "| x"):  # HTML, a link, a table cell: escaped
        assert raw not in prose.replace("\\" + raw[0], ""), raw
    assert "\\<img src=x onerror=alert(1)\\>" in card  # the same text, shown
    fence = next(line for line in lines if line.endswith("yaml"))[:-len("yaml")]
    assert set(fence) == {"`"} and len(fence) > 4 and lines[-1] == fence  # longer than any backtick run inside


def test_card_says_the_step_each_value_was_measured_at(tmp_path):
    from glassroom.hf.card import model_card
    from glassroom.observe.store import StoreWriter

    run = tmp_path / "run"
    run.mkdir()
    with StoreWriter(run) as writer:
        writer.log(3, {"eval/prose/bpb": 2.5, "downstream/glassroom_mc/acc": 0.5})
        writer.log(6, {"eval/prose/bpb": 2.0})  # after the exported step: not on the card
    card = model_card(run, {"model": DENSE, "data": {"path": str(tmp_path)}}, 4, "LlamaForCausalLM", {})
    assert "last evaluation at or before step 4" in card and "| prose | 2.5000 | 3 |" in card
    assert "| glassroom_mc/acc | 0.5000 | 3 |" in card and "2.0000" not in card


# ------------------------------------------------------------------------------- export --out


def test_force_never_deletes_what_no_export_wrote(dense_run, tmp_path):
    out = export_folder(dense_run, tmp_path / "hf")
    (out / "notes.txt").write_text("mine")
    one_line_error(cli("export", str(dense_run), "--out", str(out), "--force"), "notes.txt", "no export writes")
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    (out / "lab").mkdir()  # e.g. a run folder moved inside it
    (out / "lab" / "config.yaml").write_text("x")
    one_line_error(cli("export", str(dense_run), "--out", str(out), "--force"), "'lab'")
    assert (out / "lab" / "config.yaml").is_file() and (out / "model.safetensors").is_file()
    shutil.rmtree(out / "lab")
    assert cli("export", str(dense_run), "--out", str(out), "--force").returncode == 0


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
    one_line_error(cli("export", str(dense_run), "--out", str(tmp_path / "link")), "symbolic link")
    assert list(elsewhere.iterdir()) == [] and (tmp_path / "link").is_symlink()


# ------------------------------------------------------------------------------- glassroom.load


def test_load_a_checkpoint_folder_or_another_folder_says_what_to_give(dense_run, tmp_path):
    import glassroom
    from glassroom.errors import GlassroomError

    with pytest.raises(GlassroomError, match=r"a checkpoint folder; give its run folder .* with step 2$"):
        glassroom.load(dense_run / "checkpoints" / "step_0000002")
    with pytest.raises(GlassroomError, match="not a run folder .* nor a Hugging Face folder") as info:
        glassroom.load(tmp_path)
    assert "resume" not in str(info.value)
    hf = export_folder(dense_run, tmp_path / "hf")
    one_line_error(cli("export", str(hf), "--out", str(tmp_path / "again")), "a Hugging Face folder, not a run folder")


def _hf(tmp_path, tiny_dataset, name="hf"):
    return make_hf_folder(tmp_path / name, "llama", tiny_dataset / "tokenizer.json")


def _edit_config(folder, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("changes, words", [
    ({"num_hidden_layers": 10**9}, "do not match"), ({"vocab_size": 10**12}, "do not match"),
    ({"hidden_size": 10**7}, "do not match"), ({"max_position_embeddings": 10**12}, "RoPE tables need"),
], ids=["layers", "vocab", "hidden", "positions"])
def test_config_claiming_huge_sizes_is_one_line_without_allocating(tiny_dataset, tmp_path, changes, words):
    folder = _hf(tmp_path, tiny_dataset)
    _edit_config(folder, **changes)
    # 3 GB of address space: building the claimed model (or naming 10**9 layers' tensors) cannot fit
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))\n"
            "import glassroom\nfrom glassroom.errors import GlassroomError\n"
            "try:\n    glassroom.load(sys.argv[1])\nexcept GlassroomError as exc:\n    print('error:', exc); sys.exit(2)\n")
    result = subprocess.run([sys.executable, "-c", code, str(folder)], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env={**os.environ, **OFFLINE})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "config.json" in result.stdout and words in result.stdout, result.stdout


def _deep(folder):
    (folder / "config.json").write_text('{"a":' * 10000 + "1" + "}" * 10000)


def _rope_list(folder):
    _edit_config(folder, rope_parameters=[1, 2], rope_scaling=None)


def _layer_types_junk(folder):
    _edit_config(folder, model_type="qwen3", architectures=["Qwen3ForCausalLM"], use_sliding_window=True,
                 sliding_window=8, layer_types="x")


def _int_weights(folder):
    from safetensors.torch import load_file, save_file

    tensors = {k: (v * 100).to(torch.int32) for k, v in load_file(str(folder / "model.safetensors")).items()}
    save_file(tensors, str(folder / "model.safetensors"))


def _untied_head_in_tied_config(folder):
    from safetensors.torch import load_file, save_file

    _edit_config(folder, tie_word_embeddings=True)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["lm_head.weight"] = 2 * tensors["model.embed_tokens.weight"]  # transformers then does not tie them
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _mistral_mixed_layer_types(folder):
    _edit_config(folder, model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=8,
                 layer_types=["sliding_attention", "full_attention", "full_attention"])


@pytest.mark.parametrize("damage, words", [
    (_deep, "nested too deep"),
    (_mistral_mixed_layer_types, "layer_types in a mistral config.json"),
    (_rope_list, "wrong type"),
    (_layer_types_junk, "layer_types must list 3 entries"),
    (_int_weights, "not a floating type"),
    (_untied_head_in_tied_config, "tie_word_embeddings is true but"),
], ids=lambda v: getattr(v, "__name__", "")[1:] if callable(v) else "")
def test_malformed_hf_folder_is_one_line(tiny_dataset, tmp_path, damage, words):
    import glassroom
    from glassroom.errors import GlassroomError

    folder = _hf(tmp_path, tiny_dataset)
    damage(folder)
    with pytest.raises(GlassroomError) as info:
        glassroom.load(folder)
    assert words in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------------------- init


def _run_config(path, dataset, init) -> None:
    raw = yaml.safe_load(TINY.read_text())
    raw.pop("model")
    raw["data"]["path"] = str(dataset)
    raw["train"].update(steps=1, warmup_steps=0, checkpoint_every=1, eval_every=1)
    raw["init"] = init
    path.write_text(yaml.safe_dump(raw))


def test_init_step_missing_or_no_checkpoint_is_named_and_nothing_is_left(dense_run, tiny_dataset, tmp_path):
    config = tmp_path / "run.yaml"
    _run_config(config, tiny_dataset, {"from": str(dense_run), "step": 5})
    one_line_error(cli("train", str(config), "--out", str(tmp_path / "new"), "--quiet"), "init.step", "(checkpoints: 1, 2)")
    assert not (tmp_path / "new").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.yaml").write_text((dense_run / "config.yaml").read_text())
    _run_config(config, tiny_dataset, {"from": str(bare)})
    one_line_error(cli("train", str(config), "--out", str(tmp_path / "new"), "--quiet"), "init.from", "no checkpoint yet")
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


def test_resume_after_the_init_folder_is_deleted(tiny_dataset, tmp_path):
    """The docs: a resumed run continues from its own checkpoint and never reads the init folder again;
    so deleting that folder (a large download) after the start must not stop a --resume."""
    source = _hf(tmp_path, tiny_dataset)
    config = tmp_path / "run.yaml"
    _run_config(config, tiny_dataset, {"from": str(source)})
    run = tmp_path / "run"
    assert cli("train", str(config), "--out", str(run), "--quiet").returncode == 0
    shutil.rmtree(source)
    resumed = cli("train", "--out", str(run), "--quiet", "--resume", "--set", "train.steps=2")
    assert resumed.returncode == 0, resumed.stderr
    assert (run / "checkpoints" / "step_0000002").is_dir()
    # A new run still needs the folder: one line, nothing left behind.
    one_line_error(cli("train", str(run / "config.yaml"), "--out", str(tmp_path / "new"), "--quiet"),
                   "init.from", "no such folder")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("arch, keys", [
    ("llama", {"sliding_window": 4}), ("glm4_moe", {"sliding_window": 4}),
    ("mistral", {"sliding_window": 4, "layer_types": ["sliding_attention"] * 3}),
], ids=["llama", "glm4_moe", "mistral-layer_types"])
def test_keys_that_transformers_ignores_are_ignored(tiny_dataset, tmp_path, arch, keys):
    """Llama and GLM-4-MoE attend to every earlier token whatever config.json's sliding_window says;
    glassroom's model of the folder must compute the same logits."""
    import glassroom
    from hf_helpers import hf_model

    folder = make_hf_folder(tmp_path / "hf", arch, tiny_dataset / "tokenizer.json")
    _edit_config(folder, **keys)
    model, _ = glassroom.load(folder)
    assert model.cfg.global_every is None
    theirs, _ = hf_model(folder)
    ids = torch.arange(1, 25).unsqueeze(0)
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, theirs(ids).logits, atol=1e-4)


@pytest.mark.parametrize("arch, left_out", [
    ("mixtral", ("rms_norm_eps", "rope_parameters", "rope_theta", "rope_scaling")),
    ("glm4_moe", ("norm_topk_prob", "first_k_dense_replace")),
])
def test_keys_left_out_of_config_json_take_transformers_defaults(tiny_dataset, tmp_path, arch, left_out):
    """A hand-written config.json may leave keys out; transformers then takes its config class's
    defaults (Mixtral: rope_theta 1e6, rms_norm_eps 1e-5; GLM-4-MoE: norm_topk_prob true, one leading
    dense layer), and glassroom's model of the folder must compute the same."""
    import glassroom
    from hf_helpers import hf_model

    folder = make_hf_folder(tmp_path / "hf", arch, tiny_dataset / "tokenizer.json")
    config = json.loads((folder / "config.json").read_text())
    for key in left_out:
        config.pop(key, None)
    if arch == "glm4_moe":  # its rope default rotates half the head, which glassroom does not have
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}
    (folder / "config.json").write_text(json.dumps(config))
    model, _ = glassroom.load(folder)
    theirs, _ = hf_model(folder)
    ids = torch.arange(1, 25).unsqueeze(0)
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, theirs(ids).logits, atol=1e-4)
