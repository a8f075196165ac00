"""The mixture: shares match the weights, batches are pure functions of the step, ranks never overlap."""

from __future__ import annotations

import io
import math
import subprocess
import sys

import numpy as np
import pytest

from data_helpers import make_corpus, write_recipe
from glassroom.data.build import build_dataset
from glassroom.data.mixture import BLOCK, Dataset, Mixture, block_counts, permute
from glassroom.data.recipe import load_recipe
from glassroom.errors import GlassroomError


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    make_corpus(root)
    out = root / "dataset"
    build_dataset(load_recipe(write_recipe(root)), out, workers=1, log=io.StringIO())
    return out


WEIGHTS = {"email": 0.7, "web": 0.3}


@pytest.mark.slow
def test_realised_token_shares_within_one_percent(dataset):
    for weights in (WEIGHTS, {"email": 0.05, "web": 0.95}):
        mix = Mixture(dataset, weights, seq_len=32, batch_size=64, seed=3)
        tokens = {d: 0 for d in weights}
        for step in range(400):
            for d, n in mix.batch(step).tokens_per_domain().items():
                tokens[d] += n
        total = sum(tokens.values())
        for d, w in weights.items():
            assert abs(tokens[d] / total - w) < 0.01 * w + 1e-3, (d, tokens[d] / total, w)


