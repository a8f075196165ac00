"""The ladder page checks the ladder's prediction.json against the hero run's seal and says in words
when they disagree, showing the sealed numbers (never the edited ones without a word)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from glassroom.ladder.predict import make_prediction, preregister
from glassroom.web.ladder_view import ladder_view
from ladder_helpers import write_ladder

FAST = {"fit": {"bootstrap": 20, "momentum": 0.999}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ladder-view") / "lab"
    ladder = root / "ladders" / "fit"
    _, _, hero = write_ladder(ladder, noise=0.001, seed=0, spec_overrides=FAST)
    prediction = make_prediction(ladder, hero.config)
    (ladder / "prediction.json").write_text(json.dumps(prediction))
    preregister(root / "runs" / "hero", prediction)
    return root


def view(root: Path) -> dict:
    return ladder_view("ladders/fit", root / "ladders" / "fit", root)


def test_an_intact_prediction_agrees_with_its_seal(lab):
    hero = view(lab)["hero"]
    assert hero["source"] == "the hero run's sealed prediction"
    assert hero["sealed_check"] == "the sealed prediction verifies and prediction.json agrees with it"


def test_an_edited_prediction_json_is_said_in_words_and_the_sealed_numbers_shown(lab, tmp_path):
    root = tmp_path / "lab"
    shutil.copytree(lab, root)
    path = root / "ladders" / "fit" / "prediction.json"
    edited = json.loads(path.read_text())
    sealed_loss = edited["final_loss"]
    edited["final_loss"] -= 0.5
    edited["final_interval"] = [v - 0.5 for v in edited["final_interval"]]
    path.write_text(json.dumps(edited))
    got = view(root)
    assert got["hero"]["predicted"] == pytest.approx(sealed_loss)
    line = "prediction.json disagrees with the hero run's sealed prediction (final_interval, final_loss)"
    assert got["notes"][0].startswith(line) and "this page shows the sealed numbers" in got["notes"][0]
    assert got["hero"]["sealed_check"] == got["notes"][0]


def test_a_seal_edited_in_the_store_is_said_in_words(lab, tmp_path):
    root = tmp_path / "lab"
    shutil.copytree(lab, root)
    conn = sqlite3.connect(root / "runs" / "hero" / "store.sqlite")
    value = json.loads(conn.execute("SELECT value FROM artifacts WHERE name = 'prediction'").fetchone()[0])
    value["final_loss"] -= 0.5
    with conn:
        conn.execute("UPDATE artifacts SET value = ? WHERE name = 'prediction'", (json.dumps(value),))
    conn.close()
    (root / "ladders" / "fit" / "prediction.json").write_text(json.dumps({k: v for k, v in value.items() if k != "seal"}))
    got = view(root)
    assert got["notes"][0].startswith("the hero run's sealed prediction does not verify: prediction changed after "
                                      "sealing: final_loss differs")
