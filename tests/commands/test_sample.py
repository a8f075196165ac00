"""Tests of glassroom/commands/sample.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glassroom.cli import main
from glassroom.generate import generate



ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(tiny_dataset, tmp_path_factory) -> Path:
    """The tiny MoE config trained 4 steps (one checkpoint), with room for a 64-token completion."""
    sys.path.insert(0, str(ROOT / "tests"))
    from hf_helpers import train_here

    out = tmp_path_factory.mktemp("sample") / "moe"
    result = train_here(out, tiny_dataset, "train.steps=4", "model.max_seq_len=128")
    assert result.returncode == 0, result.stderr
    return out


def _cli(capsys, *argv):
    code = main(["sample", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
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




@pytest.mark.parametrize("argv, message", [
    (["--prompt", "a\udcffb"], "--prompt: not valid UTF-8 text (position 1)"),  # argv of the bytes a\xffb
    (["--prompt", "x", "--seed", "-1"], "--seed: must be between 0 and 2**64 - 1, got -1"),
    (["--prompt", "x", "--seed", str(2**70)], "--seed: must be between 0 and 2**64 - 1"),
])
def test_a_prompt_that_is_not_utf8_and_a_seed_out_of_range_are_one_line(tmp_path, capsys, argv, message):
    code = main(["sample", str(tmp_path), *argv])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1 and message in captured.err
