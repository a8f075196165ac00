"""Terms a fit drops (glassroom.ladder.fit.Fit.notes): a coefficient that ends at its bound 0 is said,
with what it means, by the fit, the curve law and `ladder predict --results`; a fit that keeps every
term says nothing."""

from __future__ import annotations

import json

import numpy as np

from glassroom.cli import main
from glassroom.ladder.fit import LAW_C, fit_law
from glassroom.ladder.predict import CURVE_LAW

C = np.geomspace(1e18, 1e21, 6)


def test_a_floor_in_the_data_gives_no_note():
    fit = fit_law(LAW_C, {"C": C}, 1.8 + 40.0 * C ** -0.08)
    assert fit.params["E"] > 1.5 and fit.notes == [] and fit.to_json()["notes"] == []


def test_a_pure_power_law_drops_e_and_says_it():
    fit = fit_law(LAW_C, {"C": C}, 40.0 * C ** -0.05)
    assert fit.params["E"] < 1e-6
    assert len(fit.notes) == 1 and fit.notes[0].startswith("L(C): E = 0, at its bound: no irreducible loss")
    assert fit.to_json()["notes"] == fit.notes


def test_a_pinned_e_of_zero_is_not_a_dropped_term():
    fit = fit_law(LAW_C, {"C": C}, 40.0 * C ** -0.05, pinned={"E": 0.0})
    assert fit.notes == []


def test_curve_law_without_a_size_effect_drops_the_size_term():
    rng = np.random.default_rng(0)
    N = np.repeat([1e5, 3e5, 1e6], 20)
    S1 = np.tile(np.linspace(5, 100, 20), 3) * np.repeat([1.0, 2.0, 4.0], 20)   # larger runs train longer
    S2 = np.tile(np.linspace(0, 3, 20), 3)
    y = 2.0 + 8.0 * S1 ** -0.4 - 0.05 * S2                                          # no N in the truth
    fit = fit_law(CURVE_LAW, {"N": N, "S1": S1, "S2": S2}, y * np.exp(rng.normal(0, 1e-4, y.size)))
    assert any(n.startswith("L(N,s): B = 0") and "model-size term vanished" in n and "beta is then undetermined" in n
               for n in fit.notes), fit.params
    kept = fit_law(CURVE_LAW, {"N": N, "S1": S1, "S2": S2}, y + 30.0 * N ** -0.3)
    assert not any(n.startswith("L(N,s): B") for n in kept.notes), kept.params


def test_predict_on_a_results_file_says_the_dropped_floor(tmp_path, capsys):
    path = tmp_path / "pure.csv"
    rows = [(f"r{i}", 1e7 * 4 ** i, 2e8 * 4 ** i) for i in range(5)]
    path.write_text("name,params,tokens,loss\n" + "".join(
        f"{n},{p:g},{d:g},{40.0 * (6 * p * d) ** -0.05:.6f}\n" for n, p, d in rows))
    assert main(["ladder", "predict", "--results", str(path), "--params", "1e10", "--tokens", "2e11", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["law"]["law"] == "L(C)" and out["law"]["notes"][0].startswith("L(C): E = 0")
    assert main(["ladder", "predict", "--results", str(path), "--params", "1e10", "--tokens", "2e11"]) == 0
    assert "note: L(C): E = 0, at its bound" in capsys.readouterr().out
