"""Mixture weights on domain x quality cells: a cell's sequences come from its bucket's documents only,
domain-only weights keep the classic schedule, bad cell keys are one-line errors, training accepts cells."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from data_helpers import error_line, run_cli
from glassroom.data.mixture import BLOCK, Dataset, Mixture, block_counts, hash_key, permute
from glassroom.data.shards import savez_fixed
from glassroom.errors import GlassroomError

BUCKETS = 5


def plant_cells(src, dst, buckets: int = BUCKETS):
    """A copy of a built dataset whose shards carry quality cells: each (domain, split) shard's documents
    cut into `buckets` contiguous equal-count ranges (as a build orders them by bucket), doc_bucket in
    the index and manifest cells, as a build with quality writes them."""
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    for domain, entry in manifest["domains"].items():
        for split in ("train", "validation"):
            path = dst / "shards" / domain / f"{split}.idx.npz"
            with np.load(path) as z:
                arrays = {k: z[k] for k in z.files}
            off = arrays["doc_offsets"]
            n = len(off) - 1
            bucket = (np.arange(n) * buckets // max(n, 1)).astype(np.int8)
            arrays["doc_bucket"] = bucket
            arrays["doc_quality"] = np.linspace(0, 1, n, dtype=np.float32)
            savez_fixed(path, **arrays)
            cells = []
            for q in range(buckets):
                docs = np.flatnonzero(bucket == q)
                a, b = (int(docs[0]), int(docs[-1]) + 1) if len(docs) else (0, 0)
                cells.append({"bucket": q, "documents": b - a, "tokens": int(off[b] - off[a]),
                              "bytes": int(arrays["doc_bytes"][a:b].sum()), "doc_range": [a, b],
                              "token_range": [int(off[a]), int(off[b])]})
            entry[split]["cells"] = cells
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


@pytest.fixture(scope="module")
def celled(tiny_dataset, tmp_path_factory):
    return plant_cells(tiny_dataset, tmp_path_factory.mktemp("cells") / "dataset")


def classic_starts(dataset, weights, seq_len, batch_size, seed, step):
    """The schedule as it was before cells (module doc of mixture.py), written out independently."""
    ds = Dataset(dataset)
    total = sum(weights.values())
    names = [d for d in ds.domains if weights.get(d, 0) > 0]
    counts = block_counts([weights[d] / total for d in names])
    windows = [(len(ds.shard(d)) - 1) // seq_len for d in names]
    slots = np.random.default_rng([seed, 0, 0x6D6978]).permutation(np.repeat(np.arange(len(names)), counts))
    out = []
    for g in range(step * batch_size, (step + 1) * batch_size):
        assert g < BLOCK
        d = int(slots[g])
        k = int((slots[:g] == d).sum())
        e, j = divmod(k, windows[d])
        out.append((names[d], int(permute(np.array([j]), windows[d], hash_key(seed, names[d], e))[0]) * seq_len))
    return out


def test_domain_weights_keep_the_classic_schedule_and_ignore_cells(tiny_dataset, celled):
    weights = {"prose": 0.5, "docs": 0.2, "code": 0.3}
    plain = Mixture(tiny_dataset, weights, seq_len=32, batch_size=8, seed=5)
    with_cells = Mixture(celled, weights, seq_len=32, batch_size=8, seed=5)
    for step in (0, 3, 17):
        got = plain.batch(step)
        want = classic_starts(tiny_dataset, weights, 32, 8, 5, step)
        assert got.sequence_domains() == [d for d, _ in want]
        for row, (d, start) in zip(got.tokens, want):
            np.testing.assert_array_equal(row, plain.dataset.shard(d).tokens[start: start + 33])
        np.testing.assert_array_equal(with_cells.batch(step).tokens, got.tokens)


def test_cell_weights_draw_only_their_buckets_documents(celled):
    weights = {"prose:q4": 0.5, "prose:q0": 0.2, "code": 0.3}
    mix = Mixture(celled, weights, seq_len=32, batch_size=16, seed=1)
    assert mix.domains == ["prose:q0", "prose:q4", "code"]
    ds = mix.dataset
    prose = ds.shard("prose")
    tok = ds.tokenizer()
    seen = {d: 0 for d in mix.domains}
    for step in range(40):
        batch = mix.batch(step)
        dom, start = mix.locate(np.arange(step * 16, step * 16 + 16))
        for row, key, s in zip(batch.tokens, batch.sequence_domains(), start):
            seen[key] += 1
            if key == "code":
                np.testing.assert_array_equal(row, ds.shard("code").tokens[s: s + 33])
                continue
            bucket = int(key[-1])
            a, b = ds.cells("prose")[bucket]["token_range"]
            assert a <= s and s + 33 <= b, (key, s, a, b)
            first = np.searchsorted(prose.doc_offsets, s, side="right") - 1
            last = np.searchsorted(prose.doc_offsets, s + 32, side="right") - 1
            assert set(prose.doc_bucket[first: last + 1].tolist()) == {bucket}
            np.testing.assert_array_equal(row, prose.tokens[s: s + 33])
            text = tok.decode(row.tolist())  # the decoded sequence is text of that bucket's documents
            docs = "".join(tok.decode(prose.doc_tokens(i).tolist()) for i in range(first, last + 1))
            assert text.replace("\n", "")[5:40] in docs.replace("\n", "")
    assert all(seen.values())
    assert abs(seen["prose:q4"] / 640 - 0.5) < 0.08
    report = mix.epochs(1e6)
    a, b = ds.cells("prose")[4]["token_range"]
    assert report["prose:q4"]["train_tokens"] == b - a
    assert report["prose:q4"]["epochs"] == pytest.approx(0.5e6 / (b - a))
    assert any(line.startswith("cell prose:q4 would be seen") for line in mix.epoch_warnings(1e8))


@pytest.mark.parametrize("weights, message", [
    ({"prose:q9": 1}, "prose:q9: no bucket 9 in domain prose (it has prose:q0, prose:q1, prose:q2, prose:q3, prose:q4)"),
    ({"prose:best": 1}, "prose:best: expected prose:qN"),
    ({"prose:q": 1}, "prose:q: expected prose:qN"),
    ({"prose:q04": 1}, "prose:q04: expected prose:qN"),
    ({"prose:Q4": 1}, "prose:Q4: expected prose:qN"),
    ({":q4": 1}, ":q4: no domain ''"),
    ({"poetry:q1": 1}, "poetry:q1: no domain 'poetry'"),
    ({"prose": 1, "prose:q2": 1}, "both prose and its cell prose:q2 are given"),
    ({"prose:q1": -1, "code": 1}, "prose:q1 has negative weight"),
    ({"prose:q1": 0, "code:q1": 0}, "all are zero"),
    ({"prose:q1": float("nan")}, "prose:q1 has weight nan"),
])
def test_bad_cell_keys_are_one_line_errors(celled, weights, message):
    with pytest.raises(GlassroomError) as err:
        Mixture(celled, weights, seq_len=32, batch_size=8)
    assert message in str(err.value) and "\n" not in str(err.value)


def without_cells(src, dst):
    """A copy of a dataset as built before builds had quality buckets: no cells in the manifest."""
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    for entry in manifest["domains"].values():
        for split in ("train", "validation"):
            entry[split].pop("cells", None)
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_cell_keys_on_a_dataset_without_cells(tiny_dataset, tmp_path):
    old = without_cells(tiny_dataset, tmp_path / "old")
    with pytest.raises(GlassroomError) as err:
        Mixture(old, {"prose:q4": 1}, seq_len=32, batch_size=8)
    assert "prose:q4 is a quality cell" in str(err.value) and "no quality buckets" in str(err.value)


def test_a_cell_too_small_for_a_sequence(celled, tmp_path):
    small = tmp_path / "small"
    shutil.copytree(celled, small)
    manifest = json.loads((small / "manifest.json").read_text())
    cell = manifest["domains"]["code"]["train"]["cells"][2]
    cell["token_range"] = [cell["token_range"][0], cell["token_range"][0] + 10]
    (small / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GlassroomError, match=r"cell code:q2 has 10 train tokens, fewer than seq_len \+ 1 = 33"):
        Mixture(small, {"code:q2": 1}, seq_len=32, batch_size=8)
    cell["token_range"] = [0, 10**12]
    (small / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GlassroomError, match=r"cell code:q2 has token range \[0, 1000000000000\) outside"):
        Mixture(small, {"code:q2": 1}, seq_len=32, batch_size=8)


def test_data_mixture_cli_takes_cells(celled, tiny_dataset, capsys, tmp_path):
    code, out, err = run_cli(["data", "mixture", str(celled), "--weights", "prose:q4=0.3,prose:q0=0.1,code=0.6",
                              "--tokens", "50M", "--seq-len", "32"], capsys)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert set(rows) == {"prose:q0", "prose:q4", "code"} and rows["prose:q4"][1] == "0.300"
    assert "warning: cell prose:q4 would be seen" in err
    old = without_cells(tiny_dataset, tmp_path / "old")
    code, out, err = run_cli(["data", "mixture", str(old), "--weights", "prose:q4=1", "--tokens", "1M"], capsys)
    assert code == 2 and error_line(err).startswith("error: mixture weights: prose:q4 is a quality cell")


@pytest.mark.slow
def test_training_on_cell_weights(celled, tmp_path):
    from train_helpers import run_train

    out = tmp_path / "run"
    proc = run_train(out, celled, "train.steps=2", "train.eval_every=2", 'data.weights={"prose:q4": 1, code: 1}',
                     env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    from train_helpers import losses

    assert len(losses(out, "train/loss/prose:q4")) == 2
    from cli_helpers import glassroom_in_process
    from train_helpers import train_cmd

    bad = glassroom_in_process(*train_cmd(tmp_path / "bad", celled, "train.steps=2", 'data.weights={"prose:q7": 1}')[3:])
    assert bad.returncode == 2 and "data.weights: prose:q7: no bucket 7 in domain prose" in bad.stderr
    assert "Traceback" not in bad.stderr
    small = tmp_path / "small"
    shutil.copytree(celled, small)
    manifest = json.loads((small / "manifest.json").read_text())
    cell = manifest["domains"]["code"]["train"]["cells"][2]
    cell["token_range"] = [cell["token_range"][0], cell["token_range"][0] + 20]
    (small / "manifest.json").write_text(json.dumps(manifest))
    short = glassroom_in_process(*train_cmd(tmp_path / "short", small, "train.steps=2", 'data.weights={"code:q2": 1, prose: 1}')[3:])
    assert short.returncode == 2 and "data.weights.code:q2: cell code:q2 has 20 train tokens" in short.stderr
    assert "Traceback" not in short.stderr and not (tmp_path / "short" / "checkpoints").exists()


def test_a_built_dataset_carries_scores_buckets_and_cells(tiny_dataset):
    """What the build writes with quality on (the stage calls glassroom.data.quality): the classifier
    file and its manifest entry, doc_quality/doc_bucket ordered by bucket, cells tiling each shard,
    and the stored scores equal to a rescoring of the decoded documents."""
    from glassroom.data import quality

    ds = Dataset(tiny_dataset)
    q = ds.manifest.get("quality")
    assert q is not None, "the recipe leaves quality on: manifest.json must hold its entry"
    model = quality.QualityModel.load(tiny_dataset / q["file"])
    import hashlib

    assert hashlib.sha256((tiny_dataset / q["file"]).read_bytes()).hexdigest() == q["sha256"]
    assert q["heldout_accuracy"] >= 0.8 and q["buckets"] == BUCKETS
    tok = ds.tokenizer()
    for domain in ds.domains:
        for split in ("train", "validation"):
            shard = ds.shard(domain, split)
            cells = ds.cells(domain, split)
            assert [c["bucket"] for c in cells] == list(range(BUCKETS))
            assert cells[0]["doc_range"][0] == 0 and cells[-1]["doc_range"][1] == shard.n_docs
            assert cells[-1]["token_range"][1] == len(shard)
            for c in cells:
                a, b = c["doc_range"]
                assert set(shard.doc_bucket[a:b].tolist()) <= {c["bucket"]}
                assert c["token_range"] == [int(shard.doc_offsets[a]), int(shard.doc_offsets[b])]
            assert np.all(np.diff(shard.doc_bucket) >= 0)
            pick = np.linspace(0, shard.n_docs - 1, min(shard.n_docs, 6)).astype(int)
            texts = [tok.decode(shard.doc_tokens(int(i)).tolist()) for i in pick]
            np.testing.assert_array_equal(quality.score_batch(model.to_bytes(), texts), shard.doc_quality[pick])
            if split == "train":
                cut = q["cutoffs"][domain]
                np.testing.assert_array_equal(quality.assign(shard.doc_quality, cut), shard.doc_bucket)
