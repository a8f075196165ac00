"""Helpers for the ladder tests: fake-but-real ladder folders whose rungs' losses follow a known law.

Each rung is a real run folder (config.yaml from the spec's expansion, store.sqlite written with
StoreWriter); its eval losses come from the curve law of glassroom.ladder.predict with the TRUTH
parameters below, times exp(noise), noise ~ N(0, sigma) per point plus one offset per rung.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import yaml

from glassroom.ladder.fit import evaluate
from glassroom.ladder.predict import CURVE_LAW, curve_features, lr_multipliers
from glassroom.observe.store import StoreWriter

ROOT = Path(__file__).resolve().parents[1]
DEMO_SPEC = ROOT / "experiments" / "ladder-demo.yaml"
# With the demo spec: N (non-embedding active parameters) 2e4 .. 2.6e5, S1 tokens 2e5 .. 2.6e6, S2 steps.
TRUTH = {"E": 2.0, "B": 30.0, "beta": 0.3, "A": 20.0, "alpha": 0.2, "C": 2e-4}
DOMAINS = {"prose": 1.05, "code": 0.85, "docs": 0.95}  # each domain's loss = factor * law


def true_curve(params: float, train: dict, tokens_per_step: int, steps, momentum: float = 0.999) -> np.ndarray:
    X = curve_features(params, tokens_per_step, lr_multipliers(train), np.asarray(steps), momentum)
    return evaluate(CURVE_LAW, TRUTH, X)


def write_rung(run_dir: Path, run, noise: float, rng: np.random.Generator, momentum: float = 0.999) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(run.config, sort_keys=False))
    train = run.config["train"]
    steps = np.arange(train["eval_every"], train["steps"] + 1, train["eval_every"])
    steps = np.unique(np.r_[steps, train["steps"]])
    tokens_per_step = train["batch_size"] * train["seq_len"]
    clean = true_curve(run.params, train, tokens_per_step, steps, momentum)
    offset = rng.normal(0, noise)
    with StoreWriter(run_dir) as w:
        m = lr_multipliers(train)
        for s in range(1, train["steps"] + 1):
            w.log(s, {"train/lr": train["lr"] * m[s - 1]})
        for s, value in zip(steps, clean):
            loss = value * np.exp(offset + rng.normal(0, noise))
            row = {"eval/macro/loss": loss, "eval/macro/bpb": loss * 0.4}
            for d, f in DOMAINS.items():
                row[f"eval/{d}/loss"] = loss * f
                row[f"eval/{d}/bpb"] = loss * f * 0.4
            w.log(int(s), row)


def write_ladder(out: Path, spec_path: Path = DEMO_SPEC, noise: float = 0.001, seed: int = 0,
                 schedules: tuple[str, ...] = ("cosine",), spec_overrides: dict | None = None):
    """DIR/spec.yaml + DIR/rungs/<name>/ from the spec; rung i trains with schedules[i % len]."""
    from glassroom.ladder.spec import expand, spec_from_mapping

    raw = yaml.safe_load(Path(spec_path).read_text())
    for key, value in (spec_overrides or {}).items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    spec = spec_from_mapping(raw)
    rungs, hero = expand(spec)
    rng = np.random.default_rng(seed)
    written = []
    for i, run in enumerate(rungs):
        run = copy.deepcopy(run)
        run.config["train"]["schedule"] = schedules[i % len(schedules)]
        write_rung(out / "rungs" / run.name, run, noise, rng, spec.fit.momentum)
        written.append(run)
    return spec, written, hero
