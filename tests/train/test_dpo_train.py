"""`train.task: dpo` through the real CLI: a tiny base trained on the tiny dataset, then DPO on real
sentences of the Python docs (chosen = as written, rejected = the words reversed; tests/dpo_helpers.py).

Held-out accuracy above 0.9, the reference log-probabilities computed once (counted) and reused on
resume, exact resume after a kill, pairs counted, bad input in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dpo_helpers import PROMPT, build_pairs, doc_sentences, reversed_words
from hf_helpers import ARCHS, SHORT, one_line_error
from train_helpers import ROOT, assert_same_store, losses, run_train, run_train_here, tree_hashes

from glassroom.observe.store import StoreReader

CONFIG = ROOT / "tests" / "configs" / "dpo-tiny.yaml"
N_TRAIN, N_HELD = 240, 48


def long_records() -> list[dict]:
    """Two train pairs from real sentences: one whose prompt alone is longer than seq_len + 1 tokens
    (nothing trained is left after truncation: dropped, counted), one whose answer is (truncated, kept)."""
    text = doc_sentences(N_TRAIN + N_HELD + 24)[-24:]
    long_answer = " ".join(text[12:])
    return [{"id": "long-prompt", "prompt": " ".join(text[:12]), "chosen": text[0], "rejected": reversed_words(text[0])},
            {"id": "long-answer", "prompt": PROMPT, "chosen": long_answer, "rejected": reversed_words(long_answer)}]


@pytest.fixture(scope="module")
def setup(tiny_dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("dpo")
    base = root / "llama"  # hf_helpers.train_tiny_run's llama run, trained in this process
    result = run_train_here(base, tiny_dataset, *SHORT, *ARCHS["llama"])
    assert result.returncode == 0, result.stderr
    data = build_pairs(root / "pairs", base, N_TRAIN, N_HELD, extra=long_records())
    return root, base, data


def dpo(out: Path, base: Path, data: Path, *sets: str, resume: bool = False, env: dict | None = None,
        subprocess: bool = False):
    """`glassroom train` of the DPO config, in this process unless `subprocess` (a kill drill, or the
    refusal checked as python -m glassroom gives it)."""
    train = run_train if subprocess else run_train_here
    return train(out, data, f"init.from={base}", *sets, resume=resume, env=env, config=CONFIG)


@pytest.fixture(scope="module")
def full_run(setup):
    root, base, data = setup
    out = root / "full"
    result = dpo(out, base, data)
    assert result.returncode == 0, result.stderr
    return out


def events(run: Path, kind: str) -> list[dict]:
    with StoreReader(run) as reader:
        return [e for e in reader.events() if e["kind"] == kind]


def test_dpo_learns_a_held_out_preference_and_computes_the_reference_once(full_run):
    with StoreReader(full_run) as reader:
        steps, accuracy = reader.series("eval/dpo/accuracy")
        artifact = reader.artifact("dpo_reference")
        train_steps = reader.series("dpo/accuracy")[0]
        margin = reader.series("eval/dpo/margin")[1]
    assert list(steps) == [0, 10, 20] and accuracy[-1] > 0.9, accuracy  # 48 held-out pairs
    # step 0 is the base measured before the first step: the policy is the reference, every reward 0
    assert margin[0] == pytest.approx(0, abs=1e-6) and accuracy[0] == 0
    assert margin[-1] > margin[1] > 0
    assert list(train_steps) == list(range(1, 21))  # dpo/* at every logged step
    for name in ("dpo/reward_chosen", "dpo/reward_rejected", "dpo/margin", "eval/dpo/loss"):
        assert len(losses(full_run, name)) > 0, name
    assert losses(full_run)[0] == pytest.approx(np.log(2), abs=1e-4)  # step 1: policy = reference
    # 241 usable train pairs (1 of 242 dropped) + 48 held out, in ceil(241 / 4) + ceil(48 / 4) forwards:
    # the number of pairs, not steps x batch (20 x 8 = 160 train pairs were drawn)
    assert artifact == {"pairs": 289, "train_pairs": 241, "heldout_pairs": 48, "forwards": 61 + 12,
                        "computed_at_step": 0}
    assert len(events(full_run, "dpo_reference")) == 1
    values = np.load(full_run / "dpo_reference.npy")
    assert values.shape == (289, 2) and np.isfinite(values).all() and (values < 0).all()
    start = events(full_run, "start")[0]["text"]
    assert "241 of 242 pairs used: 1 truncated" in start and "1 dropped (no trained token left)" in start, start


@pytest.mark.slow
def test_dpo_resumes_exactly_after_a_kill_without_recomputing_the_reference(setup, full_run):
    root, base, data = setup
    out = root / "killed"
    killed = dpo(out, base, data, env={"GLASSROOM_FAULTS": "kill@13"}, subprocess=True)
    assert killed.returncode == -9
    written = (out / "dpo_reference.json").stat().st_mtime_ns
    resumed = dpo(out, base, data, resume=True)
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "dpo_reference.json").stat().st_mtime_ns == written
    assert len(events(out, "dpo_reference")) == 1
    assert_same_store(out, full_run)

    # Past step 0 the starting model is gone: a missing reference is one line, nothing destroyed.
    (out / "dpo_reference.json").unlink()
    before = tree_hashes(out)
    again = dpo(out, base, data, "train.steps=25", resume=True)
    one_line_error(again, "dpo_reference.json", "missing", "step 20")
    # A refused resume changes nothing: config.yaml not rewritten, no event, the finished run not marked failed.
    assert tree_hashes(out) == before
    assert (out / "dpo_reference.npy").is_file() and (out / "checkpoints").is_dir()


def test_micro_batches_sum_to_the_batch(setup):
    """Two steps with 2 micro-batches of 4 pairs and with 1 of 8: the same losses, gradients and rewards."""
    root, base, data = setup
    got = {}
    for micro in (4, 8):
        out = root / f"micro{micro}"
        result = dpo(out, base, data, "train.steps=2", f"train.micro_batch_size={micro}", "train.warmup_steps=0")
        assert result.returncode == 0, result.stderr
        got[micro] = np.concatenate([losses(out, n) for n in ("train/loss", "train/grad_norm", "dpo/margin")])
    assert got[8][3] > 0  # step 2's margin: the policy moved
    # atol 1e-6: step 1's margin is 0 up to the rounding of a difference of summed log-probabilities
    # (measured -1.9e-7 against 0.0 when the micro-batches change the summation order).
    np.testing.assert_allclose(got[4], got[8], rtol=1e-4, atol=1e-6)


def test_ipo_loss_is_the_one_trained(setup):
    """train.dpo_loss: ipo with beta 0.5: at step 1 (policy = reference, h = 0) the loss is (0 - 1/(2 beta))^2 = 1."""
    root, base, data = setup
    out = root / "ipo"
    result = dpo(out, base, data, "train.steps=1", "train.warmup_steps=0", "train.dpo_loss=ipo", "train.dpo_beta=0.5")
    assert result.returncode == 0, result.stderr
    assert losses(out)[0] == pytest.approx(1.0, abs=1e-4)


def test_overlong_drop_counts_and_reference_batching(setup):
    """train.overlong: drop leaves out both long pairs (counted); the reference of a pair does not
    depend on the pairs batched with it (padding at the end changes nothing before it)."""
    root, base, data = setup
    out = root / "drop"
    result = dpo(out, base, data, "train.steps=0", "train.overlong=drop")
    assert result.returncode == 0, result.stderr
    assert "240 of 242 pairs used: 2 dropped (longer than seq_len + 1 tokens)" in events(out, "start")[0]["text"]

    from glassroom.data.mixture import Dataset
    from glassroom import load
    from glassroom.train.dpo import open_pairs, sequence_logps
    from glassroom.train.dpo_reference import pair_logps

    ds = Dataset(data)
    pairs = open_pairs(ds, ds.domains, "validation", 64)
    model = load(out)[0]
    batched = np.load(out / "dpo_reference.npy")[240:]
    again, forwards = pair_logps(model, pairs, 16, torch.device("cpu"), None, ds.eos_id)
    assert forwards == 3
    np.testing.assert_allclose(again, batched, rtol=1e-5)
    for i in (0, 7):
        tokens, mask = pairs.rows([i], ds.eos_id)
        one = sequence_logps(model, torch.from_numpy(tokens), torch.from_numpy(mask)).detach().numpy()
        np.testing.assert_allclose(one, batched[i], rtol=1e-5)
        assert tokens.shape[1] == pairs.length[i].max() and mask[:, 1:].any(1).all()


def test_beta_not_positive_is_one_line(setup, tmp_path):
    root, base, data = setup
    result = dpo(tmp_path / "run", base, data, "train.dpo_beta=0", subprocess=True)
    one_line_error(result, "train.dpo_beta", "positive")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("sets,words", [(["train.dpo_beta=-0.5"], ("train.dpo_beta", "positive")),
                                        (["train.dpo_loss=hinge"], ("train.dpo_loss", "hinge"))])
def test_bad_dpo_keys_name_the_key(setup, sets, words):
    from glassroom.errors import GlassroomError
    from glassroom.train.config import load_run_config

    root, base, data = setup
    with pytest.raises(GlassroomError) as err:
        load_run_config(CONFIG, [f"data.path={data}", f"init.from={base}", *sets])
    assert all(w in str(err.value) for w in words) and "\n" not in str(err.value), err.value


def test_pretraining_data_is_not_preference_data(setup, tiny_dataset, tmp_path):
    root, base, _ = setup
    result = dpo(tmp_path / "run", base, tiny_dataset)
    one_line_error(result, "train.task", "dpo")
    assert not (tmp_path / "run").exists()
