"""`glassroom data build --ray`: a build on a local Ray equals the local build byte for byte (every
file but build.json); a Ray address nobody serves is one error line, exit 2, DIR untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from data_helpers import error_line, make_corpus, run_cli, write_recipe
from glassroom.folders import OWNED

ROOT = Path(__file__).resolve().parent.parent.parent
pytest.importorskip("ray")


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in ("build.json", OWNED)}


def glassroom(*args, timeout=900) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0", GLASSROOM_RAY_OBJECT_STORE_MB="96",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "glassroom", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


@pytest.mark.dist
def test_ray_build_is_byte_identical_to_the_local_build(tmp_path):
    make_corpus(tmp_path / "corpus")
    recipe = write_recipe(tmp_path / "corpus")
    local = glassroom("data", "build", recipe, "--out", tmp_path / "local", "--workers", "2", "--progress-every", "1000")
    assert local.returncode == 0, local.stderr[-2000:]
    on_ray = glassroom("data", "build", recipe, "--out", tmp_path / "ray", "--ray", "local", "--progress-every", "1000")
    assert on_ray.returncode == 0, on_ray.stderr[-2000:]
    assert "on ray:local" in on_ray.stdout
    a, b = tree(tmp_path / "local"), tree(tmp_path / "ray")
    assert sorted(a) == sorted(b)
    for must in ("manifest.json", "stats.json", "tokenizer.json", "removed/duplicates.jsonl",
                 "shards/email/train.bin", "shards/email/train.idx.npz", "shards/web/validation.ids.txt"):
        assert must in a
    assert [name for name in a if a[name] != b[name]] == []
    info = json.loads((tmp_path / "ray" / "build.json").read_text())
    assert info["executor"] == "ray:local" and info["workers"] >= 1
    assert json.loads((tmp_path / "local" / "build.json").read_text())["executor"] == "local"
    assert not list(tmp_path.glob(".ray.*")) and not list(tmp_path.glob(".local.*"))


def test_an_unreachable_ray_address_is_one_line_and_leaves_dir_alone(tmp_path, capsys):
    make_corpus(tmp_path / "corpus")
    recipe = write_recipe(tmp_path / "corpus")
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = run_cli(["data", "build", recipe, "--out", out, "--ray", "127.0.0.1:9"], capsys)
    assert code == 2 and "--ray 127.0.0.1:9: cannot reach a Ray cluster there" in error_line(err)
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "out"]
    code, _, err = run_cli(["data", "build", recipe, "--out", out, "--ray", "local", "--workers", "2"], capsys)
    assert code == 2 and "--workers and --ray: give one" in error_line(err)
    code, _, err = run_cli(["data", "build", recipe, "--out", out, "--ray", " "], capsys)
    assert code == 2 and "--ray: give `local` or a cluster address" in error_line(err)


def test_ray_not_installed_is_one_line(tmp_path, capsys, monkeypatch):
    make_corpus(tmp_path / "corpus")
    recipe = write_recipe(tmp_path / "corpus")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code, _, err = run_cli(["data", "build", recipe, "--out", tmp_path / "out", "--ray", "local"], capsys)
    assert code == 2 and "--ray needs Ray, an optional extra: pip install -e '.[ray]'" in error_line(err)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


@pytest.mark.dist
def test_a_ray_build_killed_midway_leaves_dir_as_it_was(tmp_path):
    """SIGKILL to the build (its whole session: driver, Ray, workers) while it writes the build folder:
    DIR keeps its old files, the lock is free, and the next build clears what was left."""
    import io
    import signal
    import time

    from glassroom.data.staging import clear_stale, build_lock

    make_corpus(tmp_path / "corpus")
    recipe = write_recipe(tmp_path / "corpus")
    out = tmp_path / "out"
    first = subprocess.run([sys.executable, "-m", "glassroom", "data", "build", str(recipe), "--out", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr  # the previous dataset, which --force may replace
    old = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0", GLASSROOM_RAY_OBJECT_STORE_MB="96",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "glassroom", "data", "build", str(recipe), "--out", str(out),
                             "--force", "--ray", "local"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if any((p / "staging").is_dir() and any((p / "staging").iterdir()) for p in tmp_path.glob(".out.building-*")):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the build ended before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == old
    assert list(tmp_path.glob(".out.building-*")), "the kill came too late to test anything"
    with build_lock(out.resolve()):  # no orphan holds the lock
        log = io.StringIO()
        clear_stale(out.resolve(), log)
    assert not list(tmp_path.glob(".out.building-*")) and "did not finish" in log.getvalue()
