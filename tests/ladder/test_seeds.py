"""Repeated rungs (the spec's `seeds: K`): the spec and plan, the pipeline's steps, a real tiny ladder
with two seeds per rung fitted, backtested and predicted with the noise measured from its seeds, and a
copied rung (same size, same seed) still refused."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from glassroom.errors import GlassroomError
from glassroom.ladder.plan import format_plan, plan_ladder
from glassroom.ladder.spec import expand, expand_seeds, spec_from_mapping
from cli_helpers import glassroom_in_process
from ladder_helpers import ROOT, write_ladder

SPEC = ROOT / "tests" / "configs" / "ladder-tiny.yaml"
SIZES = ["69.7K", "117K", "164K"]  # the tiny spec's rungs


def seeded(seeds) -> dict:
    raw = yaml.safe_load(SPEC.read_text())
    raw["seeds"] = seeds
    return raw


def real_glassroom(*args):
    """`python -m glassroom ARGS`: a real process, for one check per command that the one-line error and exit
    code 2 arrive through the interpreter."""
    return subprocess.run([sys.executable, "-m", "glassroom", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def glassroom(*args):
    """The same command in this process (no torch import per call): exit code, stdout, stderr (and warnings)."""
    return glassroom_in_process(*args)


def test_seed_k_trains_with_base_seed_plus_k_and_seed_0_is_the_rung_as_before():
    raw = seeded(3)
    raw["base"]["train"]["seed"] = 7
    spec = spec_from_mapping(raw)
    rungs, _ = expand(spec)
    runs, hero = expand_seeds(spec)
    assert [r.name for r in runs] == [f"{n}{s}" for n in SIZES for s in ("", "-s1", "-s2")]
    assert [r.config["train"]["seed"] for r in runs] == [7, 8, 9] * 3
    assert [r.seed for r in runs] == [0, 1, 2] * 3 and [r.size for r in runs] == [n for n in SIZES for _ in range(3)]
    for i, rung in enumerate(rungs):
        assert runs[3 * i].config == rung.config  # seed 0: exactly the rung (same name, config, cache)
        for run in runs[3 * i + 1:3 * i + 3]:  # the others differ in train.seed only
            other = copy.deepcopy(run.config)
            other["train"]["seed"] = 7
            assert other == rung.config and run.flops == rung.flops and run.params == rung.params
    assert hero.config == expand(spec)[1].config
    # No seeds key (or seeds: 1): the runs are the rungs, names and configs unchanged.
    plain = spec_from_mapping(yaml.safe_load(SPEC.read_text()))
    assert [(r.name, r.config) for r in expand_seeds(plain)[0]] == [(r.name, r.config) for r in expand(plain)[0]]
    assert "seed" not in expand_seeds(plain)[0][0].config["train"]
    # One count per rung.
    runs, _ = expand_seeds(spec_from_mapping(seeded([1, 2, 1])))
    assert [r.name for r in runs] == ["69.7K", "117K", "117K-s1", "164K"]
    assert [r.config["train"].get("seed") for r in runs] == [None, None, 1, None]


def test_plan_shows_the_seeds_and_counts_every_seed_in_the_total():
    one = plan_ladder(spec_from_mapping(seeded(1)), cpu_flops=1e11)
    report = plan_ladder(spec_from_mapping(seeded([2, 2, 3])), cpu_flops=1e11)
    rows = report["rungs"]
    assert [r["seeds"] for r in rows] == [2, 2, 3] and rows[2]["train_seeds"] == [0, 1, 2]
    assert rows[2]["runs"] == ["164K", "164K-s1", "164K-s2"] and report["runs"] == 7
    assert [r["flops"] for r in rows] == [r["flops"] for r in one["rungs"]]  # a row's FLOPs: one run's
    assert report["ladder_flops"] == pytest.approx(sum(k * r["flops"] for k, r in zip([2, 2, 3], rows)))
    assert report["ladder_share_of_hero"] == pytest.approx(report["ladder_flops"] / report["hero"]["flops"])
    assert one["ladder_flops"] == pytest.approx(sum(r["flops"] for r in one["rungs"]))
    text = format_plan(report)
    assert "3 rungs (7 runs with their seeds)" in text and "rungs together (every seed)" in text
    assert "seeds" not in format_plan(one).splitlines()[1]  # no seeds column when every rung runs once


WHOLE = "runs per rung must be a whole number from 1 to 1000"


BAD_SEEDS = [
    (0, f"seeds: {WHOLE} (or a list of those, one per rung), got 0"),
    ("two", f"seeds: {WHOLE} (or a list of those, one per rung), got 'two'"),
    (2.5, f"seeds: {WHOLE} (or a list of those, one per rung), got 2.5"),
    (True, f"seeds: {WHOLE} (or a list of those, one per rung), got True"),
    ({"all": 2}, f"seeds: {WHOLE}"),
    ([1, 2], "seeds: 2 counts for 3 rungs"),
    ([1, 0, 1], f"seeds[1]: {WHOLE} (or a list of those, one per rung), got 0"),
    ([1, "x", 1], f"seeds[1]: {WHOLE} (or a list of those, one per rung), got 'x'"),
]


@pytest.mark.parametrize("seeds, message", BAD_SEEDS)
def test_bad_seeds_are_one_line_errors(tmp_path, seeds, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(seeded(seeds)))
    run = real_glassroom if message == BAD_SEEDS[0][1] else glassroom  # one case through `python -m glassroom`
    result = run("ladder", "plan", path, "--cpu-flops", "1e11")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr


def test_the_pipeline_trains_every_seed_before_the_fit():
    from glassroom.steps.ladder import ladder_steps

    raw = seeded(2)
    rung_steps, (fit, hero) = ladder_steps(spec_from_mapping(raw), raw, with_hero=True)
    names = [s.name for s in rung_steps]
    assert names == [f"{n}{s}" for n in SIZES for s in ("", "-s1")]
    assert sorted(i.step_name for i in fit.config["rungs"]) == sorted(names)  # the fit waits for every seed
    plain_raw = yaml.safe_load(SPEC.read_text())
    plain, _ = ladder_steps(spec_from_mapping(plain_raw), plain_raw, with_hero=False)
    # Seed 0's steps are today's steps: same names and configs, so a finished ladder's rungs are reused.
    assert [(s.name, s.config) for s in plain] == [(s.name, s.config) for s in rung_steps[::2]]


# ---- a real tiny ladder with two seeds per rung ----


@pytest.fixture(scope="module")
def seeded_ladder(tiny_dataset, tmp_path_factory):
    """The tiny spec with seeds: 2, each run trained for real (in this process, as a rung step trains it)
    into DIR/rungs/<step name>/, and DIR/spec.yaml + ladder.json as `ladder run` writes them."""
    from glassroom.steps.ladder import write_ladder_folder
    from glassroom.train.config import run_config_from_mapping
    from glassroom.train.trainer import Trainer

    out = tmp_path_factory.mktemp("seeded")
    raw = seeded(2)
    raw["base"]["data"]["path"] = str(tiny_dataset)
    runs, hero = expand_seeds(spec_from_mapping(raw))
    folders = []
    for run in runs:
        folder = out / "rungs" / run.name
        Trainer(run_config_from_mapping(copy.deepcopy(run.config), run.name), folder, quiet=True).run()
        folders.append(folder)
    write_ladder_folder(out, raw, folders)
    return out, hero


def pooled_sd(finals: list[list[float]]) -> float:
    logs = [np.log(v) for v in finals]
    return float(np.sqrt(sum(((x - x.mean()) ** 2).sum() for x in logs) / sum(len(x) - 1 for x in logs)))


@pytest.mark.slow
def test_fit_measures_the_noise_from_the_seeds(seeded_ladder):
    from glassroom.ladder.report import fit_report, format_fit
    from glassroom.ladder.rungs import group_sizes, load_rungs

    out, _ = seeded_ladder
    rungs = load_rungs(out)
    groups = group_sizes(rungs)
    assert [[r.seed for r in g] for g in groups] == [[0, 1]] * 3 and [g[0].name for g in groups] == SIZES
    finals = [[r.final("eval/macro/loss") for r in g] for g in groups]
    assert all(a != b for a, b in finals)  # the seeds really differ
    report = fit_report(out)
    noise = report["noise"]
    assert noise["source"] == "measured" and noise["dof"] == 3 and noise["sizes"] == 3
    assert noise["sigma"] == pytest.approx(pooled_sd(finals), rel=1e-9)
    assert [(r["name"], r["seed"]) for r in report["rungs"]] == [(n, s) for n in SIZES for s in (0, 1)]
    assert [s["finals"] for s in report["sizes"]] == finals
    main = report["compute"]["eval/macro/loss"]
    assert main["n_points"] == 6 and main["noise"] == noise  # every seed is a point of the L(C) fit
    # Leaving out the largest size leaves 2 sizes for 3 parameters: no leave-largest-out (as with 3 rungs),
    # although 4 runs remain.
    assert main["leave_largest_out"] is None
    assert report["curve"]["n_points"] > 6  # every seed's curve
    text = format_fit(report)
    assert "3 sizes (6 runs)" in text and "measured from the seeds of 3 size(s) (3 dof)" in text
    assert f"mean {np.mean(finals[0]):.4f} of 2 seeds" in text


@pytest.mark.slow
def test_backtest_holds_out_every_seed_of_the_largest_size_and_compares_their_mean(seeded_ladder):
    from glassroom.ladder.predict import backtest
    from glassroom.ladder.rungs import group_sizes, load_rungs

    out, _ = seeded_ladder
    groups = group_sizes(load_rungs(out))
    held = [r.final("eval/macro/loss") for r in groups[-1]]
    result = backtest(out)
    assert result["held_out"] == "164K" and result["fitted_on"] == SIZES[:2] and result["seeds"] == 2
    assert [(r["seed"], r["actual_loss"]) for r in result["held_out_runs"]] == [(0, held[0]), (1, held[1])]
    assert result["actual_loss"] == pytest.approx(np.mean(held))
    assert result["relative_error"] == pytest.approx(result["predicted_loss"] / np.mean(held) - 1)
    lo, hi = result["interval"]
    assert result["covered"] == (lo <= np.mean(held) <= hi)
    # The noise comes from the fitted sizes only: the held-out seeds are not looked at before comparing.
    fitted = [[r.final("eval/macro/loss") for r in g] for g in groups[:2]]
    assert result["noise"]["source"] == "measured" and result["noise"]["dof"] == 2
    assert result["noise"]["sigma"] == pytest.approx(pooled_sd(fitted), rel=1e-9)
    assert result["endpoint_check"] is None  # L(C) on 2 sizes has too few for E, A, alpha


@pytest.mark.slow
def test_the_prediction_records_the_measured_noise(seeded_ladder):
    from glassroom.ladder.predict import make_prediction

    out, hero = seeded_ladder
    prediction = make_prediction(out, hero.config)
    noise = prediction["noise"]
    assert noise["source"] == "measured" and noise["dof"] == 3
    assert f"{noise['sigma']:.3g} (log loss, measured from the seeds of 3 size(s), 3 dof" in prediction["band"]
    assert len(prediction["rungs"]) == 6 and {r["seed"] for r in prediction["rungs"]} == {0, 1}
    assert [len(s["finals"]) for s in prediction["sizes"]] == [2, 2, 2]
    lo, hi = prediction["final_interval"]
    assert lo < prediction["final_loss"] < hi
    assert prediction["endpoint_check"]["law"]["n_points"] == 6
    json.dumps(prediction, allow_nan=False)


@pytest.mark.slow
def test_the_ladder_page_lists_each_size_with_its_seeds(seeded_ladder):
    from glassroom.web.ladder_view import ladder_view

    out, _ = seeded_ladder
    view = ladder_view("seeded", out, out)
    assert [g["name"] for g in view["sizes"]] == SIZES and all(g["seeds"] == [0, 1] for g in view["sizes"])
    for g in view["sizes"]:
        assert g["mean"] == pytest.approx(np.mean(g["finals"])) and g["min"] <= g["mean"] <= g["max"]
    assert view["noise"]["source"] == "measured" and view["noise"]["dof"] == 3
    assert sorted((r["name"], r["seed"]) for r in view["rungs"]) == sorted((n, s) for n in SIZES for s in (0, 1))


def test_leave_largest_size_out_holds_out_every_seed_of_the_largest_size():
    from glassroom.ladder.fit import fit_endpoints, leave_largest_out, predict_interval
    from glassroom.ladder.predict import leave_largest_size_out

    rng = np.random.default_rng(0)
    C = np.repeat(np.logspace(18, 21, 4), 2)  # 4 sizes, 2 seeds each
    loss = (1.8 + 400 * C ** -0.15) * np.exp(rng.normal(0, 0.003, len(C)))
    result = leave_largest_size_out(C, loss, None, 30, 0.003, 0.9, 0)
    assert result["actual_losses"] == loss[-2:].tolist() and result["actual_loss"] == pytest.approx(loss[-2:].mean())
    fit = fit_endpoints(C[:-2], loss[:-2], None, 30, 0.003, 0.9, 0)  # fitted without either seed of 1e21
    assert result["predicted_loss"] == pytest.approx(float(predict_interval(fit, {"C": [1e21]}, 0.9)[0][0]))
    assert result["relative_error"] == pytest.approx(result["predicted_loss"] / loss[-2:].mean() - 1)
    # One run per size: the same numbers as fit.leave_largest_out.
    single = leave_largest_size_out(C[::2], loss[::2], None, 30, 0.003, 0.9, 0)
    plain = leave_largest_out(C[::2], loss[::2], None, 30, 0.003, 0.9, 0)
    assert {k: single[k] for k in plain if k != "fit"} == {k: v for k, v in plain.items() if k != "fit"}
    assert leave_largest_size_out(C[:6], loss[:6]) is None  # 2 sizes left for 3 parameters


# ---- copies ----


@pytest.mark.slow
def test_a_copied_rung_is_refused_and_a_second_seed_of_one_size_is_not(tmp_path):
    from glassroom.ladder.report import fit_report
    from glassroom.ladder.rungs import check_rungs, load_rungs

    write_ladder(tmp_path, spec_overrides={"fit": {"bootstrap": 20}})
    largest = max(load_rungs(tmp_path), key=lambda r: r.flops).run_dir
    copy_dir = tmp_path / "rungs" / "copy"
    shutil.copytree(largest, copy_dir)
    with pytest.raises(GlassroomError, match=r"same compute .* and the same seed \(0\): a copy, not a second seed"):
        check_rungs(load_rungs(tmp_path), "eval/macro/loss")
    result = glassroom("ladder", "fit", tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "same seed (0)" in lines[0]
    # The copy given another train.seed is a second seed of that size: fitted, but its finals are the
    # same as the original's (an edited copy), which is said and makes the fit unreliable.
    config = yaml.safe_load((copy_dir / "config.yaml").read_text())
    config["train"]["seed"] = 1
    (copy_dir / "config.yaml").write_text(yaml.safe_dump(config))
    report = fit_report(tmp_path)
    assert report["noise"]["source"] == "measured" and report["noise"]["dof"] == 1 and report["noise"]["sigma"] == 0
    assert not report["reliable"] and any("end at exactly the same" in w for w in report["warnings"])
    # Two runs of one size are no ladder.
    for folder in (tmp_path / "rungs").iterdir():
        if folder not in (largest, copy_dir):
            shutil.rmtree(folder)
    with pytest.raises(GlassroomError, match="a fit needs at least two sizes"):
        check_rungs(load_rungs(tmp_path), "eval/macro/loss")