def test_batch_is_a_pure_function_of_step_even_in_a_new_process(dataset):
    mix = Mixture(dataset, WEIGHTS, seq_len=32, batch_size=8, seed=11)
    wanted = [mix.batch(s).tokens for s in (0, 5, 1234)]
    fresh = Mixture(dataset, WEIGHTS, seq_len=32, batch_size=8, seed=11)
    for s, tokens in zip((1234, 5, 0), reversed(wanted)):  # any order, no state
        np.testing.assert_array_equal(fresh.batch(s).tokens, tokens)
    code = (
        "import sys, numpy as np; from glassroom.data.mixture import Mixture; "
        f"m = Mixture({str(dataset)!r}, {WEIGHTS!r}, seq_len=32, batch_size=8, seed=11); "
        "sys.stdout.write(m.batch(1234).tokens.tobytes().hex())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert bytes.fromhex(out) == wanted[2].tobytes()
    other_seed = Mixture(dataset, WEIGHTS, seq_len=32, batch_size=8, seed=12)
    assert not np.array_equal(other_seed.batch(5).tokens, wanted[1])


def test_two_ranks_never_share_a_sequence(dataset):
    mix = Mixture(dataset, WEIGHTS, seq_len=32, batch_size=16, seed=0)
    per_domain_windows = {d: int(n) for d, n in zip(mix.domains, mix.windows)}
    seen = {}
    steps = min(per_domain_windows.values()) // 16  # within one epoch of the smaller domain
    for step in range(steps):
        full = mix.batch(step)
        halves = [mix.batch(step, rank=r, world_size=2) for r in range(2)]
        np.testing.assert_array_equal(np.concatenate([h.tokens for h in halves]), full.tokens)
        first = step * 16
        for rank in range(2):
            dom, start = mix.locate(np.arange(first + 8 * rank, first + 8 * rank + 8))
            for d, s in zip(dom.tolist(), start.tolist()):
                assert (d, s) not in seen, f"window {(d, s)} given to rank {seen[(d, s)]} and rank {rank}"
                seen[(d, s)] = rank
    assert len(seen) == steps * 16


def test_sequences_are_real_windows_of_the_train_shards(dataset):
    ds = Dataset(dataset)
    mix = Mixture(ds, WEIGHTS, seq_len=32, batch_size=4, seed=0)
    batch = mix.batch(9)
    dom, start = mix.locate(np.arange(36, 40))
    for row, d, s in zip(batch.tokens, dom, start):
        shard = ds.shard(mix.domains[d], "train")
        np.testing.assert_array_equal(row, shard.tokens[s: s + 33])
    assert batch.inputs.shape == (4, 32) and batch.targets.shape == (4, 32)
    np.testing.assert_array_equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    assert batch.sequence_domains() == [mix.domains[d] for d in dom]


def test_every_window_once_per_epoch():
    for n in (1, 2, 3, 17, 1000, 4097):
        values = permute(np.arange(n), n, key=99)
        assert sorted(values.tolist()) == list(range(n))
    assert not np.array_equal(permute(np.arange(1000), 1000, 1), permute(np.arange(1000), 1000, 2))
    counts = block_counts([0.5, 0.3, 0.2])
    assert counts.sum() == BLOCK and abs(counts[1] / BLOCK - 0.3) < 1e-4


def test_epochs_and_warning_past_max(dataset):
    mix = Mixture(dataset, WEIGHTS, seq_len=32, batch_size=8, max_epochs=2)
    train = {d: len(Dataset(dataset).shard(d)) for d in WEIGHTS}
    report = mix.epochs(1_000_000)
    assert report["email"]["epochs"] == pytest.approx(0.7e6 / train["email"])
    budget = 2.5 * train["web"] / 0.3  # web at 2.5 epochs
    warned = mix.epoch_warnings(budget)
    assert any(line.startswith("domain web would be seen 2.5 times") for line in warned)
    assert mix.epoch_warnings(1.0) == []


@pytest.mark.parametrize("weights, message", [
    ({"email": -0.1, "web": 1.0}, "email has negative weight -0.1"),
    ({"email": 0, "web": 0.0}, "all are zero"),
    ({"email": 1, "poetry": 1}, "no domain 'poetry'"),
    ({}, "none given"),
])
def test_bad_weights_are_one_line_errors(dataset, weights, message):
    with pytest.raises(GlassroomError, match=message) as err:
        Mixture(dataset, weights, seq_len=32, batch_size=8)
    assert "\n" not in str(err.value)


def test_validation_batches_cover_the_held_out_bytes(dataset):
    ds = Dataset(dataset)
    seq_len = 16
    shard = ds.shard("web", "validation")
    total_bytes, total_tokens = 0.0, 0
    targets = []
    for tokens, n_bytes in ds.validation_batches("web", seq_len, batch_size=8):
        assert tokens.shape[1] == seq_len + 1 and tokens.dtype == np.int64
        if not targets:
            assert tokens[0, 0] == ds.eos_id  # the split is read after an EOS, like every training document
        assert (tokens[1:, 0] == tokens[:-1, -1]).all()  # windows overlap by one token
        targets.append(tokens[:, 1:].ravel())
        total_bytes += n_bytes
        total_tokens += tokens.shape[0] * seq_len
    windows = len(shard) // seq_len
    assert total_tokens == windows * seq_len
    # every token of the split up to the last whole window is a target once, in order
    assert (np.concatenate(targets) == np.asarray(shard.tokens[: windows * seq_len])).all()
    # The windows' targets cover all but the last few tokens, so nearly all of the split's bytes.
    assert total_bytes == pytest.approx(shard.n_bytes * total_tokens / len(shard), rel=0.02)
    assert total_bytes <= shard.n_bytes + 1e-6


def generated_weight_sets(count: int = 8, seed: int = 0):
    """Unnormalised weights for the two domains at many scales (sums far below and far above 1), with
    shares clearly away from an even split: {email: ratio * scale, web: scale}."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        ratio = float(rng.choice([1 / 9, 0.2, 1 / 3, 3.0, 4.0, 7.0])) * float(rng.uniform(0.9, 1.1))
        scale = float(10 ** rng.uniform(-3, 3))
        yield {"email": ratio * scale, "web": scale}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_unnormalised_weights_give_domain_shares_of_weight_over_sum(dataset, seed):
    """The weights need not sum to 1: the long-run share of each domain among the batches' sequences
    is weight / sum of weights, within 5 standard deviations of sampling N sequences out of a block
    (hypergeometric) plus the block's rounding (1 / BLOCK)."""
    steps, batch = 160, 64
    n = steps * batch
    for weights in generated_weight_sets(seed=seed):
        mix = Mixture(dataset, weights, seq_len=32, batch_size=batch, seed=seed)
        counts = np.zeros(len(mix.domains), dtype=np.int64)
        for step in range(steps):
            counts += np.bincount(mix.batch(step).domain_index, minlength=len(mix.domains))
        total = sum(weights.values())
        for d, domain in enumerate(mix.domains):
            want = weights[domain] / total
            sd = math.sqrt(want * (1 - want) / n * (BLOCK - n) / (BLOCK - 1))
            got = counts[d] / n
            assert abs(got - want) <= 5 * sd + 1 / BLOCK, (weights, domain, got, want)




@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    """A two-domain dataset (email, web) from stdlib sources, built in one process (no worker pool,
    so scripts/mutation.sh can run this in its forked children)."""
    import io

    from data_helpers import make_corpus, write_recipe
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe

    root = tmp_path_factory.mktemp("epochs")
    make_corpus(root)
    build_dataset(load_recipe(write_recipe(root)), root / "dataset", workers=1, log=io.StringIO())
    return root / "dataset"


def test_each_epoch_of_a_domain_visits_every_window_in_a_new_order(small_dataset):
    from glassroom.data.mixture import Mixture

    mix = Mixture(small_dataset, {"email": 0.1, "web": 0.9}, seq_len=32, batch_size=8, seed=5)
    d = mix.domains.index("email")
    n = int(mix.windows[d])
    g = np.arange(0, 12 * n, dtype=np.int64)  # about 1.2 epochs of email at weight 0.1
    dom, start = mix.locate(g)
    order = start[dom == d] // mix.seq_len  # email's k-th sequence, k = 0, 1, ...
    assert len(order) >= n + 50
    first, second = order[:n], order[n:]
    assert sorted(first.tolist()) == list(range(n))  # an epoch is a permutation of the windows
    assert len(set(second.tolist())) == len(second)  # the next epoch starts again without repeats
    assert not np.array_equal(second, first[:len(second)])  # ... in another order
    assert np.mean(second == first[:len(second)]) < 0.05
