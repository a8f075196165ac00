"""An installed glassroom (a wheel, not the checkout) carries what its commands read: the demo's
experiment files and the dashboard's frontend."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_carries_the_experiments_and_the_demo_finds_them_outside_the_checkout(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("glassroom-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in sorted((ROOT / "experiments").glob("*")):
        if f.suffix in (".yaml", ".py"):
            assert f"glassroom/experiments/{f.name}" in names, f"{f.name} is not in the wheel"
    assert "glassroom/web/frontend/vendor/uPlot.iife.min.js" in names or any(
        n.startswith("glassroom/web/frontend/vendor/") for n in names)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # From the unpacked wheel, in a folder with no experiments/ beside it: the demo's steps load.
    probe = ("from glassroom.demo import EXPERIMENTS, demo_steps; import glassroom; "
             "assert str(EXPERIMENTS).startswith(glassroom.__path__[0]), EXPERIMENTS; "
             "print(len(demo_steps()), EXPERIMENTS)")
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert ran.returncode == 0, ran.stderr[-2000:]
    count, where = ran.stdout.split()
    assert int(count) >= 10 and where.startswith(str(site))
