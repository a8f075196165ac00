"""Generation (glassroom/generate.py) and `glassroom sample`: greedy equals a plain argmax loop over
the full forward, sampling is seeded and honours top-p, EOS stops, bad input is one line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glassroom.cli import main
from glassroom.errors import GlassroomError
from glassroom.generate import generate, pick_next
from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import build_model

ROOT = Path(__file__).resolve().parents[1]
SLIDING = ModelConfig(vocab_size=300, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64,
                      sliding_window=5, global_every=2)
MOE = dataclasses.replace(SLIDING, qk_norm=True, sliding_window=None, global_every=None,
                          moe=MoEConfig(n_experts=4, top_k=2, d_expert=32, n_shared_experts=1, first_dense_layers=1))


def _greedy_without_cache(model, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("cfg", [SLIDING, MOE], ids=["sliding", "moe"])
def test_greedy_equals_argmax_over_the_full_forward(cfg):
    model = build_model(cfg, seed=1).train()
    prompt = [5, 17, 9, 250, 3, 3, 41]
    [out] = generate(model, [prompt], max_new_tokens=40)
    assert model.training  # generation ran in eval mode and left the mode as it found it
    if cfg.moe is not None:  # in eval mode the routers count nothing toward the next optimizer step
        assert int(model.step_tokens_per_expert().sum()) == 0
    model.eval()
    assert out.new_ids == _greedy_without_cache(model, prompt, 40)
    assert out.stop_reason == "max_new_tokens" and out.prompt_ids == prompt


def test_prompts_of_different_lengths_in_one_call_equal_each_alone():
    model = build_model(SLIDING, seed=2)
    prompts = [[1, 2, 3], [7, 8, 9, 10, 11], [4, 5, 6], [200]]
    together = generate(model, prompts, max_new_tokens=12, temperature=0.0)
    for prompt, got in zip(prompts, together):
        assert got.new_ids == generate(model, [prompt], max_new_tokens=12)[0].new_ids


def test_eos_stops_and_is_kept_as_the_last_new_token():
    model = build_model(SLIDING, seed=3)
    free = generate(model, [[1, 2, 3]], max_new_tokens=20)[0].new_ids
    eos = free[5]
    first = free.index(eos)
    out = generate(model, [[1, 2, 3]], max_new_tokens=20, eos_id=eos)[0]
    assert out.new_ids == free[:first + 1] and out.stop_reason == "eos"
    # In a batch, the finished prompt stops there while the other goes on.
    other = [9, 9, 9]
    other_free = generate(model, [other], max_new_tokens=20)[0].new_ids
    both = generate(model, [[1, 2, 3], other], max_new_tokens=20, eos_id=eos)
    assert both[0].new_ids == out.new_ids
    assert both[1].new_ids == (other_free[:other_free.index(eos) + 1] if eos in other_free else other_free)


def test_sampling_is_seeded_and_differs_between_seeds():
    model = build_model(MOE, seed=4)
    runs = [generate(model, [[1, 2, 3]], 30, temperature=1.5, seed=s)[0].new_ids for s in (0, 0, 1)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    # A tiny top-p keeps only the most likely token: greedy, whatever the temperature and seed.
    greedy = generate(model, [[1, 2, 3]], 30)[0].new_ids
    assert generate(model, [[1, 2, 3]], 30, temperature=2.0, top_p=1e-6, seed=7)[0].new_ids == greedy


def test_top_p_draws_only_from_the_nucleus_and_temperature_reshapes():
    # probabilities 0.5, 0.3, 0.15, 0.05: top-p 0.7 keeps the first two, 0.85 the first three.
    logits = torch.log(torch.tensor([[0.05, 0.5, 0.15, 0.3]])).repeat(4000, 1)
    gen = torch.Generator().manual_seed(0)
    drawn = pick_next(logits, 1.0, 0.7, gen)
    counts = torch.bincount(drawn, minlength=4).tolist()
    assert counts[0] == 0 and counts[2] == 0
    assert abs(counts[1] / 4000 - 0.5 / 0.8) < 0.03
    drawn = pick_next(logits, 1.0, 0.85, gen)
    assert torch.bincount(drawn, minlength=4)[0] == 0 and torch.bincount(drawn, minlength=4)[2] > 0
    # Plain sampling follows the probabilities; a low temperature sharpens them.
    drawn = pick_next(logits, 1.0, 1.0, gen)
    assert abs(float((drawn == 0).float().mean()) - 0.05) < 0.015
    cold = pick_next(logits, 0.25, 1.0, gen)
    assert float((cold == 1).float().mean()) > 0.85
    assert torch.equal(pick_next(logits[:2], 0.0, 0.5, None), torch.tensor([1, 1]))


@pytest.mark.parametrize("kwargs, message", [
    ({"max_new_tokens": 0}, "--max-new-tokens: must be 1 or more"),
    ({"temperature": -0.5}, "--temperature: must be 0"),
    ({"top_p": 0.0}, "--top-p: must be in (0, 1]"),
    ({"top_p": 1.5}, "--top-p: must be in (0, 1]"),
    ({"prompt": list(range(64))}, "leave no room in the model's max_seq_len of 64"),
    ({"prompt": list(range(40)), "max_new_tokens": 30}, "ask for at most 24"),
    ({"prompt": []}, "at least one token"),
])
def test_generation_options_are_checked(kwargs, message):
    model = build_model(SLIDING, seed=0)
    args = {"prompt": [1, 2], "max_new_tokens": 4, **kwargs}
    prompt = args.pop("prompt")
    with pytest.raises(GlassroomError) as info:
        generate(model, [prompt], **args)
    assert message in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------- the command

@pytest.fixture(scope="module")
def run_dir(tiny_dataset, tmp_path_factory) -> Path:
    """The tiny MoE config trained 4 steps (one checkpoint), with room for a 64-token completion."""
    sys.path.insert(0, str(ROOT / "tests"))
    from train_helpers import run_train

    out = tmp_path_factory.mktemp("sample") / "moe"
    result = run_train(out, tiny_dataset, "train.steps=4", "model.max_seq_len=128")
    assert result.returncode == 0, result.stderr
    return out


def _cli(capsys, *argv):
    code = main(["sample", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_sample_prints_json_with_the_greedy_continuation(run_dir):
    import glassroom

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "glassroom", "sample", str(run_dir), "--prompt", "def main(",
                             "--max-new-tokens", "20", "--ignore-eos", "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    model, tok = glassroom.load(run_dir)
    tok.encode_special_tokens = True
    prompt_ids = tok.encode("def main(", add_special_tokens=False).ids
    assert got["prompt_tokens"] == prompt_ids and got["tokens"] == prompt_ids + got["new_tokens"]
    assert got["new_tokens"] == generate(model, [prompt_ids], 20)[0].new_ids
    assert got["completion"] == tok.decode(got["new_tokens"], skip_special_tokens=False)
    assert got["stop_reason"] == "max_new_tokens" and got["tokens_per_s"] > 0 and got["temperature"] == 0.0


def test_sample_text_output_stops_at_eos_and_an_empty_prompt_starts_a_document(run_dir, capsys):
    code, out, err = _cli(capsys, run_dir, "--prompt", "", "--max-new-tokens", 40, "--json")
    assert code == 0
    got = json.loads(out)
    assert got["prompt_tokens"] == [0]  # <|endoftext|>, the separator every document follows
    if got["stop_reason"] == "eos":
        assert got["new_tokens"][-1] == 0 and 0 not in got["new_tokens"][:-1]
    else:
        assert 0 not in got["new_tokens"] and len(got["new_tokens"]) == 40
    code, out, err = _cli(capsys, run_dir, "--prompt", "In the beginning", "--max-new-tokens", 5,
                          "--temperature", "0.9", "--top-p", "0.9", "--seed", 3)
    assert code == 0 and out.startswith("In the beginning") and "tokens/s" in err
    again = _cli(capsys, run_dir, "--prompt", "In the beginning", "--max-new-tokens", 5,
                 "--temperature", "0.9", "--top-p", "0.9", "--seed", 3)
    assert again[1] == out


@pytest.mark.parametrize("argv, message", [
    (["--top-p", "0"], "--top-p: must be in (0, 1]"),
    (["--top-p", "1.5"], "--top-p: must be in (0, 1]"),
    (["--temperature", "-1"], "--temperature: must be 0 (greedy) or positive"),
    (["--max-new-tokens", "0"], "--max-new-tokens: must be 1 or more"),
    (["--max-new-tokens", "200"], "max_seq_len of 128; ask for at most"),
    (["--prompt", "word " * 400], "give a shorter prompt"),
    (["--step", "3"], "no checkpoint at step 3"),
])
def test_bad_options_are_one_line_and_exit_2(run_dir, capsys, argv, message):
    args = ["--prompt", "To be or not to be, that is the question: whether 'tis nobler in the mind to suffer "
            "the slings and arrows of outrageous fortune, or to take arms against a sea of troubles, and by "
            "opposing end them. To die, to sleep, no more; and by a sleep to say we end the heartache and "
            "the thousand natural shocks that flesh is heir to"]
    code, out, err = _cli(capsys, run_dir, *([] if "--prompt" in argv else args), *argv)   # each --prompt runs
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err


def test_a_missing_folder_and_a_damaged_checkpoint_are_one_line(run_dir, tmp_path, capsys):
    import shutil

    code, _, err = _cli(capsys, tmp_path / "nowhere", "--prompt", "hi")
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and "nowhere" in err
    damaged = tmp_path / "damaged"
    shutil.copytree(run_dir, damaged)
    [shard] = (damaged / "checkpoints").glob("step_*/__0_0.distcp")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    code, out, err = _cli(capsys, damaged, "--prompt", "hi")
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert "damaged" in err or "intact" in err, err
    assert shard.read_bytes() == bytes(data)  # nothing was moved or repaired


def test_a_damaged_exported_folder_and_a_missing_gpu_are_one_line(run_dir, tmp_path, capsys):
    from glassroom.train.run_folder import export_run

    folder = export_run(run_dir, tmp_path / "export")
    assert _cli(capsys, folder, "--prompt", "hi", "--max-new-tokens", 3)[0] == 0
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[10] ^= 0xFF  # inside the JSON header
    weights.write_bytes(bytes(data))
    code, out, err = _cli(capsys, folder, "--prompt", "hi")
    assert code == 2 and out == "" and err.count("\n") == 1 and "model.safetensors" in err, err
    if not torch.cuda.is_available():
        code, _, err = _cli(capsys, run_dir, "--prompt", "hi", "--device", "cuda")
        assert code == 2 and "--device cuda: no CUDA device" in err and err.count("\n") == 1


def test_the_end_token_of_a_folder_without_endoftext_comes_from_its_generation_config(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from glassroom.commands.sample import _eos_id

    tok = Tokenizer(WordLevel({"hello": 0, "</s>": 1, "world": 2}, unk_token="hello"))
    assert _eos_id(str(tmp_path), tok) is None
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2]}))
    assert _eos_id(str(tmp_path), tok) == 1
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    assert _eos_id(str(tmp_path), tok) == 2
    tok.add_special_tokens(["<|endoftext|>"])
    assert _eos_id(str(tmp_path), tok) == 3
