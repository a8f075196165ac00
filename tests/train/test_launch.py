"""Restarts decided from the launch's notes (glassroom/train/launch.py), the planted kill of one rank,
the torchrun store that cannot restart, and the bad launch settings of `glassroom train` refused
before anything runs."""

from __future__ import annotations

import json
import random

import pytest

from cli_helpers import glassroom_in_process
from glassroom.errors import GlassroomError
from glassroom.train import launch
from glassroom.train.launch import NOTES_DIR, RankNote, detect_restart
from glassroom.train.preflight import check_launch
from glassroom.train.trainer import parse_faults
from train_helpers import TINY

# What a survivor's exception says when a peer went away, as gloo, NCCL and the stop handler word it.
PEER_ERRORS = ["RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:57260: Connection reset by peer",
               "RuntimeError: [pair.cc:598] Connection closed by peer [10.0.0.2]:4242",
               "DistBackendError: NCCL communicator was aborted on rank 3",
               "KeyboardInterrupt: stopped by SIGTERM"]
OWN_ERRORS = ["RuntimeError: CUDA error: an illegal memory access was encountered",
              "OSError: [Errno 28] No space left on device", "ValueError: loss is nan in a way nobody expected"]


def plant_attempt(run_dir, rng, world: int, launch_id: str | None) -> set[int]:
    """Notes of one failed attempt: each rank killed (no end), ended by its own error, or a
    bystander of a peer's failure; at least one rank fails. Returns the ranks that failed."""
    fates = [rng.choice(["killed", "own", "peer", "peer"]) for _ in range(world)]
    if all(f == "peer" for f in fates):
        fates[rng.randrange(world)] = rng.choice(["killed", "own"])
    for rank, fate in enumerate(fates):
        note = RankNote(run_dir, rank, world, attempt=0)
        note.note["launch"] = launch_id
        note.write()
        if fate != "killed":
            kind, _, text = rng.choice(OWN_ERRORS if fate == "own" else PEER_ERRORS).partition(": ")
            note.ended(type(kind, (Exception,), {})(text))
    return {r for r, f in enumerate(fates) if f != "peer"}


@pytest.mark.parametrize("seed", range(12))
def test_a_torchrun_restart_names_exactly_the_ranks_that_failed(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    world = rng.randint(1, 9)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-7")
    monkeypatch.delenv(launch.LAUNCH_ID_ENV, raising=False)
    failed = plant_attempt(tmp_path, rng, world, "job-7")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    restart = detect_restart(tmp_path, rank=0)
    assert restart is not None and restart.attempt == 1
    assert set(restart.data()["failed_ranks"]) == failed
    assert set(restart.bystanders) == set(range(world)) - failed
    for rank in failed:
        assert f"rank {rank} " in restart.text()
    assert not list((tmp_path / NOTES_DIR).glob("rank-*.json"))  # cleared for this attempt's notes


def test_a_start_a_person_made_is_no_restart(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-7")
    monkeypatch.delenv(launch.LAUNCH_ID_ENV, raising=False)
    plant_attempt(tmp_path, random.Random(0), 4, "job-7")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert detect_restart(tmp_path, rank=0) is None
    assert len(list((tmp_path / NOTES_DIR).glob("rank-*.json"))) == 4  # left as they were


def test_a_ray_launch_knows_its_restart_by_its_own_notes(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    failed = plant_attempt(tmp_path, random.Random(3), 3, "ray-launch-a")
    monkeypatch.setenv(launch.LAUNCH_ID_ENV, "ray-launch-b")  # another launch: a person's --resume
    assert detect_restart(tmp_path, rank=0) is None
    monkeypatch.setenv(launch.LAUNCH_ID_ENV, "ray-launch-a")  # Ray Train started the same launch again
    restart = detect_restart(tmp_path, rank=0)
    assert restart is not None and set(restart.data()["failed_ranks"]) == failed


def test_a_planted_kill_names_its_rank():
    assert parse_faults("kill@7:1,kill_after_checkpoint@5,nan@3") == {
        7: [("kill", 1.0)], 5: [("kill_after_checkpoint", None)], 3: [("nan", 1.0)]}
    with pytest.raises(GlassroomError, match="kill@7:one"):
        parse_faults("kill@7:one")


TORCHRUN = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
            "TORCHELASTIC_MAX_RESTARTS": "2"}


def test_torchrun_restarts_over_the_shared_rendezvous_store_are_refused():
    with pytest.raises(GlassroomError, match="TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
        check_launch({**TORCHRUN, "TORCHELASTIC_USE_AGENT_STORE": "True"})
    check_launch({**TORCHRUN, "TORCHELASTIC_USE_AGENT_STORE": "False"})
    check_launch({**TORCHRUN, "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"})


@pytest.mark.parametrize("args,message", [
    (["--set", "train.max_restarts=-1"], "train.max_restarts: must be zero or more"),
    (["--set", "train.stall_after=0"], "train.stall_after: must be"),
    (["--workers", "2"], "--workers, --gpus-per-worker and --cpus-per-worker go with --ray"),
    (["--ray", "local", "--workers", "3"], "--workers 3: train.batch_size 8 does not split into 3"),
    (["--ray", "local", "--workers", "2", "--set", "train.parallel={ep: 4}"], "--workers 2: train.parallel.ep: 4 does not divide"),
    (["--ray", "local", "--workers", "0"], "--workers 0: must be 1 or more"),
    (["--ray", "local", "--gpus-per-worker", "2"], "a worker trains on one GPU"),
    (["--ray", "127.0.0.1:9", "--workers", "2"], "--ray 127.0.0.1:9: cannot reach a Ray cluster there"),
])
def test_bad_launch_settings_are_one_line_before_anything_runs(tiny_dataset, tmp_path, args, message):
    out = tmp_path / "run"
    result = glassroom_in_process("train", TINY, "--out", out, "--set", f"data.path={tiny_dataset}", *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    assert not out.exists()


def test_rank_notes_say_how_a_rank_ended(tmp_path):
    note = RankNote(tmp_path, 3, 4, attempt=2)
    note.write()
    saved = json.loads((tmp_path / NOTES_DIR / "rank-3.json").read_text())
    assert saved["rank"] == 3 and saved["attempt"] == 2 and "ended" not in saved
    note.ended(RuntimeError("Connection closed by peer"))
    assert json.loads((tmp_path / NOTES_DIR / "rank-3.json").read_text())["ended"].startswith("RuntimeError: Connection")


def test_a_notes_folder_that_is_a_link_is_neither_read_nor_written(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "rank-0.json").write_text(json.dumps({"rank": 0, "launch": "job-7"}))
    run = tmp_path / "run"
    run.mkdir()
    (run / NOTES_DIR).symlink_to(elsewhere)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-7")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    restart = detect_restart(run, rank=0)
    assert restart is not None and restart.failed == []  # nothing read through the link
    RankNote(run, 1, 2, attempt=1).write()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["rank-0.json"]  # nothing removed or written there
