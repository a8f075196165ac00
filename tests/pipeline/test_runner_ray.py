"""`glassroom run --ray local`: a local Ray on this machine's CPUs runs independent steps as tasks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")

EXAMPLE = Path(__file__).parent.parent.parent / "experiments" / "stdlib_tokens.py"


@pytest.mark.dist
def test_local_ray_runs_independent_steps_as_parallel_tasks(tmp_path):
    ws = tmp_path / "ws"
    env = {"GLASSROOM_RAY_OBJECT_STORE_MB": "100"}
    import os

    run = subprocess.run([sys.executable, "-m", "glassroom", "run", str(EXAMPLE), "--workspace", str(ws),
                          "--ray", "local"], capture_output=True, text=True, timeout=180, env={**os.environ, **env})
    assert run.returncode == 0, run.stderr
    assert "5 steps: 0 reused, 5 ran" in run.stderr
    status = {p.parent.name.rsplit("-", 1)[0]: json.loads(p.read_text()) for p in ws.glob("*/*/status.json")}
    assert set(status) == {"stdlib-files", "token-counts", "line-stats", "bpe-tokenizer", "stdlib-report"}
    assert all(s["state"] == "done" and s["executor"].startswith("ray:") for s in status.values())
    # the three steps that need only stdlib-files ran as Ray tasks at the same time (2 CPUs, 1 each)
    independent = [status[n] for n in ("token-counts", "line-stats", "bpe-tokenizer")]
    overlaps = [(a, b) for i, a in enumerate(independent) for b in independent[i + 1:]
                if a["started"] < b["finished"] and b["started"] < a["finished"]]
    assert overlaps, independent
    report = next((ws / "stats").glob("stdlib-report-*"))
    assert json.loads((report / "result.json").read_text())["tokens"] > 100_000

    again = subprocess.run([sys.executable, "-m", "glassroom", "run", str(EXAMPLE), "--workspace", str(ws),
                            "--dry-run"], capture_output=True, text=True, timeout=60)
    assert "5 steps (5 done, 0 to run" in again.stdout


def test_an_unreachable_ray_address_is_a_one_line_error(tmp_path):
    run = subprocess.run([sys.executable, "-m", "glassroom", "run", str(EXAMPLE), "--workspace", str(tmp_path / "ws"),
                          "--ray", "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [run.stderr.strip()] and "cannot reach a Ray cluster" in run.stderr
