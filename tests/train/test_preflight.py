"""Every bad `glassroom train` input is refused in one line, exit 2, before any step, leaving nothing.

Each case drives the real CLI (glassroom.cli.main, in process, so the cases stay fast; one case runs
`python -m glassroom` as a subprocess) against the tiny real dataset or a damaged copy of it, and
checks: exit code 2, exactly one stderr line starting with `error:` that names the key, shard or
file, no traceback, and no run folder left behind (or the pre-existing one unchanged).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from glassroom import cli
from glassroom.errors import GlassroomError
from train_helpers import ROOT, TINY, train_cmd


def train(capsys, out: Path, dataset: Path, *sets: str, config: Path | str = TINY, resume: bool = False,
          extra: tuple = ()) -> tuple[int, str]:
    argv = ["train", str(config), "--out", str(out), "--quiet", "--set", f"data.path={dataset}"]
    for item in sets:
        argv += ["--set", item]
    argv += list(extra) + (["--resume"] if resume else [])
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, *needles: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def data_copy(tiny_dataset, tmp_path) -> Path:
    """A private copy of the tiny dataset to damage."""
    copy = tmp_path / "data"
    shutil.copytree(tiny_dataset, copy)
    return copy


def edit_manifest(dataset: Path, change) -> None:
    path = dataset / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


# ----------------------------------------------------------------------------- config values


@pytest.mark.parametrize("setting,message", [
    ("train.lr=.nan", "train.lr: must be a finite number, got nan"),
    ("train.steps=1e30", "train.steps: 1e+30 is too large (at most 2**63 - 1)"),
    ("train.steps=18446744073709551616", "train.steps: 1.84e+19 is too large"),
    ("train.lr=.inf", "train.lr: must be a finite number, got inf"),
    ("train.lr=-.inf", "train.lr: must be a finite number"),
    ("train.lr=nan", "train.lr: must be a finite number"),
    ("train.lr=1e999", "train.lr: must be a finite number"),
    ("train.weight_decay=.nan", "train.weight_decay: must be a finite number"),
    ("train.beta2=.inf", "train.beta2: must be a finite number"),
    ("train.min_lr_ratio=.nan", "train.min_lr_ratio: must be a finite number"),
    ("train.grad_clip=.inf", "train.grad_clip: must be a finite number"),
    ("model.rope_theta=.inf", "model.rope_theta: must be a finite number"),
    ("model.moe.bias_update_rate=.nan", "model.moe.bias_update_rate: must be a finite number"),
    ("observe.anomaly_sigma=.nan", "observe.anomaly_sigma: must be a finite number"),
    ("data.max_epochs=.nan", "data.max_epochs: must be a finite number"),
    ("data.weights={prose: .inf}", "data.weights.prose: must be a finite number"),
    ("train.steps=.inf", "train.steps: expected a whole number"),
    ("train.steps=1e999", "train.steps: expected a whole number"),
    ("train.steps=-1", "train.steps: must be zero or more, got -1"),  # 0 is allowed (tests/train/test_zero_steps.py)
    ("train.steps=-5", "train.steps: must be zero or more, got -5"),
    ("train.batch_size=0", "train.batch_size: must be positive"),
    ("train.micro_batch_size=0", "train.micro_batch_size: must be positive"),
    ("train.steps=abc", "train.steps: expected a whole number, got 'abc'"),
    ("train.lrr=1", "train.lrr: unknown key (did you mean lr?)"),
    ("train.lr.peak=1", "--set train.lr.peak: lr is not a section"),
    ("nonsense", "--set 'nonsense': expected key.path=value"),
    ("=3", "--set '=3': expected key.path=value"),
    ("data.max_epochs=0", "data.max_epochs: must be positive"),
    ("train.seed=-1", "train.seed: must be between 0 and 2**63 - 1, got -1"),
    ("train.seed=100000000000000000000000", "train.seed: 1e+23 is too large (at most 2**63 - 1)"),
    ("observe.anomaly_min_history=0", "observe.anomaly_min_history: must be positive, got 0"),
])
@pytest.mark.slow
def test_bad_config_values_are_refused_before_the_run_folder(capsys, tiny_dataset, tmp_path, setting, message):
    out = tmp_path / "run"
    code, err = train(capsys, out, tiny_dataset, setting)
    line = assert_refused(code, err, message)
    if not line.startswith("error: --set"):
        assert str(TINY) in line  # names the file
    assert not out.exists()


@pytest.mark.slow
def test_infinite_max_epochs_is_allowed(tiny_dataset):
    """The one float that may be .inf: max_epochs (the repetition warning switched off)."""
    from glassroom.train.config import load_run_config

    cfg = load_run_config(TINY, [f"data.path={tiny_dataset}", "data.max_epochs=.inf"])
    assert cfg.data.max_epochs == float("inf")


def test_lr_inf_through_the_real_command_line(tiny_dataset, tmp_path):
    """`python -m glassroom train` as a user runs it: .inf used to train on NaN and exit 0."""
    out = tmp_path / "run"
    result = subprocess.run(train_cmd(out, tiny_dataset, "train.lr=.inf"), cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert_refused(result.returncode, result.stderr, "train.lr: must be a finite number, got inf")
    assert not out.exists()


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


@pytest.mark.parametrize("kind,message", [
    ("missing", "no such file"),
    ("folder", "is a folder, expected a YAML config file"),
    ("binary", "not a text file"),
    ("empty", "expected a YAML mapping of sections"),
    ("broken", "not valid YAML (line 3"),
    ("aliases", "refused:"),
    ("list", "expected a YAML mapping of sections"),
])
def test_bad_config_files_are_refused(capsys, tiny_dataset, tmp_path, kind, message):
    config = tmp_path / "run.yaml"
    if kind == "folder":
        config.mkdir()
    elif kind == "binary":
        write(config, bytes(range(256)) * 4)
    elif kind == "empty":
        write(config, "")
    elif kind == "broken":
        write(config, "model:\n  d_model: [64\ntrain: {}\n")
    elif kind == "aliases":
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
        write(config, "\n".join(lines) + "\n")
    elif kind == "list":
        write(config, "- model\n- train\n")
    out = tmp_path / "run"
    code, err = train(capsys, out, tiny_dataset, config=config)
    assert_refused(code, err, str(config), message)
    assert not out.exists()


# ----------------------------------------------------------------------------- the dataset


def test_missing_data_folder(capsys, tmp_path):
    out = tmp_path / "run"
    code, err = train(capsys, out, tmp_path / "no-such-data")
    assert_refused(code, err, "data.path:", str(tmp_path / "no-such-data"), "not a built dataset")
    assert not out.exists()


def test_data_folder_that_is_not_a_dataset(capsys, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    write(folder / "readme.txt", "hello")
    out = tmp_path / "run"
    code, err = train(capsys, out, folder)
    assert_refused(code, err, "data.path:", "not a built dataset (no manifest.json)")
    assert not out.exists()
    assert snapshot(folder) == {"readme.txt": b"hello"}


def test_domain_the_dataset_does_not_have(capsys, tiny_dataset, tmp_path):
    out = tmp_path / "run"
    code, err = train(capsys, out, tiny_dataset, "data.weights={prose: 1, poetry: 2}")
    assert_refused(code, err, f"{TINY}: data.weights.poetry:", "no domain 'poetry'", "prose, docs, code")
    assert not out.exists()


def empty_domain(dataset: Path, domain: str, splits=("train", "validation")) -> None:
    for split in splits:
        folder = dataset / "shards" / domain
        write(folder / f"{split}.bin", b"")
        with open(folder / f"{split}.idx.npz", "wb") as fh:
            np.savez(fh, doc_offsets=np.zeros(1, np.int64), doc_bytes=np.zeros(0, np.int64),
                     doc_source=np.zeros(0, np.int32))

    def change(m):
        for split in splits:
            m["domains"][domain][split].update(tokens=0, documents=0, bytes=0, max_token_id=-1)
    edit_manifest(dataset, change)


def test_empty_domain(capsys, data_copy, tmp_path):
    empty_domain(data_copy, "docs")
    out = tmp_path / "run"
    code, err = train(capsys, out, data_copy)
    assert_refused(code, err, "domain docs", "is empty")
    assert not out.exists()


def test_weighted_domain_without_train_tokens(capsys, data_copy, tmp_path):
    empty_domain(data_copy, "docs", splits=("train",))
    out = tmp_path / "run"
    code, err = train(capsys, out, data_copy, "data.weights={prose: 1, docs: 1}")
    assert_refused(code, err, "data.weights.docs:", "no train tokens", "weight 0")
    assert not out.exists()


def test_seq_len_longer_than_a_validation_shard(capsys, tiny_dataset, tmp_path):
    shortest = min(((tiny_dataset / "shards" / d / "validation.bin").stat().st_size // 2, d)
                   for d in ("prose", "docs", "code"))
    out = tmp_path / "run"
    code, err = train(capsys, out, tiny_dataset, f"model.max_seq_len={shortest[0] + 8}",
                      f"train.seq_len={shortest[0] + 4}")
    assert_refused(code, err, "train.seq_len:", f"shards/{shortest[1]}/validation.bin", f"({shortest[0]} tokens")
    assert not out.exists()


def test_model_vocabulary_smaller_than_the_tokenizer(capsys, tiny_dataset, tmp_path):
    out = tmp_path / "run"
    code, err = train(capsys, out, tiny_dataset, "model.vocab_size=1000")
    assert_refused(code, err, f"{TINY}: model.vocab_size: 1000 is smaller than the dataset's tokenizer (2048")
    assert not out.exists()


@pytest.mark.parametrize("sets,message", [
    (("model.vocab_size=100000000000",), "model: 12.8T parameters need 204,800.0 GB"),
    (("model.n_layers=1000000000",), "model: 47.5T parameters need"),
    (("train.batch_size=1000000000000",), "train.batch_size: 1000000000000 sequences of 33 token ids need"),
    (("model.max_seq_len=100000000000",), "model.max_seq_len: the RoPE tables for 100000000000 positions need"),
    (("train.batch_size=100000000", "train.micro_batch_size=100000000"),
     "train.micro_batch_size: the logits of 100000000 sequences over 2048 tokens need"),
])
def test_runs_that_cannot_fit_in_memory(capsys, tiny_dataset, tmp_path, sets, message):
    """Used to be an allocation traceback (or the machine swapping) after RUN_DIR was made."""
    out = tmp_path / "run"
    code, err = train(capsys, out, tiny_dataset, *sets)
    assert_refused(code, err, str(TINY), message, "GB of memory available")
    assert not out.exists()


def test_memory_bound_counts_every_local_process():
    import torch

    from glassroom.train import preflight
    from glassroom.train.config import load_run_config

    cfg = load_run_config(TINY)
    need = preflight.parameter_count(cfg.model) * 16
    from glassroom.model.accounting import count_params

    assert preflight.parameter_count(cfg.model) == count_params(cfg.model).total
    free = preflight.available_memory(torch.device("cpu"))
    assert free and free > need
    many = max(2, int(free // need) + 1)
    with pytest.raises(GlassroomError, match=f"in each of {many} processes"):
        preflight.check_memory(cfg, torch.device("cpu"), world_size=many, env={"LOCAL_WORLD_SIZE": str(many)})


def damage_index(dataset: Path, how: str) -> Path:
    index = dataset / "shards" / "code" / "train.idx.npz"
    with np.load(index) as npz:
        arrays = {k: npz[k] for k in npz.files}
    if how == "garbage":
        write(index, b"PK\x03\x04 not really a zip")
        return index
    if how == "text":
        write(index, "{}")
        return index
    if how == "truncated":
        write(index, index.read_bytes()[:100])
        return index
    if how == "missing field":
        del arrays["doc_bytes"]
    elif how == "beyond the file":
        arrays["doc_offsets"] = arrays["doc_offsets"].copy()
        arrays["doc_offsets"][-1] += 1000
    elif how == "backwards":
        arrays["doc_offsets"] = arrays["doc_offsets"].copy()
        arrays["doc_offsets"][2], arrays["doc_offsets"][3] = arrays["doc_offsets"][3], arrays["doc_offsets"][2]
    elif how == "floats":
        arrays["doc_offsets"] = arrays["doc_offsets"].astype(np.float64)
    elif how == "short doc_bytes":
        arrays["doc_bytes"] = arrays["doc_bytes"][:-1]
    with open(index, "wb") as fh:
        np.savez(fh, **arrays)
    return index


@pytest.mark.parametrize("how,message", [
    ("garbage", "cannot be read"),
    ("text", "cannot be read"),
    ("truncated", "cannot be read"),
    ("missing field", "lacks doc_bytes"),
    ("beyond the file", "doc_offsets end at token"),
    ("backwards", "doc_offsets go backwards"),
    ("floats", "doc_offsets is not a list of whole numbers"),
    ("short doc_bytes", "in doc_bytes"),
])
def test_corrupt_shard_index(capsys, data_copy, tmp_path, how, message):
    index = damage_index(data_copy, how)
    out = tmp_path / "run"
    code, err = train(capsys, out, data_copy)
    assert_refused(code, err, str(index), message, "corrupt shard index")
    assert not out.exists()


@pytest.mark.parametrize("cut,message", [
    (1, "is not a whole number of uint16 tokens"),
    (2, "doc_offsets end at token"),
])
def test_token_file_whose_size_disagrees_with_the_index(capsys, data_copy, tmp_path, cut, message):
    tokens = data_copy / "shards" / "prose" / "validation.bin"
    write(tokens, tokens.read_bytes()[:-cut])
    out = tmp_path / "run"
    code, err = train(capsys, out, data_copy)
    assert_refused(code, err, "shards/prose/validation", message)
    assert not out.exists()


def test_shard_that_disagrees_with_the_manifest(capsys, data_copy, tmp_path):
    edit_manifest(data_copy, lambda m: m["domains"]["prose"]["train"].update(tokens=123))
    out = tmp_path / "run"
    code, err = train(capsys, out, data_copy)
    assert_refused(code, err, "shards/prose/train.bin", "manifest.json says 123")
    assert not out.exists()


@pytest.mark.parametrize("how,message", [
    ("bad json", "not valid JSON"),
    ("no dtype", "dtype is None"),
    ("no domains", "domains is missing or empty"),
    ("vocab text", "tokenizer.vocab_size and tokenizer.eos_id must be whole numbers"),
    ("no split", "domains.code.validation.tokens is missing"),
    ("escaping domain", "domain name '../../elsewhere' is not a plain folder name"),
])
def test_damaged_manifest(capsys, data_copy, tmp_path, how, message):
    if how == "bad json":
        write(data_copy / "manifest.json", '{"dtype": "uint16",')
    else:
        def change(m):
            if how == "no dtype":
                del m["dtype"]
            elif how == "no domains":
                m["domains"] = {}
            elif how == "vocab text":
                m["tokenizer"]["vocab_size"] = "2048"
            elif how == "no split":
                del m["domains"]["code"]["validation"]
            elif how == "escaping domain":
                m["domains"]["../../elsewhere"] = m["domains"].pop("code")
        edit_manifest(data_copy, change)
    out = tmp_path / "run"
    code, err = train(capsys, out, data_copy)
    assert_refused(code, err, "manifest.json", message)
    assert not out.exists()


@pytest.mark.parametrize("split,recorded", [("train", True), ("validation", False)])
def test_token_ids_at_or_above_the_vocabulary(capsys, data_copy, tmp_path, split, recorded):
    """A flipped id (used to be an IndexError at step 1 with the run left 'running'): found by the
    scan when the shard is opened, whether or not the manifest recorded the shard's largest id."""
    tokens = data_copy / "shards" / "docs" / f"{split}.bin"
    ids = np.fromfile(tokens, dtype=np.uint16)
    ids[len(ids) // 2] = 60000
    ids.tofile(tokens)
    if not recorded:
        edit_manifest(data_copy, lambda m: [m["domains"][d][s].pop("max_token_id", None)
                                            for d in m["domains"] for s in ("train", "validation")])
    out = tmp_path / "run"
    code, err = train(capsys, out, data_copy)
    assert_refused(code, err, f"shards/docs/{split}.bin", "token id 60000", "vocabulary size in manifest.json (2048;")
    assert not out.exists()


def test_sampled_scan_of_a_big_shard_uses_the_recorded_max(tmp_path, monkeypatch):
    """Above SCAN_FULL_TOKENS the id recorded at build time counts too (a scan of samples may miss one)."""
    from glassroom.data import shards

    root = tmp_path / "ds"
    writer = shards.ShardWriter(root, "d", "train", np.uint16)
    ids = np.arange(5000, dtype=np.int64) % 100
    ids[2500] = 3000  # between sampled windows
    writer.add(ids, np.array([0, 5000]), [{"bytes": 10, "source": "s", "id": "x"}], {"s": 0})
    info = writer.close()
    assert info["max_token_id"] == 3000
    monkeypatch.setattr(shards, "SCAN_FULL_TOKENS", 1000)
    monkeypatch.setattr(shards, "SCAN_SAMPLES", 4)
    monkeypatch.setattr(shards, "SCAN_WINDOW", 10)
    assert shards.Shard(root, "d", "train", np.uint16).max_token_id()[0] == 99  # the samples alone miss it
    shard = shards.Shard(root, "d", "train", np.uint16, recorded_max=info["max_token_id"])
    with pytest.raises(GlassroomError, match="token id 3000"):
        shard.check_token_ids(2048, "the vocabulary")
    monkeypatch.setattr(shards, "SCAN_FULL_TOKENS", 10_000)
    assert shards.Shard(root, "d", "train", np.uint16).max_token_id() == (3000, "a full scan")


# ----------------------------------------------------------------------------- the run folder


def test_out_at_a_folder_that_is_not_a_run(capsys, tiny_dataset, tmp_path):
    out = tmp_path / "extension"
    (out / "icons").mkdir(parents=True)
    write(out / "manifest.json", '{"name": "an extension"}')
    write(out / "icons" / "a.png", b"\x89PNG")
    before = snapshot(out)
    code, err = train(capsys, out, tiny_dataset)
    assert_refused(code, err, f"--out {out}: exists and is not a run folder", "icons, manifest.json")
    assert snapshot(out) == before


def test_out_at_a_file(capsys, tiny_dataset, tmp_path):
    out = write(tmp_path / "run", "keep me")
    code, err = train(capsys, out, tiny_dataset)
    assert_refused(code, err, "is a file, not a folder")
    assert out.read_text() == "keep me"
    code, err = train(capsys, out / "deeper" / "run", tiny_dataset)
    assert_refused(code, err, f"{out} is a file, not a folder")
    assert out.read_text() == "keep me"


@pytest.mark.parametrize("exists", [False, True])
def test_resume_where_there_is_no_run(capsys, tiny_dataset, tmp_path, exists):
    out = tmp_path / "run"
    if exists:
        out.mkdir()
    code, err = train(capsys, out, tiny_dataset, resume=True)
    assert_refused(code, err, "nothing to resume (no config.yaml)")
    assert out.exists() == exists and (not exists or not any(out.iterdir()))


def test_damaged_saved_config_on_resume(capsys, tiny_dataset, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    write(out / "config.yaml", "model: [unclosed\n")
    argv = ["train", "--out", str(out), "--resume", "--quiet"]
    assert cli.main(argv) == 2
    assert_refused(2, capsys.readouterr().err, "config.yaml", "not valid YAML")
    assert (out / "config.yaml").read_text() == "model: [unclosed\n"


def test_torchrun_variables_on_one_process(capsys, tiny_dataset, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setenv("WORLD_SIZE", "2")
    for key in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    code, err = train(capsys, out, tiny_dataset)
    assert_refused(code, err, "WORLD_SIZE=2 is set but RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT are not", "torchrun")
    monkeypatch.setenv("WORLD_SIZE", "two")
    code, err = train(capsys, out, tiny_dataset)
    assert_refused(code, err, "WORLD_SIZE='two': not a whole number")
    assert not out.exists()


@pytest.mark.parametrize("option", ["--nproc_per_node=2", "--local_rank=0", "--nnodes=2"])
def test_torchrun_options_given_to_glassroom(capsys, tiny_dataset, tmp_path, option):
    out = tmp_path / "run"
    code, err = train(capsys, out, tiny_dataset, extra=(option,))
    assert_refused(code, err, "unrecognized arguments", option)
    assert not out.exists()


def test_bad_fault_spec_is_refused_before_the_run_folder(capsys, tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSROOM_FAULTS", "nan@x")
    out = tmp_path / "run"
    code, err = train(capsys, out, tiny_dataset)
    assert_refused(code, err, "GLASSROOM_FAULTS")
    assert not out.exists()


# ----------------------------------------------------------------------------- a start that fails late


def plant_start_failure(monkeypatch, where: str) -> None:
    """A failure after RUN_DIR was prepared: in the start-up (optimizer) or in the first step."""
    from glassroom.train import trainer

    def fail(*args, **kwargs):
        raise GlassroomError(f"planted failure in {where}")
    if where == "start-up":
        monkeypatch.setattr(trainer, "build_optimizer", fail)
    else:
        monkeypatch.setattr(trainer.Trainer, "train_step", fail)


@pytest.mark.parametrize("where", ["start-up", "first step"])
@pytest.mark.parametrize("before", ["absent", "empty", "store only"])
def test_a_failed_start_removes_only_what_it_created(capsys, tiny_dataset, tmp_path, monkeypatch, where, before):
    out = tmp_path / "runs" / "new"
    if before != "absent":
        out.mkdir(parents=True)
    if before == "store only":  # a run not yet started, e.g. holding a preregistered prediction
        from glassroom.observe.store import StoreWriter

        with StoreWriter(out) as writer:
            writer.event("note", "prediction goes here", 0)
    plant_start_failure(monkeypatch, where)
    code, err = train(capsys, out, tiny_dataset, "train.steps=2")
    assert_refused(code, err, f"planted failure in {where}")
    if before == "absent":
        assert not out.exists() and not out.parent.exists()
    else:
        names = {p.name for p in out.iterdir()}
        assert "config.yaml" not in names and "checkpoints" not in names
        if before == "store only":
            assert "store.sqlite" in names
            from glassroom.observe.store import StoreReader

            with StoreReader(out) as reader:
                assert reader.events()[0]["text"] == "prediction goes here"
        else:
            assert names == set()
    monkeypatch.undo()
    code, err = train(capsys, out, tiny_dataset, "train.steps=2", "train.eval_every=2")
    assert code == 0, err  # a plain rerun works


def test_fixing_the_config_after_a_refusal_then_works(capsys, tiny_dataset, tmp_path):
    """seq_len beyond a validation shard used to fail after config.yaml was written, and the rerun
    was then refused as 'already holds a run'."""
    out = tmp_path / "run"
    code, err = train(capsys, out, tiny_dataset, "model.max_seq_len=40000", "train.seq_len=30000")
    assert_refused(code, err, "train.seq_len: 30000 is too long for")
    assert not out.exists()
    out.mkdir()  # an existing empty folder is fine
    code, err = train(capsys, out, tiny_dataset, "train.steps=2", "train.eval_every=2")
    assert code == 0, err
    assert (out / "config.yaml").is_file() and (out / "checkpoints" / "step_0000002").is_dir()
    code, err = train(capsys, out, tiny_dataset, "train.steps=2")
    assert_refused(code, err, "already holds a run; add --resume")


@pytest.mark.parametrize("kind", ["device", "fifo", "folder"])
def test_a_shard_that_is_not_a_regular_file_is_named_and_never_read(capsys, data_copy, tmp_path, kind):
    shard = data_copy / "shards" / "docs" / "train.bin"
    shard.unlink()
    if kind == "device":
        shard.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(shard)  # opening it for reading would wait for ever
    else:
        shard.mkdir()
    code, err = train(capsys, tmp_path / "run", data_copy)
    assert_refused(code, err, f"{shard}: not a regular file")
    assert not (tmp_path / "run").exists()
