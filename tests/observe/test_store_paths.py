"""A run folder may have any name a file system allows: the store opens the same file for reading
as for writing even when the path holds characters that mean something in a URI (# ? %)."""

from __future__ import annotations

import pytest

from glassroom.observe.store import StoreReader, StoreWriter
from train_helpers import losses, run_train


@pytest.mark.parametrize("name", ["run#2", "what?mode=rw", "100%", "a b", "ünï"])
def test_reader_reads_what_the_writer_wrote(tmp_path, name):
    run = tmp_path / name
    run.mkdir()
    with StoreWriter(run) as w:
        w.log(1, {"train/loss": 2.5})
        w.set_artifact("config", {"name": name})
        w.flush()
    with StoreReader(run) as r:
        assert r.series("train/loss")[1].tolist() == [2.5]
        assert r.artifact("config") == {"name": name}
    assert not list(tmp_path.glob("*.sqlite*"))  # nothing opened beside the folder


@pytest.mark.slow
def test_training_into_a_folder_named_with_a_hash(tiny_dataset, tmp_path):
    result = run_train(tmp_path / "run#1", tiny_dataset, "train.steps=2", "train.eval_every=2",
                       "train.checkpoint_every=2")
    assert result.returncode == 0, result.stderr
    assert len(losses(tmp_path / "run#1")) == 2
