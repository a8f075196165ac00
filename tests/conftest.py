"""Fixtures shared across test files: the tiny real dataset, built once per session."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The helpers (web_helpers, train_helpers, ...) live in tests/ and are imported by bare name from
# every subfolder: put tests/ on sys.path whatever pytest's import mode.
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Several workers share the cores: each gets one thread (and so does every process it starts),
    # since torch's threads spin and two workers of two threads on two cores slow each other down.
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """experiments/data-tiny.yaml built into a temporary folder (KJV prose, Python docs, stdlib code)."""
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe

    out = tmp_path_factory.mktemp("data") / "tiny"
    build_dataset(load_recipe(ROOT / "experiments" / "data-tiny.yaml"), out, workers=2, log=io.StringIO())
    return out


@pytest.fixture(scope="module")
def server(lab):
    """`glassroom serve` over the module's `lab` fixture (a folder of runs) on 127.0.0.1."""
    from web_helpers import Server

    with Server(lab) as s:
        yield s


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium at 1440 x 1000, shared by a module's tests."""
    from web_helpers import Chromium

    with Chromium(width=1440, height=1000) as c:
        yield c


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` are skipped, with the reason, on a machine without CUDA."""
    gpu_tests = [item for item in items if "gpu" in item.keywords]
    if not gpu_tests:
        return
    import torch  # only when some test is marked gpu

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
        for item in gpu_tests:
            item.add_marker(skip)


def pytest_configure(config):
    """Markers besides `slow` (pyproject.toml): select with -m, e.g. -m "not browser and not dist"."""
    for line in (
        'browser: starts headless Chromium (web_helpers.Chromium, the `browser` fixture)',
        'dist: starts several processes (torchrun / torch.distributed.run on gloo, a local Ray cluster)',
        'gpu: needs a CUDA device',
    ):
        config.addinivalue_line("markers", line)
