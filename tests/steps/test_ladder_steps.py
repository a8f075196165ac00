"""`glassroom ladder run` on real text: rungs as cached pipeline steps, fit, a preregistered hero."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from glassroom.observe.store import StoreReader
from cli_helpers import glassroom_in_process
from train_helpers import ROOT
import pytest

SPEC = ROOT / "tests" / "configs" / "ladder-tiny.yaml"


def real_glassroom(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "glassroom", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)


def glassroom(*args) -> subprocess.CompletedProcess:
    """The command in this process (no torch import per call); `ladder run`'s steps still train in their own
    worker processes."""
    return glassroom_in_process(*args)


@pytest.fixture(scope="module")
def hero_ladder(tiny_dataset, tmp_path_factory):
    """`python -m glassroom ladder run SPEC --hero`, the whole pipeline in a real process: its folder, its result."""
    out = tmp_path_factory.mktemp("hero") / "ladder"
    return out, real_glassroom("ladder", "run", SPEC, "--out", out, "--data", tiny_dataset, "--hero")


@pytest.mark.slow
def test_ladder_run_trains_rungs_then_preregisters_and_trains_the_hero(tiny_dataset, hero_ladder):
    out, first = hero_ladder
    assert first.returncode == 0, first.stderr[-3000:]
    listing = json.loads((out / "ladder.json").read_text())["rungs"]
    assert len(listing) == 3 and all(name.startswith("rungs/") for name in listing)
    for rung in listing:
        with StoreReader(out / rung) as reader:
            assert reader.status()["state"] == "finished"
    hero = next((out / "runs").glob("hero-*"))
    with StoreReader(hero) as reader:
        prediction = reader.artifact("prediction")
        events = reader.events()
        assert reader.status()["state"] == "finished"
        assert reader.series("prediction/deviation")[0].size > 0
    assert prediction["metric"] == "eval/macro/loss" and len(prediction["rungs"]) == 3
    assert prediction["reliable"] == (not prediction["warnings"])
    # The seal was made before the hero's first step and the journal is intact.
    verify = glassroom("ladder", "verify", hero)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.startswith(f"sealed prediction intact: sha256 {prediction['seal']['digest']} made ")
    kinds = [e["kind"] for e in events]
    # Written before the hero trained a single step, and never again.
    assert kinds[0] == "prediction" and kinds.count("prediction") >= 1 and kinds[1] == "start"
    assert events[0]["time"] < events[1]["time"]
    fit = glassroom("ladder", "fit", out, "--json")
    assert fit.returncode == 0, fit.stderr
    backtest = json.loads(glassroom("ladder", "backtest", out, "--json").stdout)
    for key in ("predicted_loss", "actual_loss", "relative_error", "covered"):
        assert key in backtest
    # Running it again reuses every step; nothing retrains, the prediction is unchanged.
    again = glassroom("ladder", "run", SPEC, "--out", out, "--data", tiny_dataset, "--hero")
    assert again.returncode == 0 and "0 ran" in again.stderr and "5 reused" in again.stderr
    with StoreReader(hero) as reader:
        assert reader.artifact("prediction") == prediction


@pytest.mark.slow
def test_a_failed_fit_still_trains_the_hero_without_a_prediction(tiny_dataset, hero_ladder, tmp_path):
    import yaml

    raw = yaml.safe_load(SPEC.read_text())
    raw["fit"] = {**raw.get("fit", {}), "irreducible": 50.0}   # above every loss: no law can be fitted
    spec = tmp_path / "ladder.yaml"
    spec.write_text(yaml.safe_dump(raw))
    # The rungs (same configs, same data) are those of the ladder above, reused from its folder; the fit and
    # the hero are this spec's own (their outputs removed, so the globs below find only this run's).
    out = tmp_path / "ladder"
    shutil.copytree(hero_ladder[0], out)
    assert hero_ladder[1].returncode == 0, hero_ladder[1].stderr[-3000:]
    for folder in ("ladders", "runs"):
        shutil.rmtree(out / folder)
    run = glassroom("ladder", "run", spec, "--out", out, "--data", tiny_dataset, "--hero")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "no prediction: fit.irreducible 50 is not below" in run.stderr and "way forward:" in run.stderr
    assert "2 ran" in run.stderr and "3 reused" in run.stderr  # the rungs reused, the fit and the hero this spec's
    fit = next((out / "ladders").glob("*-fit-*"))
    assert not (fit / "prediction.json").exists()
    missing = json.loads((fit / "no-prediction.json").read_text())
    assert "fit.irreducible" in missing["reason"] and missing["metric"] == "eval/macro/loss"
    hero = next((out / "runs").glob("hero-*"))
    with StoreReader(hero) as reader:
        assert reader.status()["state"] == "finished" and reader.artifact("prediction") is None
        assert [e["kind"] for e in reader.events()][:2] == ["no_prediction", "start"]


def test_ladder_run_bad_input(tmp_path):
    missing = glassroom("ladder", "run", SPEC, "--out", tmp_path / "l", "--data", tmp_path / "nodata")
    assert missing.returncode == 2 and "not a built dataset" in missing.stderr
    assert not (tmp_path / "l").exists()
    bad = glassroom("ladder", "run", tmp_path / "none.yaml", "--out", tmp_path / "l")
    assert bad.returncode == 2 and "no such file" in bad.stderr


def test_ladder_run_builds_its_steps_from_one_read_and_they_are_the_written_experiments(tiny_dataset, tmp_path,
                                                                                        monkeypatch):
    """The command reads the spec once and runs the steps it built; the experiment file it writes for
    the steps' workers (and for reruns) gives the very same steps."""
    import glassroom.ladder.spec as spec_module
    from glassroom.pipeline.experiment import load_experiment
    from glassroom.steps.ladder import ladder_steps, write_experiment

    reads = []
    real = spec_module.load_yaml
    monkeypatch.setattr(spec_module, "load_yaml", lambda path: reads.append(path) or real(path))
    spec, raw = spec_module.read_spec(SPEC)
    rungs, later = ladder_steps(spec, raw, str(tiny_dataset), with_hero=True)
    built = write_experiment(tmp_path / "ladder", SPEC, str(tiny_dataset), True, rungs + later)
    assert reads == [SPEC]
    written = load_experiment(built.path)
    assert written.sha256 == built.sha256 and written.source == built.source
    ws = tmp_path / "ladder"
    # A step's output folder is named by the digest of its function, config and inputs: equal folders,
    # equal steps.
    assert [(n.name, n.output) for n in built.graph(ws)] == [(n.name, n.output) for n in written.graph(ws)]


