"""Checkpoints carry checksums; `--resume` verifies the newest, falls back to the newest intact one
(journaled, said on stderr, the damaged one moved aside), and with none intact exits 2 in one line.
Retention never deletes the last intact checkpoint in favour of damaged ones."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from glassroom.observe.store import StoreReader
from glassroom.train import checkpoint as ckpt
from train_helpers import ROOT, assert_same_store, losses, run_train_here, train_cmd, tree_hashes
import dataclasses

import torch

from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import build_model

STEPS = ("step_0000004", "step_0000008", "step_0000012")


@pytest.fixture(scope="module")
def source(tiny_dataset, tmp_path_factory) -> Path:
    """A finished 12-step run that kept all three checkpoints (4, 8, 12)."""
    out = tmp_path_factory.mktemp("integrity") / "source"
    result = run_train_here(out, tiny_dataset, "train.keep_last=10")
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture
def run(source, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(source, copy)
    return copy


def data_file(checkpoint: Path) -> Path:
    return checkpoint / "__0_0.distcp"


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4] = bytes(b ^ 0xFF for b in data[middle : middle + 4])
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated data file": (lambda c: truncate(data_file(c)), "__0_0.distcp: truncated"),
    "missing .metadata": (lambda c: (c / ".metadata").unlink(), ".metadata: missing"),
    "flipped bytes": (lambda c: flip(data_file(c)), "__0_0.distcp: checksum mismatch"),
    "trainer.json not JSON": (lambda c: (c / "trainer.json").write_text("{" + "x" * 10), "trainer.json: "),
    "manifest not JSON": (lambda c: (c / "manifest.json").write_text("{"), "manifest.json: not a readable"),
}


def test_every_checkpoint_has_a_manifest_of_its_files(source):
    for name in STEPS:
        folder = source / "checkpoints" / name
        files = json.loads((folder / "manifest.json").read_text())["files"]
        assert set(files) == {".metadata", "__0_0.distcp", "trainer.json"}
        for file, entry in files.items():
            content = (folder / file).read_bytes()
            assert entry == {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}
        assert ckpt.verify_checkpoint(folder, int(name[5:])) is None


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(run, source, tiny_dataset, kind):
    damage, expected = DAMAGE[kind]
    damage(run / "checkpoints" / "step_0000012")
    result = run_train_here(run, tiny_dataset, resume=True)
    assert result.returncode == 0, result.stderr
    problem = f"checkpoints/step_0000012/{expected}"
    assert f"warning: {problem}" in result.stderr and "resuming from step_0000008" in result.stderr
    with StoreReader(run) as reader:
        damaged = [e for e in reader.events() if e["kind"] == "checkpoint_damaged"]
        assert len(damaged) == 1 and damaged[0]["text"].startswith(problem)
        assert damaged[0]["step"] == 12 and damaged[0]["data"]["checkpoint"] == "step_0000012"
        resume = [e for e in reader.events() if e["kind"] == "resume"][-1]
        assert resume["step"] == 8 and resume["data"]["set_aside"] == ["checkpoints/damaged/step_0000012"]
    # Kept for inspection, out of the way; steps 9-12 were redone into a new, intact step_0000012.
    assert (run / "checkpoints" / "damaged" / "step_0000012").is_dir()
    assert ckpt.verify_checkpoint(run / "checkpoints" / "step_0000012", 12) is None
    np.testing.assert_array_equal(losses(run), losses(source))
    assert_same_store(run, source, kinds=False)
    # The journal: what happened, then the fallback; the rewritten step_0000012 is journaled anew,
    # the evaluation and the end at step 12 are not repeated.
    with StoreReader(run) as reader, StoreReader(source) as before:
        added = [(e["kind"], e["step"]) for e in reader.events()][len(before.events()):]
    assert added == [("checkpoint_damaged", 12), ("resume", 8), ("checkpoint", 12)]


def test_no_intact_checkpoint_is_one_line_and_exit_2_with_nothing_moved(run, tiny_dataset):
    flip(data_file(run / "checkpoints" / "step_0000012"))
    (run / "checkpoints" / "step_0000008" / ".metadata").unlink()
    truncate(data_file(run / "checkpoints" / "step_0000004"))
    before = tree_hashes(run)
    result = run_train_here(run, tiny_dataset, resume=True)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert ("checkpoints/step_0000012/__0_0.distcp: checksum mismatch; checkpoints/step_0000008/.metadata: missing; "
            "checkpoints/step_0000004/__0_0.distcp: truncated") in lines[0]
    assert lines[0].rstrip().endswith("no intact checkpoint to resume from "
                                      f"(move {run / 'checkpoints'} aside to start again from step 0)")
    # A refused resume changes nothing: config.yaml, the journal and the status (still finished) as they were.
    assert tree_hashes(run) == before


def strip_manifests(run: Path) -> None:
    for name in STEPS:
        (run / "checkpoints" / name / "manifest.json").unlink()


def test_a_checkpoint_without_manifest_is_checked_by_its_index(run, tiny_dataset):
    """Checkpoints from before manifests: trainer.json, .metadata and the data files' lengths."""
    strip_manifests(run)
    assert ckpt.verify_checkpoint(run / "checkpoints" / "step_0000012", 12) is None
    (run / "checkpoints" / "step_0000012" / "trainer.json").write_text("not json")
    truncate(data_file(run / "checkpoints" / "step_0000008"))
    assert ckpt.verify_checkpoint(run / "checkpoints" / "step_0000012", 12) == \
        "checkpoints/step_0000012/trainer.json: not JSON"
    assert ckpt.verify_checkpoint(run / "checkpoints" / "step_0000008", 8).startswith(
        "checkpoints/step_0000008/__0_0.distcp: truncated")
    result = run_train_here(run, tiny_dataset, resume=True)
    assert result.returncode == 0, result.stderr
    with StoreReader(run) as reader:
        resume = [e for e in reader.events() if e["kind"] == "resume"][-1]
    assert resume["step"] == 4 and resume["data"]["verified"] is False
    assert "without a checksum manifest" in resume["text"]
    # What it writes from then on carries a manifest.
    assert (run / "checkpoints" / "step_0000012" / "manifest.json").is_file()


