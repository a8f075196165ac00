"""SIGTERM, a kill during the start, a second train into a running run: the run folder is left resumable
or as it was, the journal says so."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from glassroom.observe.store import StoreReader
from train_helpers import ROOT, assert_same_store, run_train, store_contents, train_cmd


@pytest.fixture(scope="module")
def reference(tiny_dataset, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("signals") / "reference"
    result = run_train(out, tiny_dataset)
    assert result.returncode == 0, result.stderr
    return out


def start(out: Path, dataset: Path, *sets: str) -> subprocess.Popen:
    # The same environment as run_train's reference: another thread count sums in another order,
    # and the resumed store would differ from the reference in the last bits.
    return subprocess.Popen(train_cmd(out, dataset, *sets), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def wait_for(condition, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.005)


def logged_steps(out: Path) -> int:
    try:
        with StoreReader(out) as reader:
            return len(reader.series("train/loss")[0])
    except Exception:  # not there yet, or being created
        return 0


@pytest.mark.slow
def test_sigterm_after_steps_journals_stopped_and_resume_completes_the_store(tiny_dataset, reference, tmp_path):
    out = tmp_path / "termed"
    proc = start(out, tiny_dataset)
    wait_for(lambda: logged_steps(out) >= 5, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    with StoreReader(out) as reader:
        status, journal = reader.status(), reader.events()
    assert status["state"] == "stopped"
    assert journal[-1]["kind"] == "stopped" and "SIGTERM" in journal[-1]["text"]

    resumed = run_train(out, tiny_dataset, resume=True)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_store(out, reference, kinds=False)
    kinds = [k for k in store_contents(out)["kinds"] if k != "stopped"]
    assert kinds == store_contents(reference)["kinds"]


@pytest.mark.slow
def test_sigterm_before_the_first_step_leaves_no_folder(tiny_dataset, tmp_path):
    out = tmp_path / "termed"
    proc = start(out, tiny_dataset, "train.batch_size=64")  # a slow first step: the signal lands before it ends
    wait_for(lambda: (out / "config.yaml").exists(), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert not out.exists()  # a plain rerun works
    assert run_train(out, tiny_dataset, "train.steps=2").returncode == 0


@pytest.mark.slow
def test_resume_of_a_run_killed_before_its_start_was_journaled_records_the_start(tiny_dataset, reference, tmp_path):
    out = tmp_path / "killed"  # what a SIGKILL between writing config.yaml and the start event leaves
    out.mkdir()
    shutil.copy(reference / "config.yaml", out / "config.yaml")
    refused = run_train(out, tiny_dataset)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    resumed = run_train(out, tiny_dataset, resume=True)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_store(out, reference)  # its journal begins with `start`, as the uninterrupted run's


@pytest.mark.slow
def test_a_second_train_into_a_running_run_is_refused_in_one_line(tiny_dataset, tmp_path):
    out = tmp_path / "busy"
    # Far more steps than can run while the second train starts: the first must still be writing when
    # SIGTERM comes, on a machine of any speed.
    proc = start(out, tiny_dataset, "train.steps=1000000")
    try:
        wait_for(lambda: logged_steps(out) >= 2, proc)
        second = run_train(out, tiny_dataset, "train.steps=1000000", resume=True)
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 2 and len(lines) == 1, second.stderr
        assert "another glassroom train is writing this run now" in lines[0]
        assert proc.poll() is None  # the first run goes on
        assert logged_steps(out) < 1000000
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    with StoreReader(out) as reader:
        kinds = [e["kind"] for e in reader.events()]
    assert kinds[0] == "start" and "resume" not in kinds and kinds[-1] == "stopped", (kinds[-3:], err[-2000:])
    assert run_train(out, tiny_dataset, "train.steps=8", resume=True).returncode == 0  # the lock went with it


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_during_a_checkpoint_write_ends_as_a_stop_after_the_checkpoint(tiny_dataset, tmp_path, monkeypatch, signum):
    """torch.distributed.checkpoint turns any exception inside its write into a CheckpointException: the
    signal must wait for the checkpoint, then stop the run as `stopped`, never crash it."""
    from torch.distributed.checkpoint import filesystem

    from glassroom.train import stopping
    from glassroom.train.config import load_run_config
    from glassroom.train.trainer import Trainer
    from train_helpers import TINY

    finish = filesystem.FileSystemWriter.finish

    def finish_with_a_signal(self, *args, **kwargs):
        os.kill(os.getpid(), signum)  # delivered here, inside DCP's write of the metadata
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(filesystem.FileSystemWriter, "finish", finish_with_a_signal)
    cfg = load_run_config(TINY, [f"data.path={tiny_dataset}", "train.steps=6", "train.checkpoint_every=2"])
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    previous = stopping.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            trainer.run()
    finally:
        stopping.restore(previous)
    with StoreReader(tmp_path / "run") as reader:
        events = reader.events()
    assert [(e["kind"], e["step"]) for e in events[-2:]] == [("checkpoint", 2), ("stopped", 2)]
    assert (tmp_path / "run" / "checkpoints" / "step_0000002").is_dir()
    reached = []
    with pytest.raises(KeyboardInterrupt, match="stopped inside"):  # held to the end of the outermost hold
        with stopping.hold():
            with stopping.hold():
                stopping.request("stopped inside")
            reached.append("after the inner hold")
        pytest.fail("the stop was not raised when the hold ended")
    assert reached == ["after the inner hold"]
    with pytest.raises(KeyboardInterrupt, match="at once"):
        stopping.request("at once")
    with pytest.raises(KeyboardInterrupt, match="second"):  # asked again inside a hold: not held twice
        with stopping.hold():
            stopping.request("first")
            stopping.request("second")
        pytest.fail("the second stop was held")
    with stopping.hold():  # nothing left pending from before
        pass
