"""Tests of glassroom/hf/load.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from hf_helpers import make_hf_folder, OFFLINE
from train_helpers import ROOT

from glassroom.errors import GlassroomError
from glassroom.hf.load import read_hf_config



def _hf(tmp_path, tiny_dataset, name="hf"):
    return make_hf_folder(tmp_path / name, "llama", tiny_dataset / "tokenizer.json")


def _edit_config(folder, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


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


HUGE = {  # config.json claiming sizes no machine holds: (changes, words of the error)
    "layers": ({"num_hidden_layers": 10**9}, "do not match"), "vocab": ({"vocab_size": 10**12}, "do not match"),
    "hidden": ({"hidden_size": 10**7}, "do not match"), "positions": ({"max_position_embeddings": 10**12}, "RoPE tables need"),
}

# 3 GB of address space: building the claimed model (or naming 10**9 layers' tensors) cannot fit. Each
# folder is loaded in turn; what happened to it is one JSON line [name, exit code, message], the exit
# code a `glassroom.load` script would give (2 for a GlassroomError).
HUGE_LOADS = """import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
import glassroom
from glassroom.errors import GlassroomError
for name, folder in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        glassroom.load(folder)
        print(json.dumps([name, 0, "loaded"]), flush=True)
    except GlassroomError as exc:
        print(json.dumps([name, 2, f"error: {exc}"]), flush=True)
    except BaseException as exc:
        print(json.dumps([name, 1, repr(exc)[:2000]]), flush=True)
"""


@pytest.fixture(scope="module")
def huge_loads(tiny_dataset, tmp_path_factory) -> dict:
    """Each HUGE folder loaded under the address-space limit, all in one fresh interpreter (a limit
    set in the test process would bind every later test): {name: (exit code, message)}."""
    import shutil

    root = tmp_path_factory.mktemp("huge")
    base, argv = _hf(root, tiny_dataset), []
    for name, (changes, _) in HUGE.items():
        folder = shutil.copytree(base, root / name)
        _edit_config(folder, **changes)
        argv += [name, str(folder)]
    result = subprocess.run([sys.executable, "-c", HUGE_LOADS, *argv], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env={**os.environ, **OFFLINE})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [name for name, _, _ in lines] == list(HUGE), result.stdout + result.stderr[-2000:]
    return {name: (code, message) for name, code, message in lines}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", list(HUGE))
def test_config_claiming_huge_sizes_is_one_line_without_allocating(huge_loads, name):
    code, message = huge_loads[name]
    assert code == 2, message
    assert "config.json" in message and HUGE[name][1] in message, message


@pytest.mark.filterwarnings("ignore")
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


@pytest.mark.filterwarnings("ignore")
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


@pytest.mark.filterwarnings("ignore")
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


@pytest.mark.parametrize("bad", ["9" * 5000, "1e400", "NaN", "Infinity"])
def test_a_config_json_with_a_number_past_the_bounds_is_one_error(tmp_path, bad):
    (tmp_path / "config.json").write_text('{"hidden_size": %s}' % bad)
    with pytest.raises(GlassroomError, match="config.json: not JSON") as info:
        read_hf_config(tmp_path)
    assert len(str(info.value)) < 300