@pytest.mark.parametrize("gib", [24, 40, 80, 141])
def test_each_rung_asks_for_the_fewest_gpus_its_memory_fits_in(gib):
    from glassroom.errors import GlassroomError
    from glassroom.ladder.spec import expand_seeds, read_spec
    from glassroom.model.accounting import Layout, memory_per_gpu
    from glassroom.steps.ladder import ladder_steps, workers_for
    from glassroom.train.config import run_config_from_mapping

    spec, raw = read_spec(ROOT / "experiments" / "ladder-story.yaml")
    rungs, hero = expand_seeds(spec)
    for run in [*rungs, hero]:
        cfg = run_config_from_mapping(run.config, run.name)
        tc, ep = cfg.train, cfg.train.expert_parallel

        def total(workers, cfg=cfg, tc=tc, ep=ep):
            return memory_per_gpu(cfg.model, Layout(dp=workers // ep, ep=ep, micro_batch=tc.micro_batch_size,
                                                    seq_len=tc.seq_len, precision=tc.precision,
                                                    activation_checkpointing=tc.activation_checkpointing))["bytes"]["total"]
        valid = [w for w in range(ep, tc.batch_size + 1, ep)
                 if tc.batch_size % w == 0 and (tc.batch_size // w) % tc.micro_batch_size == 0]
        fitting = [w for w in valid if total(w) <= gib * 2**30]
        if not fitting:
            with pytest.raises(GlassroomError, match=f"does not fit {gib} GiB per GPU"):
                workers_for(run.config, gib * 2**30)
            continue
        assert workers_for(run.config, gib * 2**30) == fitting[0]
    steps, later = ladder_steps(spec, raw, with_hero=True,
                                cluster={"gpus_per_worker": 1, "workers": 1, "gpu_memory": 10_000 * 2**30})
    assert all(s.resources.total_gpus == 1 for s in steps + later[1:])  # 10 TB fits every rung on one GPU


def test_ladder_run_cluster_options_are_checked_before_anything_runs(tiny_dataset, tmp_path):
    for args, message in ((["--workers", "2"], "go with --ray"), (["--cpus-per-worker", "2"], "go with --ray"), (["--ray", "local", "--gpus-per-worker", "2"],
                          "a worker trains on one GPU"), (["--ray", "local", "--gpu-memory", "80"],
                          "goes with --gpus-per-worker 1")):
        result = glassroom("ladder", "run", SPEC, "--out", tmp_path / "l", "--data", tiny_dataset, *args)
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr
        assert not (tmp_path / "l").exists()


def test_on_cpus_each_rung_gets_the_most_workers_its_batch_splits_over():
    from glassroom.ladder.spec import expand_seeds, read_spec
    from glassroom.steps.ladder import run_resources
    from glassroom.train.config import run_config_from_mapping

    spec, _ = read_spec(SPEC)
    rungs, hero = expand_seeds(spec)
    for run in [*rungs, hero]:
        tc = run_config_from_mapping(run.config, run.name).train
        for most in range(1, 6):
            res = run_resources(run.config, cpus=2, workers=most, cpus_per_worker=1)
            w = res.workers
            assert w <= most and tc.batch_size % w == 0 and (tc.batch_size // w) % tc.micro_batch_size == 0
            assert not any(tc.batch_size % v == 0 and (tc.batch_size // v) % tc.micro_batch_size == 0
                           for v in range(w + 1, most + 1))  # none larger up to `most` would split
            assert (res.cpus, res.procs) == ((2, 1) if w == 1 else (1, 1))
