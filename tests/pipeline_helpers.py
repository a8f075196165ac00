"""Shared by the tests/test_pipeline_*.py files: a counting experiment written into tmp_path, and
ways to run `glassroom` in this process or as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from glassroom.cli import main

HEADER = '''
import json, os, time
from pathlib import Path
from glassroom.pipeline import Resources, Step, output_of

COUNTS = Path({counts!r})


def work(ctx):
    """Count the call, optionally fail or sleep, add up the inputs' values plus `add`."""
    with open(COUNTS / ctx.name, "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    cfg = ctx.config
    if cfg.get("fail_if") and Path(cfg["fail_if"]).exists():
        raise RuntimeError("asked to fail by " + cfg["fail_if"])
    steps = int(cfg.get("sleep", 0) / 0.05)
    for i in range(steps):
        time.sleep(0.05)
        ctx.progress(i + 1, steps, unit="ticks")
    total = sum(json.loads(Path(v).read_text())["value"] for k, v in cfg.items() if k.startswith("in_"))
    ctx.write_json("value.json", {{"value": total + cfg.get("add", 1)}})
    return {{"value": total + cfg.get("add", 1)}}
'''


def write_experiment(tmp_path: Path, body: str, name: str = "exp.py") -> Path:
    counts = tmp_path / "counts"
    counts.mkdir(exist_ok=True)
    path = tmp_path / name
    path.write_text(HEADER.format(counts=str(counts)) + "\n" + textwrap.dedent(body))
    return path


def calls(tmp_path: Path, step: str) -> int:
    f = tmp_path / "counts" / step
    return len(f.read_text().splitlines()) if f.exists() else 0


def glassroom(*args: str, capsys=None) -> tuple[int, str, str]:
    """`glassroom ARGS` in this process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    if capsys is None:
        return code, "", ""
    out = capsys.readouterr()
    return code, out.out, out.err


def glassroom_process(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "glassroom", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, **kw)
