"""One training over two machines, simulated on this one: two torchrun launchers with --nnodes=2
(c10d rendezvous on 127.0.0.1, gloo) and a Ray cluster of two nodes (`ray start --head` and a second
`ray start --address`, one CPU each, so Ray Train's two workers land on different nodes). Each
trains the tiny MoE with {ep: 2} as one process does; a worker SIGKILLed mid-run is restarted by the
engine and the store ends equal to the uninterrupted run's; a checkpoint of two nodes resumes in one
process."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from glassroom.observe.store import StoreReader
from train_helpers import ROOT, TINY, assert_same_store, losses, run_train_here, train_cmd, trained_here

pytestmark = pytest.mark.dist

# The tiny MoE (4 experts, top-2, a shared expert), 10 steps in fp32, checkpoints at 5 and 10.
SETS = ("train.steps=10", "train.checkpoint_every=5", "train.precision=fp32")
EP2 = (*SETS, "train.parallel={ep: 2}")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
       "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}  # a throwaway cluster on 127.0.0.1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_nodes(out: Path, dataset: Path, *sets: str, max_restarts: int = 0, faults: str = "") -> list:
    """Two torchrun launchers, one process each, meeting at a c10d rendezvous on 127.0.0.1."""
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={out.name}", f"--max-restarts={max_restarts}",
           "-m", *train_cmd(out, dataset, *sets)[2:]]
    env = {**ENV, "GLASSROOM_FAULTS": faults}
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    results = [(p.communicate(timeout=600)[0], p.returncode) for p in procs]
    for output, code in results:
        assert code == 0, output[-4000:]
    return results


def restarted_events(run: Path) -> list[dict]:
    with StoreReader(run) as reader:
        return [e for e in reader.events() if e["kind"] == "restarted"]


@pytest.fixture(scope="module")
def one_process(tiny_dataset, tmp_path_factory) -> Path:
    return trained_here(tmp_path_factory.mktemp("one") / "run", tiny_dataset, *SETS)


@pytest.fixture(scope="module")
def torchrun_runs(tiny_dataset, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nodes")
    torchrun_nodes(root / "plain", tiny_dataset, *EP2)
    torchrun_nodes(root / "killed", tiny_dataset, *EP2, max_restarts=1, faults="kill@7:1")
    return {"plain": root / "plain", "killed": root / "killed"}


def test_two_torchrun_nodes_train_as_one_process(torchrun_runs, one_process):
    np.testing.assert_allclose(losses(torchrun_runs["plain"]), losses(one_process), rtol=1e-3)
    assert len(losses(torchrun_runs["plain"])) == 10


def test_a_checkpoint_of_two_nodes_resumes_in_one_process(torchrun_runs, one_process, tiny_dataset, tmp_path):
    copy = tmp_path / "resumed"
    shutil.copytree(torchrun_runs["plain"], copy)
    shutil.rmtree(copy / "checkpoints" / "step_0000010")
    result = run_train_here(copy, tiny_dataset, *SETS, "train.parallel=fsdp", resume=True)
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(losses(copy), losses(one_process), rtol=1e-3)


def test_a_worker_killed_mid_run_is_restarted_by_torchrun_and_the_store_is_the_uninterrupted_ones(torchrun_runs):
    assert_same_store(torchrun_runs["killed"], torchrun_runs["plain"])
    (event,) = restarted_events(torchrun_runs["killed"])
    assert event["step"] == 5 and event["data"]["failed_ranks"] == [1] and event["data"]["step"] == 5
    assert "rank 1 (pid" in event["text"] and "continues from step 5" in event["text"]
    with StoreReader(torchrun_runs["killed"]) as reader:
        assert reader.status()["state"] == "finished"


# ------------------------------------------------------------------ Ray: two nodes on this machine


@pytest.fixture(scope="module")
def ray_cluster():
    """`ray start --head` and a second node joining it, one CPU each; their process groups killed after."""
    pytest.importorskip("ray.train")
    ray = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    port = free_port()
    # Ray's socket paths live under its temp dir and must stay within 107 bytes: a short folder of its own
    temp = Path(tempfile.mkdtemp(prefix="gr-ray-", dir="/tmp"))
    common = ["--num-cpus=1", "--num-gpus=0", "--object-store-memory=100000000", "--block", "--disable-usage-stats"]
    nodes = [subprocess.Popen([ray, "start", "--head", f"--port={port}", "--include-dashboard=false",
                               f"--temp-dir={temp}", *common], env=ENV, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    address = f"127.0.0.1:{port}"
    try:
        deadline, status = time.monotonic() + 180, None
        while True:
            if time.monotonic() > deadline:
                pytest.fail(f"the Ray cluster did not start within 180 s: {status and status.stderr[-1500:]}")
            status = subprocess.run([ray, "status", f"--address={address}"], capture_output=True, text=True, env=ENV)
            if status.returncode == 0:
                if len(nodes) == 1:
                    nodes.append(subprocess.Popen([ray, "start", f"--address={address}", *common], env=ENV,
                                                  start_new_session=True, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL))
                elif "/2.0 CPU" in status.stdout:
                    break
            time.sleep(1)
        yield address
    finally:
        for node in reversed(nodes):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(node.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    node.wait(timeout=20)
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(temp, ignore_errors=True)


def ray_train(out: Path, dataset: Path, address: str, *sets: str, faults: str = "") -> None:
    cmd = train_cmd(out, dataset, *sets) + ["--ray", address, "--workers", "2"]
    result = subprocess.run(cmd, cwd=ROOT, env={**ENV, "GLASSROOM_FAULTS": faults}, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


@pytest.fixture(scope="module")
def ray_runs(tiny_dataset, ray_cluster, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ray-runs")
    ray_train(root / "plain", tiny_dataset, ray_cluster, *EP2)
    ray_train(root / "killed", tiny_dataset, ray_cluster, *EP2, "train.max_restarts=1", faults="kill@7:1")
    return {"plain": root / "plain", "killed": root / "killed"}


def test_two_ray_nodes_train_as_one_process(ray_runs, one_process):
    np.testing.assert_allclose(losses(ray_runs["plain"]), losses(one_process), rtol=1e-3)
    assert len(losses(ray_runs["plain"])) == 10


def test_a_worker_killed_mid_run_is_restarted_by_ray_train_and_the_store_is_the_uninterrupted_ones(ray_runs):
    assert_same_store(ray_runs["killed"], ray_runs["plain"])
    (event,) = restarted_events(ray_runs["killed"])
    assert event["step"] == 5 and event["data"]["failed_ranks"] == [1]


def test_a_pipeline_step_of_two_workers_trains_over_both_ray_nodes(ray_cluster, tiny_dataset, one_process, tmp_path):
    from glassroom.train.config import load_run_config

    config = load_run_config(TINY, [f"data.path={tiny_dataset}", *EP2]).to_dict()
    experiment = tmp_path / "exp.py"
    experiment.write_text(
        "from glassroom.pipeline import Resources, Step\n"
        "from glassroom.steps.ladder import train_rung\n"
        f"steps = [Step('rung', train_rung, {{'run': {config!r}}}, kind='rungs',\n"
        "              resources=Resources(cpus=1, workers=2))]\n")
    result = subprocess.run([sys.executable, "-m", "glassroom", "run", str(experiment), "--workspace",
                             str(tmp_path / "ws"), "--ray", ray_cluster], cwd=ROOT, env=ENV, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    (run,) = (tmp_path / "ws" / "rungs").glob("rung-*")
    np.testing.assert_allclose(losses(run), losses(one_process), rtol=1e-3)
    with StoreReader(run) as reader:
        start = next(e for e in reader.events() if e["kind"] == "start")
    assert "on 2 x cpu" in start["text"]  # two ranks, one per node


def test_gpus_the_cluster_does_not_have_are_refused_before_any_worker_starts(ray_cluster, tiny_dataset, tmp_path):
    out = tmp_path / "run"
    cmd = train_cmd(out, tiny_dataset, *EP2) + ["--ray", ray_cluster, "--workers", "2", "--gpus-per-worker", "1"]
    result = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "asks for 2 GPUs and the Ray cluster has 0" in result.stderr and not out.exists()
