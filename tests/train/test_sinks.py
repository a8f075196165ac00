"""The optional metric mirrors, end to end through `glassroom train`: TensorBoard event files read back
with TensorBoard's own EventAccumulator, and an offline wandb run read back from its .wandb file with
wandb's own protobuf definitions; both compared with the run store value for value."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from glassroom.errors import GlassroomError
from glassroom.observe.store import StoreReader
from train_helpers import run_train, run_train_here

SECRET = "glassroom-planted-secret-7f3a9c"  # an environment variable's value that must not be recorded


# ------------------------------------------------------------------ readers


def tensorboard_scalars(run_dir: Path, tag: str = "train/loss") -> tuple[list[int], list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars(tag)
    return [e.step for e in events], [e.value for e in events]


def wandb_records(path: Path):
    """The protobuf records of a .wandb transaction log (a LevelDB-style log: 32 KiB blocks of
    chunks with a 7-byte header each, after a 7-byte ':W&B' file header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length = int.from_bytes(data[pos + 4 : pos + 6], "little")
        kind = data[pos + 6]
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0:
            continue
        parts = chunk if kind in (1, 2) else parts + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(parts)
            yield record


def _items(items) -> dict:
    return {("/".join(i.nested_key) or i.key): json.loads(i.value_json) for i in items}


def wandb_offline_run(run_file: Path) -> dict:
    """run id, config, history rows (by step) and the last summary of one offline run."""
    out = {"run_id": None, "config": {}, "history": {}, "summary": {}}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run_id"] = record.run.run_id
            out["config"].update(_items(record.run.config.update))
        elif kind == "config":
            out["config"].update(_items(record.config.update))
        elif kind == "history":
            row = _items(record.history.item)
            out["history"][int(row["_step"])] = row
        elif kind == "summary":
            out["summary"].update(_items(record.summary.update))
    return out


def store_series(run_dir: Path, name: str = "train/loss") -> tuple[list[int], np.ndarray]:
    with StoreReader(run_dir) as reader:
        steps, values = reader.series(name)
    return [int(s) for s in steps], np.asarray(values, dtype=np.float64)


def wandb_env(tmp_path: Path) -> dict:
    base = tmp_path / "wandb-home"
    return {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(base / "dir"),
            "WANDB_CONFIG_DIR": str(base / "config"), "WANDB_CACHE_DIR": str(base / "cache"),
            "WANDB_DATA_DIR": str(base / "data"), "GLASSROOM_TEST_TOKEN": SECRET}


def files_containing(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


# ------------------------------------------------------------------ TensorBoard


def test_tensorboard_event_files_hold_every_step_of_the_store(tiny_dataset, tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "tb"
    result = run_train_here(out, tiny_dataset, "observe.tensorboard=true")
    assert result.returncode == 0, result.stderr
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    steps, values = tensorboard_scalars(out, "train/loss")
    store_steps, store_values = store_series(out, "train/loss")
    assert steps == store_steps == list(range(1, 13))
    # Event files hold float32: equal to the store's float64 rounded to float32, exactly.
    assert values == [float(np.float32(v)) for v in store_values]
    for tag in ("train/lr", "train/grad_norm", "throughput/tokens_per_s", "moe/layer_1/imbalance"):
        assert tensorboard_scalars(out, tag)[0] == list(range(1, 13)), tag
    lr_steps, lrs = tensorboard_scalars(out, "train/lr")
    assert np.allclose(lrs, store_series(out, "train/lr")[1], rtol=1e-6)
    # Probes run every 3 steps (and at step 1) in the tiny config: the mirror has exactly those.
    assert tensorboard_scalars(out, "norm/param/total")[0] == store_series(out, "norm/param/total")[0]


# ------------------------------------------------------------------ wandb


@pytest.mark.slow
def test_wandb_offline_run_holds_the_store_history_and_no_environment(tiny_dataset, tmp_path):
    pytest.importorskip("wandb")
    from glassroom.train.sinks import wandb_run_id

    out = tmp_path / "wb"
    env = wandb_env(tmp_path)
    result = run_train(out, tiny_dataset, "observe.wandb=true", "observe.wandb_project=glassroom-test", env=env)
    assert result.returncode == 0, result.stderr
    folders = list((out / "wandb").glob("offline-run-*"))
    assert len(folders) == 1, folders
    run_files = list(folders[0].glob("run-*.wandb"))
    assert len(run_files) == 1
    run = wandb_offline_run(run_files[0])
    assert run["run_id"] == wandb_run_id(out) and folders[0].name.endswith(run["run_id"])

    steps, values = store_series(out, "train/loss")
    assert sorted(run["history"]) == steps == list(range(1, 13))
    assert [run["history"][s]["train/loss"] for s in steps] == list(values)  # JSON floats: exact
    assert run["summary"]["train/loss"] == values[-1]
    assert run["history"][12]["train/lr"] == store_series(out, "train/lr")[1][-1]
    # The resolved config is the run's config.
    assert run["config"]["train"]["steps"] == 12 and run["config"]["observe"]["wandb"] is True
    assert run["config"]["model"]["moe"]["n_experts"] == 4
    # No environment variable was recorded anywhere wandb wrote.
    for root in (out / "wandb", tmp_path / "wandb-home"):
        assert files_containing(root, SECRET.encode()) == []


# ------------------------------------------------------------------ failure and resume


@pytest.mark.slow
def test_resume_after_a_failed_run_continues_both_mirrors(tiny_dataset, tmp_path):
    """A run stops at step 10 (NaN, max_bad_steps=1) after its checkpoint at step 8 and after logging
    step 9; the resumed run replays 9-12. TensorBoard must show each step once, with the values the
    store kept; wandb must continue the same run id."""
    tensorboard = pytest.importorskip("tensorboard")
    wandb = pytest.importorskip("wandb")
    del tensorboard, wandb
    from glassroom.train.sinks import wandb_run_id

    out = tmp_path / "resumed"
    sets = ("observe.tensorboard=true", "observe.wandb=true", "train.max_bad_steps=1")
    env = wandb_env(tmp_path)
    failed = run_train(out, tiny_dataset, *sets, env={**env, "GLASSROOM_FAULTS": "nan@10"})
    assert failed.returncode == 2, failed.stderr
    assert "stopped at step 10" in failed.stderr
    assert tensorboard_scalars(out)[0] == list(range(1, 10))  # closed (flushed) on failure too

    resumed = run_train(out, tiny_dataset, *sets, resume=True, env=env)
    assert resumed.returncode == 0, resumed.stderr
    steps, values = tensorboard_scalars(out)
    store_steps, store_values = store_series(out)
    assert steps == store_steps == list(range(1, 13))
    assert values == [float(np.float32(v)) for v in store_values]

    folders = sorted((out / "wandb").glob("offline-run-*"))
    assert len(folders) == 2, folders
    runs = [wandb_offline_run(next(f.glob("run-*.wandb"))) for f in folders]
    assert runs[0]["run_id"] == runs[1]["run_id"] == wandb_run_id(out)
    assert sorted(runs[0]["history"]) == list(range(1, 10))
    assert sorted(runs[1]["history"]) == [9, 10, 11, 12]
    assert [runs[1]["history"][s]["train/loss"] for s in (9, 10, 11, 12)] == list(store_values[8:])
    assert runs[1]["summary"]["train/loss"] == store_values[-1]


# ------------------------------------------------------------------ missing packages, ids


@pytest.mark.slow
def test_a_missing_package_names_the_extra_before_the_run_folder_is_made(tiny_dataset, tmp_path):
    hidden = tmp_path / "hidden"
    for name in ("wandb", "tensorboard"):
        (hidden / name).mkdir(parents=True)
        (hidden / name / "__init__.py").write_text('raise ImportError("hidden by the test")\n')
    for option, extra in (("observe.wandb=true", "wandb"), ("observe.tensorboard=true", "tensorboard")):
        out = tmp_path / extra
        result = run_train(out, tiny_dataset, option, env={"PYTHONPATH": str(hidden)})
        assert result.returncode == 2, result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(f"error: observe.{extra}:") and f"pip install -e '.[{extra}]'" in last, last
        assert not out.exists()  # nothing to --resume; the same command works once the extra is installed


def test_missing_package_errors_in_process(monkeypatch, tmp_path):
    from glassroom.train import sinks
    from glassroom.train.config import load_run_config
    from train_helpers import TINY

    cfg = load_run_config(TINY, [])
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(GlassroomError, match=r"pip install -e '\.\[wandb\]'"):
        sinks.WandbSink(cfg, tmp_path)
    with pytest.raises(GlassroomError, match=r"pip install -e '\.\[tensorboard\]'"):
        sinks.TensorBoardSink(cfg, tmp_path)
    assert sinks.mirrors(cfg, tmp_path, is_main=True) == []  # both off by default: nothing imported


def test_wandb_run_id_is_stable_per_folder(tmp_path):
    from glassroom.train.sinks import wandb_run_id

    a, b = tmp_path / "runs" / "ladder rung:1", tmp_path / "other" / "ladder rung:1"
    assert wandb_run_id(a) == wandb_run_id(tmp_path / "runs" / "." / "ladder rung:1")
    assert wandb_run_id(a) != wandb_run_id(b)
    assert wandb_run_id(a).startswith("ladder-rung-1-")
    assert all(c.isalnum() or c in "-_" for c in wandb_run_id(a))
