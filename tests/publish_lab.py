"""A small lab that exercises every part of `glassroom publish`: a long run (series with tiles and
chunks), a short finished run, a run marked private, notes (one private), incidents, a preregistered
prediction, runs with a lineage base (a published one and the private one), and a ladder with a hero. Used by tests/web/test_publish_identical.py and by the before/after
check of a publish refactor (python tests/publish_lab.py manifest LAB SITE)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np

from glassroom.folders import OWNED
from glassroom.observe.incidents import open_incident, resolve_incident, update_incident
from glassroom.observe.store import StoreWriter
from web_helpers import write_prediction, write_run

# What in a site's bytes depends on when it was exported: the generation's name (g<ms>), site.json's
# and runs.json's "generated", and each run summary's "age_s" and "stale" (a running run not updated
# for a while; runs.json, meta.json). The comparison replaces those by constants and compares every
# other byte.
TIMED = re.compile(rb'"(generated|age_s|stale)": ?(-?[0-9.eE+-]+|true|false)')


def make_lab(root: Path, ladder: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    hero = write_run(root / "runs" / "hero", steps=2600, every=20, eval_every=250, spike_at=1200, state="finished")
    write_prediction(hero, 2600)
    with StoreWriter(hero) as w:
        w.event("note", "private: ask ops about node 7", 1210, {"private": True})
        w.event("note", "swapped shard 12 after the spike", 1220)
        w.event("checkpoint", "saved step_0002600", 2600, {"path": "step_0002600"})
    # A long probe series (tiles of width 8 in the site, and the live view from the store's tiles),
    # with a one-step spike and gaps (NaN).
    rng = np.random.default_rng(7)
    values = 3.0 + rng.normal(0, 0.05, 40_000)
    values[17_777] = 50.0
    values[30_000:30_040] = np.nan
    with StoreWriter(hero, flush_rows=100_000, flush_seconds=3600) as w:
        for step, value in enumerate(values.tolist()):
            w.log(step, {"probe/long": value}, when=1.7e9 + step)
    got = open_incident(hero, "loss spike at 1200", step=1200)
    update_incident(hero, got["incident"], "same shard as before")
    resolve_incident(hero, got["incident"], "shard 12 dropped")
    write_run(root / "runs" / "short", steps=150, every=50, eval_every=50, seed=1)
    scratch = write_run(root / "runs" / "scratch", steps=100, every=50, eval_every=50, seed=2)
    with StoreWriter(scratch) as w:
        w.set_artifact("visibility", {"private": True})
    # Runs fine-tuned from others (a lineage base): one from a published run, one from the private run
    # (named nowhere on the site).
    for name, base in (("sft", root / "runs" / "hero"), ("sft-private", scratch)):
        child = write_run(root / "runs" / name, steps=60, every=30, eval_every=30, seed=3)
        with StoreWriter(child) as w:
            w.set_artifact("lineage", {"base": str(base.resolve()), "base_step": 100, "base_kind": "run",
                                       "task": "sft", "data": "lab/data/chat"})
            w.event("note", f"started from {base.resolve()}", 1)
    if ladder:
        from glassroom.ladder.predict import backtest, make_prediction, preregister
        from ladder_helpers import write_ladder

        fit = root / "ladders" / "demo-fit"
        spec, rungs, hero_run = write_ladder(fit, noise=0.001, seed=0,
                                             spec_overrides={"fit": {"bootstrap": 40, "momentum": 0.999}})
        prediction = make_prediction(fit, hero_run.config)
        (fit / "prediction.json").write_text(json.dumps(prediction))
        (fit / "backtest.json").write_text(json.dumps(backtest(fit)))
        ladder_hero = root / "runs" / "ladder-hero"
        preregister(ladder_hero, prediction)
        with StoreWriter(ladder_hero) as w:
            for step, value in {100: 5.2, 200: 4.6, 300: 4.3}.items():
                w.log(step, {prediction["metric"]: value, "train/loss": value + 0.1})
    return root


def manifest(site: Path, generation: str) -> dict[str, str]:
    """sha256 of every file of the site, the export's times and generation name made constant (TIMED);
    the ownership manifest is left out (it holds the sha256 of the files with times)."""
    out = {}
    for path in sorted(site.rglob("*")):
        if path.is_file() and path.name != OWNED:
            rel = path.relative_to(site).as_posix().replace(generation, "GEN")
            body = TIMED.sub(rb'"\1":0', path.read_bytes().replace(generation.encode(), b"GEN"))
            out[rel] = hashlib.sha256(body).hexdigest()
    return out


if __name__ == "__main__":   # python tests/publish_lab.py manifest LAB SITE > manifest.json
    import time

    from glassroom.web.publish import publish

    lab, site = Path(sys.argv[2]), Path(sys.argv[3])
    if not lab.exists():
        make_lab(lab)
    shutil.rmtree(site, ignore_errors=True)
    started = time.perf_counter()
    got = publish(lab, site)
    took = time.perf_counter() - started
    print(json.dumps({"seconds": round(took, 3), "files": manifest(site, got["generation"])}, indent=1))
