"""The ladder folder on disk and the rungs read back from it.

Layout (what `glassroom ladder run` writes and `ladder fit` / `ladder backtest` read):

  DIR/spec.yaml              the ladder spec the rungs came from (optional: its fit: section
                             and param_count are used; defaults otherwise)
  DIR/ladder.json            optional: {"rungs": [paths relative to DIR]}, the current rungs (written
                             by `ladder run`, whose pipeline keeps older versions beside them)
  DIR/rungs/<name>/          one finished training run per rung, named by model_name (e.g. 1.1M):
      config.yaml            the resolved RunConfig (written by the trainer)
      store.sqlite           its run store: train/loss, train/lr, eval/<domain>/loss|bpb, eval/macro/...
      step.json              optional: the pipeline step's identity (its version is recorded)

A rung is finished when its metric has a value at train.steps.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import yaml

from glassroom.errors import GlassroomError

RUNGS_DIR = "rungs"
SPEC_FILE = "spec.yaml"
LISTING_FILE = "ladder.json"  # {"rungs": [run dirs]}: the current rungs when DIR/rungs/ holds old versions


def rung_dirs(ladder_dir: Path) -> list[Path]:
    """The rungs' run folders: those DIR/ladder.json lists (relative to DIR), else every DIR/rungs/*."""
    listing = ladder_dir / LISTING_FILE
    if listing.is_file():
        try:
            names = json.loads(listing.read_text())["rungs"]
        except (OSError, ValueError, KeyError, TypeError):
            raise GlassroomError(f"{listing}: unreadable; rerun `glassroom ladder run`") from None
        return [ladder_dir / name for name in names]
    return [p for p in sorted((ladder_dir / RUNGS_DIR).iterdir()) if p.is_dir()]


@dataclass
class RungData:
    name: str
    run_dir: Path
    config: dict  # the resolved RunConfig mapping
    total_params: int
    active_params: int
    params: int  # N as counted by the spec's param_count
    steps: int
    tokens_per_step: int
    tokens: int
    flops: float
    config_sha256: str
    version: Optional[str]

    def series(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        from glassroom.observe.store import StoreReader

        with StoreReader(self.run_dir) as reader:
            steps, values = reader.series(metric)
        keep = np.isfinite(values)
        return steps[keep], values[keep]

    def metrics(self) -> list[str]:
        from glassroom.observe.store import StoreReader

        with StoreReader(self.run_dir) as reader:
            return reader.names()

    def final(self, metric: str) -> float:
        steps, values = self.series(metric)
        if len(steps) == 0:
            raise GlassroomError(f"{self.run_dir}: no values of {metric}; is the metric name right?")
        if steps[-1] != self.steps:
            raise GlassroomError(f"{self.run_dir}: {metric} stops at step {steps[-1]} of {self.steps}; "
                                 "the rung has not finished (rerun `glassroom ladder run`)")
        return float(values[-1])

    def identity(self) -> dict:
        return {"name": self.name, "run_dir": str(self.run_dir), "config_sha256": self.config_sha256,
                "version": self.version, "params": self.params, "tokens": self.tokens, "flops": self.flops}


def read_spec_settings(ladder_dir: str | Path):
    """(FitSection, param_count) from DIR/spec.yaml, or the defaults when there is none."""
    from glassroom.ladder.spec import FitSection, load_spec

    path = Path(ladder_dir) / SPEC_FILE
    if not path.is_file():
        return FitSection(), "active"
    spec = load_spec(path)
    return spec.fit, spec.param_count


def load_rung(run_dir: Path, param_count: str = "active") -> RungData:
    from glassroom.model.accounting import count_params, flops_per_token
    from glassroom.train.config import run_config_from_mapping
    from glassroom.units import model_name

    config_path = run_dir / "config.yaml"
    if not config_path.is_file() or not (run_dir / "store.sqlite").is_file():
        raise GlassroomError(f"{run_dir}: not a rung (needs config.yaml and store.sqlite)")
    raw = yaml.safe_load(config_path.read_text())
    cfg = run_config_from_mapping(raw, str(config_path))
    counts = count_params(cfg.model)
    tc = cfg.train
    tokens_per_step = tc.batch_size * tc.seq_len
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)
    version = None
    step_file = run_dir / "step.json"
    if step_file.is_file():
        try:
            version = json.loads(step_file.read_text()).get("version")
        except (OSError, ValueError):
            version = None
    return RungData(
        name=model_name(counts.total, counts.active), run_dir=run_dir, config=raw, total_params=counts.total,
        active_params=counts.active, params=counts.active if param_count == "active" else counts.non_embedding_active,
        steps=tc.steps, tokens_per_step=tokens_per_step, tokens=tc.steps * tokens_per_step,
        flops=float(flops_per_token(cfg.model, tc.seq_len)) * tc.steps * tokens_per_step,
        config_sha256=hashlib.sha256(canonical.encode()).hexdigest(), version=version)


def load_rungs(ladder_dir: str | Path, param_count: Optional[str] = None) -> list[RungData]:
    """Every rung under DIR/rungs/, smallest compute first."""
    ladder_dir = Path(ladder_dir)
    if not ladder_dir.is_dir():
        raise GlassroomError(f"{ladder_dir}: no such ladder folder")
    root = ladder_dir / RUNGS_DIR
    if not root.is_dir() and not (ladder_dir / LISTING_FILE).is_file():
        raise GlassroomError(f"{ladder_dir}: no {RUNGS_DIR}/ folder; run `glassroom ladder run SPEC --out {ladder_dir}` first")
    if param_count is None:
        param_count = read_spec_settings(ladder_dir)[1]
    rungs = [load_rung(p, param_count) for p in rung_dirs(ladder_dir)]
    if len(rungs) < 2:
        raise GlassroomError(f"{root}: {len(rungs)} rung(s); a fit needs at least two finished rungs")
    return sorted(rungs, key=lambda r: r.flops)