def test_retention_never_deletes_the_last_intact_checkpoint_for_damaged_ones(run):
    truncate(data_file(run / "checkpoints" / "step_0000012"))
    (run / "checkpoints" / "step_0000008" / "trainer.json").unlink()
    ckpt.apply_retention(run, keep_last=1, keep_every=None)
    # step 4 is the newest intact one; the damaged ones are not retention's to delete.
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == list(STEPS)
    flip(data_file(run / "checkpoints" / "step_0000012"))  # sizes right, content wrong: still not counted
    ckpt.apply_retention(run, keep_last=1, keep_every=None)
    assert (run / "checkpoints" / "step_0000004").is_dir()


@pytest.mark.dist
def test_torchrun_ranks_agree_on_the_fallback(run, source, tiny_dataset):
    """Two ranks resume a one-process run whose newest checkpoint is damaged: rank 0 verifies, both
    load step 8 (a checkpoint loads at any world size)."""
    import subprocess

    flip(data_file(run / "checkpoints" / "step_0000012"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "glassroom",
           *train_cmd(run, tiny_dataset, resume=True)[3:], "--set", "train.parallel=ddp"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("warning: checkpoints/step_0000012/__0_0.distcp: checksum mismatch") == 1
    np.testing.assert_allclose(losses(run), losses(source), rtol=1e-3)
    with StoreReader(run) as reader:
        assert [e["step"] for e in reader.events() if e["kind"] == "resume"] == [8]


def test_odd_things_in_the_checkpoints_folder_are_named(run, tiny_dataset):
    folder = run / "checkpoints"
    (folder / "step_0000016").write_text("not a checkpoint")
    assert ckpt.verify_checkpoint(folder / "step_0000016", 16) == "checkpoints/step_0000016: not a folder"
    manifest = folder / "step_0000012" / "manifest.json"
    files = json.loads(manifest.read_text())
    files["files"]["../../config.yaml"] = {"bytes": 1, "sha256": "0" * 64}
    manifest.write_text(json.dumps(files))
    assert ckpt.verify_checkpoint(folder / "step_0000012", 12) == \
        "checkpoints/step_0000012/manifest.json: not a readable checksum manifest"
    shutil.rmtree(folder)
    folder.write_text("")
    result = run_train_here(run, tiny_dataset, resume=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {folder}: is a file, not the checkpoints folder")
    assert folder.is_file()


def test_a_consistent_checkpoint_of_another_version_is_one_line(run, tiny_dataset):
    newest = run / "checkpoints" / "step_0000012"
    state = json.loads((newest / "trainer.json").read_text())
    state["train_state"]["counter_of_a_later_version"] = 1
    (newest / "trainer.json").write_text(json.dumps(state))
    ckpt.write_manifest(newest)  # intact as far as checksums go
    before = tree_hashes(run)
    result = run_train_here(run, tiny_dataset, resume=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"{newest}/trainer.json: not the training state this version writes" in result.stderr
    assert tree_hashes(run) == before  # refused before config.yaml, the journal or the status is written


@pytest.mark.slow
def test_resume_after_config_yaml_was_edited_names_the_checkpoint_and_the_key(run):
    text = (run / "config.yaml").read_text()
    assert "d_model: 64" in text
    (run / "config.yaml").write_text(text.replace("d_model: 64", "d_model: 128"))
    before = tree_hashes(run)
    # through python -m glassroom: a refused resume's one line and exit code 2 as a user gets them
    result = subprocess.run([sys.executable, "-m", "glassroom", "train", "--out", str(run), "--resume", "--quiet",
                             "--set", "train.steps=16"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "step_0000012: written with another model.d_model (64 -> 128)" in lines[0] and "edited" in lines[0]
    assert tree_hashes(run) == before  # nothing set aside, config.yaml not rewritten, nothing journaled


def test_a_resume_prunes_what_a_kill_between_save_and_pruning_left(run, tiny_dataset):
    # The run keeps 4, 8 and 12 (keep_last=10); with keep_last=1 that is what a kill between saving
    # step 12 and pruning leaves behind. A finished run saves nothing more: the resume prunes.
    result = run_train_here(run, tiny_dataset, "train.keep_last=1", "train.keep_every=8", resume=True)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_0000008", "step_0000012"]


def test_a_damaged_run_store_is_one_line_for_resume_and_metrics(run, tiny_dataset):
    (run / "store.sqlite").write_bytes(b"not a database at all, " * 200)
    for name in ("store.sqlite-wal", "store.sqlite-shm"):
        (run / name).unlink(missing_ok=True)
    before = tree_hashes(run)
    # the resume in this process; metrics through python -m glassroom (its one-line error and exit code 2)
    for result in (run_train_here(run, tiny_dataset, resume=True),
                   subprocess.run([sys.executable, "-m", "glassroom", "metrics", str(run)], cwd=ROOT,
                                  capture_output=True, text=True, timeout=600)):
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert f"{run / 'store.sqlite'}: cannot be read" in lines[0] and "damaged" in lines[0]
    assert tree_hashes(run) == before  # config.yaml not rewritten, the checkpoints where they were
    (run / "store.sqlite").rename(run / "store.sqlite.damaged")  # what the message says to do
    resumed = run_train_here(run, tiny_dataset, "train.steps=14", resume=True)
    assert resumed.returncode == 0, resumed.stderr




DENSE = ModelConfig(vocab_size=256, d_model=64, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64)


MOE = dataclasses.replace(
    DENSE, moe=MoEConfig(n_experts=8, top_k=2, d_expert=32, n_shared_experts=1, first_dense_layers=1))


def test_checkpoints_save_verify_retain_fall_back_and_load_in_process(tmp_path):
    """The checkpoint module without a training run (so scripts/mutation.sh can test its mutants in
    seconds): manifest checksums, retention, a flipped and a truncated file named, the fallback to
    the newest intact checkpoint, and a load that restores model, optimizer and RNG exactly."""
    import hashlib
    import json

    from glassroom.train import checkpoint as ckpt

    model = build_model(MOE, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    saved = {}
    for step in range(1, 5):
        model(torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(step))).logits.float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        saved[step] = ({k: v.clone() for k, v in model.state_dict().items()},
                       {n: optimizer.state[p]["exp_avg"].clone() for n, p in model.named_parameters()},
                       torch.get_rng_state().clone())
        ckpt.save_checkpoint(tmp_path, step, model, optimizer, {"train_state": {"tokens_seen": 100 * step}},
                             keep_last=2, keep_every=None)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [3, 4]  # retention: the newest two
    newest = tmp_path / "checkpoints" / "step_0000004"
    assert ckpt.verify_checkpoint(newest, 4) is None and ckpt.verify_checkpoint(newest, 3) is not None
    manifest = json.loads((newest / "manifest.json").read_text())["files"]
    assert {"trainer.json", ".metadata"} <= set(manifest)
    for name, entry in manifest.items():
        content = (newest / name).read_bytes()
        assert entry == {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}, name

    data = max((n for n in manifest if n.endswith(".distcp")), key=lambda n: manifest[n]["bytes"])
    content = bytearray((newest / data).read_bytes())
    content[len(content) // 2] ^= 0xFF
    (newest / data).write_bytes(bytes(content))
    assert ckpt.verify_checkpoint(newest, 4) == f"checkpoints/step_0000004/{data}: checksum mismatch"
    (newest / data).write_bytes(bytes(content[:100]))
    assert ckpt.verify_checkpoint(newest, 4) == (f"checkpoints/step_0000004/{data}: truncated "
                                                 f"(100 bytes, the manifest says {manifest[data]['bytes']})")
    choice = ckpt.choose_for_resume(tmp_path)
    assert choice.step == 3 and choice.path.name == "step_0000003" and choice.verified
    assert [(s, p.name) for s, p, _ in choice.damaged] == [(4, "step_0000004")]
    moved = ckpt.set_aside(tmp_path, newest)
    assert moved == tmp_path / "checkpoints" / "damaged" / "step_0000004" and not newest.exists()
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [3]

    fresh = build_model(MOE, seed=1)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    torch.manual_seed(123)
    state = ckpt.load_checkpoint(choice.path, fresh, fresh_optimizer)
    assert state["step"] == 3 and state["train_state"] == {"tokens_seen": 300}
    weights, moments, rng = saved[3]
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, weights[name]), name
    for name, param in fresh.named_parameters():
        assert torch.equal(fresh_optimizer.state[param]["exp_avg"], moments[name]), name
    assert torch.equal(torch.get_rng_state(), rng)


def test_checkpoints_save_verify_keep_every_and_malformed_manifests(tmp_path):
    """Retention keeps every `keep_every`-th step besides the newest `keep_last`; a manifest whose
    entries have the wrong shape or name a file outside the checkpoint is damage, named in one line."""
    import json

    from glassroom.train import checkpoint as ckpt

    model = build_model(MOE, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(1, 7):
        ckpt.save_checkpoint(tmp_path, step, model, optimizer, {"train_state": {}}, keep_last=2, keep_every=2)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [2, 4, 5, 6]
    # A kill between a save and its pruning leaves checkpoints past keep_last (here a copy of step 5
    # as step 3, and step 1 again): the next save removes every one of them, not only the one it supersedes.
    shutil.copytree(tmp_path / "checkpoints" / "step_0000005", tmp_path / "checkpoints" / "step_0000003")
    shutil.copytree(tmp_path / "checkpoints" / "step_0000005", tmp_path / "checkpoints" / "step_0000001")
    ckpt.save_checkpoint(tmp_path, 7, model, optimizer, {"train_state": {}}, keep_last=2, keep_every=2)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [2, 4, 6, 7]

    newest = tmp_path / "checkpoints" / "step_0000006"
    original = (newest / "manifest.json").read_text()
    files = json.loads(original)["files"]
    name = next(iter(files))
    broken = {
        "bytes as text": {**files, name: {"bytes": "12", "sha256": files[name]["sha256"]}},
        "no digest": {**files, name: {"bytes": files[name]["bytes"]}},
        "outside": {**files, "../step_0000005/trainer.json": files[name]},
        "absolute": {**files, "/etc/passwd": files[name]},
    }
    for what, entries in broken.items():
        (newest / "manifest.json").write_text(json.dumps({"format": 1, "files": entries}))
        problem = ckpt.verify_checkpoint(newest, 6)
        assert problem == "checkpoints/step_0000006/manifest.json: not a readable checksum manifest", what
    (newest / "manifest.json").write_text(json.dumps({"format": 1, "files": []}))
    assert ckpt.verify_checkpoint(newest, 6) is not None
    (newest / "manifest.json").write_text(original)
    assert ckpt.verify_checkpoint(newest, 6) is None
