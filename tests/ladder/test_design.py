"""`glassroom ladder design`: candidates planned by the spec's rules, the cheapest ladder meeting the target,
an announced error that independent fits reproduce (calibration), and one-line refusals of bad input."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from glassroom.cli import OneLineErrorParser
from glassroom.commands.ladder_design import register_design
from glassroom.errors import GlassroomError
from glassroom.ladder import design as D
from glassroom.ladder.foresight import Point, fit_points
from glassroom.ladder.spec import expand, load_spec
from glassroom.ladder.synthetic import TRUTHS, truth_loss

DEMO = "experiments/ladder-demo.yaml"
SIMS = 60


def cli(argv: list[str]) -> int:
    """The design subcommand as the CLI runs it: GlassroomError -> exit 2 (glassroom/cli.py)."""
    parser = OneLineErrorParser(prog="glassroom ladder")
    register_design(parser.add_subparsers(parser_class=OneLineErrorParser))
    args = parser.parse_args(["design", *argv])
    return args.run(args)


@pytest.fixture(scope="module")
def spec():
    return load_spec(DEMO)


@pytest.fixture(scope="module")
def report(spec):
    return D.design(spec, target=0.012, budget=1.0, law="chinchilla", simulations=SIMS, seed=1)


def test_fraction_parsing():
    assert D.parse_fraction("0.5%", "--x") == pytest.approx(0.005)
    assert D.parse_fraction("0.005", "--x") == pytest.approx(0.005)
    for bad in ("abc", "nan", "inf", "", "%"):
        with pytest.raises(GlassroomError, match="--x"):
            D.parse_fraction(bad, "--x")


def test_candidates_are_what_ladder_run_would_train(spec):
    cands, hero, values = D.candidates(spec, domains=1, eval_noise=0.0)
    _, spec_hero = expand(spec)
    assert hero.flops == spec_hero.flops and all(v < hero.dial for v in values)
    assert all(v % spec.shape.head_dim == 0 for v in values)
    for c in cands[:: max(1, len(cands) // 10)]:
        runs, _ = expand(dataclasses.replace(spec, rungs=list(c.dials)))
        assert [r.flops for r in c.runs] == [r.flops for r in runs]
        assert c.train_flops == pytest.approx(c.seeds * sum(r.flops for r in runs))
        assert c.cost == pytest.approx((c.train_flops + c.eval_flops) / hero.flops)
        assert c.eval_flops > 0
    costs = [c.cost for c in cands]
    assert costs == sorted(costs)
    own = [r.dial for r in expand(spec)[0]]
    assert any(list(c.dials) == own and c.seeds == 1 for c in cands)  # the spec's own ladder is a candidate
    assert {c.seeds for c in cands} == {1, 2, 3, 4} and {c.evals for c in cands} == {1}


def test_recommends_the_cheapest_meeting_target_within_budget(report):
    rec = report["recommended"]
    assert rec is not None
    assert rec["result"]["confirmed"]["median"] <= report["target_error"]
    assert rec["cost_fraction"] <= report["budget"]
    cheaper = [c for c in report["all"] if c["cost_fraction"] < rec["cost_fraction"]]
    # every cheaper candidate missed the target in the search (or its confirmation)
    for c in cheaper:
        missed = c["result"]["search"]["median"] > report["target_error"]
        confirmed = c["result"].get("confirmed")
        assert missed or (confirmed and confirmed["median"] > report["target_error"])
    assert rec["spec_lines"][:2] == [f"rungs: [{', '.join(map(str, rec['rungs']))}]", f"seeds: {rec['seeds']}"]
    lo, hi = rec["result"]["confirmed"]["median_interval"]
    assert lo <= rec["result"]["confirmed"]["median"] <= hi


def independent_median(spec, rec: dict, law: str, scale: float, noise: float, ladders: int, seed: int) -> float:
    """Median |error| of the real fitter (foresight.fit_points) on fresh ladders of the recommendation."""
    runs, hero = expand(dataclasses.replace(spec, rungs=rec["rungs"]))
    truth = TRUTHS[law]
    true_hero = float(truth_loss(truth, hero.params * scale, hero.tokens * scale))
    rng = np.random.default_rng(seed)
    errors = []
    for _ in range(ladders):
        points = [Point(f"{r.name}-{k}", float(r.params), float(r.tokens), float(r.flops),
                        float(truth_loss(truth, r.params * scale, r.tokens * scale)) * math.exp(rng.normal(0, noise)),
                        seed=k)
                  for r in runs for k in range(rec["seeds"])]
        fit = fit_points(points, stated_noise=noise, bootstrap=0)
        errors.append(abs(fit.predict(float(hero.params), float(hero.tokens), float(hero.flops))["predicted_loss"]
                          / true_hero - 1))
    return float(np.median(errors))


@pytest.mark.slow
@pytest.mark.parametrize("law", sorted(TRUTHS))
def test_announced_error_matches_independent_fits(spec, law):
    """Acceptance: the announced median |error| within 30% of the one fresh ladders then give."""
    report = D.design(spec, target=0.012, law=law, simulations=120, seed=2)
    rec = report["recommended"]
    assert rec is not None
    got = independent_median(spec, rec, law, report["truth"]["scale"], report["noise"]["sigma"], 120, seed=99)
    announced = rec["result"]["confirmed"]["median"]
    assert 0.7 * announced <= got <= 1.3 * announced, (announced, got)


def test_none_meets_the_target(spec):
    from glassroom.commands.ladder_design import format_design

    report = D.design(spec, target=0.0001, simulations=10)
    assert report["recommended"] is None and report["best_within_budget"]["cost_fraction"] <= 1
    out = format_design(report)
    assert "NO candidate within budget" in out and "the best" in out and "spec lines" not in out


def test_text_and_json_output(report, capsys):
    from glassroom.commands.ladder_design import format_design

    assert cli([DEMO, "--target-error", "1.5%", "--simulations", "10", "--json"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["recommended"]["spec_lines"][0].startswith("rungs: [")
    assert parsed["noise"]["sigma"] == 0.01 and parsed["noise"]["source"] == "stated"  # the spec's noise_floor
    out = format_design(report)
    assert "recommended:" in out and "spec lines:  rungs: [" in out and "seeds: " in out
    assert "the spec's ladder:" in out


def test_eval_noise_is_shared_by_seeds_and_cut_by_more_sequences(spec):
    """Seeds do not average out the eval set's sampling error (all seeds see the same sequences); a larger
    eval_sequences multiplier does, and costs its evaluations."""
    cands, hero, _ = D.candidates(spec, domains=5, eval_noise=0.02)
    own = tuple(r.dial for r in expand(spec)[0])
    pick = {(c.seeds, c.evals): c for c in cands if c.dials == own}
    assert pick[(1, 4)].eval_flops == pytest.approx(4 * pick[(1, 1)].eval_flops)
    noise = D._noise_estimate(0.0)
    truth, _ = D.published_truth("chinchilla", cands[0].runs[0].params)

    def median(c):
        return D.summarise(D.simulate(c, hero, truth, noise, 0.02, 200, np.random.default_rng(0)))["median"]

    one, four_seeds, four_evals = median(pick[(1, 1)]), median(pick[(4, 1)]), median(pick[(1, 4)])
    assert four_seeds > 0.8 * one  # no help from seeds
    assert four_evals < 0.7 * one  # sigma / 2


@pytest.mark.slow
def test_law_from_a_results_file_measures_the_noise(tmp_path, spec):
    rows = ["name,params,tokens,flops,loss,seed"]
    rng = np.random.default_rng(0)
    for r in expand(spec)[0]:
        for k in range(3):
            loss = float(truth_loss(TRUTHS["chinchilla"], r.params * 5e3, r.tokens * 5e3)) * math.exp(rng.normal(0, 0.004))
            rows.append(f"{r.name},{r.params},{r.tokens},{r.flops},{loss},{k}")
    path = tmp_path / "results.csv"
    path.write_text("\n".join(rows) + "\n")
    report = D.design(spec, target=0.02, law=str(path), simulations=20)
    assert report["truth"]["kind"] == "fitted" and report["noise"]["source"] == "measured"
    assert 0.001 < report["noise"]["sigma"] < 0.01
    assert D.design(spec, target=0.02, law=str(path), noise=0.02, simulations=20)["noise"]["sigma"] == 0.02


def test_hero_as_flops_or_d_model(spec):
    _, hero = expand(spec)
    assert D.resolve_hero(spec, f"{hero.flops:.6g}").hero.d_model == hero.dial
    assert D.resolve_hero(spec, "64").hero.d_model == 64
    story = load_spec("experiments/ladder-story.yaml")  # hero.model pins 8 KV heads: small d_model invalid
    assert D.resolve_hero(story, "1e24").hero.d_model == 4096
    with pytest.raises(GlassroomError, match="nearest hero"):
        D.resolve_hero(story, "1e22")  # 18T tokens and 48 layers make even the smallest valid hero bigger
    with pytest.raises(GlassroomError, match="no d_model"):
        D.resolve_hero(spec, "1e40")
    report = D.design(spec, hero="64", target=0.05, simulations=10)
    assert report["hero"]["d_model"] == 64 and 56 in report["dial_values"]


@pytest.mark.parametrize("argv, match", [
    (["--target-error", "0"], "--target-error"),
    (["--target-error", "100%"], "--target-error"),
    (["--target-error=-1%"], "--target-error"),
    (["--target-error", "half"], "--target-error"),
    (["--budget", "0"], "--budget"),
    (["--budget", "nan"], "--budget"),
    (["--simulations", "9"], "--simulations"),
    (["--noise", "1.5"], "--noise"),
    (["--eval-noise=-0.1"], "--eval-noise"),
    (["--hero", "8"], "below it"),
    (["--hero", "20"], "multiple of shape.head_dim"),
    (["--hero", "zero"], "--hero"),
    (["--law", "nosuchlaw"], "--law"),
])
def test_bad_input_is_one_line(argv, match):
    with pytest.raises(GlassroomError, match=match) as err:
        cli([DEMO, "--simulations", "10", *argv] if "--simulations" not in argv else [DEMO, *argv])
    assert "\n" not in str(err.value)


def test_bad_spec_is_one_line(tmp_path):
    for path in (tmp_path / "missing.yaml", tmp_path):
        with pytest.raises(GlassroomError, match=str(path)):
            cli([str(path)])
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    with pytest.raises(GlassroomError):
        cli([str(bad)])
    empty = tmp_path / "results.csv"
    empty.write_text("")
    with pytest.raises(GlassroomError):
        cli([DEMO, "--law", str(empty), "--simulations", "10"])


def test_through_glassroom_cli(capsys):
    """`glassroom ladder design` as users type it: bad input is one line on stderr and exit 2."""
    from glassroom.cli import main

    assert main(["ladder", "design", DEMO, "--target-error", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --target-error") and err.count("\n") == 1
    assert main(["ladder", "design", DEMO, "--target-error", "5%", "--simulations", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recommended"] is not None


def _variant(tmp_path, **changes) -> str:
    import yaml

    raw = yaml.safe_load(open(DEMO))
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_spec_seeds_per_rung_and_tokens_per_rung(tmp_path):
    """A spec's `seeds: [K per rung]` is simulated as it is; with `tokens:` per rung the spec lines carry them."""
    spec = load_spec(_variant(tmp_path, seeds=[1, 1, 2, 3]))
    report = D.design(spec, target=0.05, simulations=10)
    mine = report["spec_ladder"]
    runs = expand(spec)[0]
    assert mine["seeds"] == [1, 1, 2, 3]
    assert mine["train_flops"] == pytest.approx(sum(k * r.flops for k, r in zip([1, 1, 2, 3], runs)))
    spec = load_spec(_variant(tmp_path, tokens_per_param=None, tokens=[200000, 400000, 600000, 1200000],
                              hero={"d_model": 56, "tokens": 3000000}))
    report = D.design(spec, target=0.03, simulations=10)
    assert all(set(c["rungs"]) <= {16, 24, 32, 48} for c in report["all"])
    lines = report["recommended"]["spec_lines"]
    tokens = dict(zip([16, 24, 32, 48], [200000, 400000, 600000, 1200000]))
    assert lines[1] == f"tokens: [{', '.join(str(tokens[d]) for d in report['recommended']['rungs'])}]"


def test_data_named_on_purpose_must_be_a_built_dataset(tmp_path):
    """--data at an empty folder, or at a manifest listing no domains, is refused in one line (the
    spec's own data.path may still be unbuilt: then the spec's weights or one domain, said so)."""
    spec = load_spec("tests/configs/ladder-tiny.yaml")
    with pytest.raises(GlassroomError, match="--data .*: not a built dataset"):
        D.eval_domains(spec, str(tmp_path))
    (tmp_path / "manifest.json").write_text('{"domains": {}}')
    with pytest.raises(GlassroomError, match="lists no domains"):
        D.eval_domains(spec, str(tmp_path))
    (tmp_path / "manifest.json").write_text('{"domains": {"prose": {}, "code": {}}}')
    assert D.eval_domains(spec, str(tmp_path))[0] == 2
