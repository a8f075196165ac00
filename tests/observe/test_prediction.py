"""The sealed prediction and the chained journal: `glassroom ladder verify` finds every alteration.

The hero here is a run store written as the trainer writes it (start, metric rows, eval events, end)
after a real preregistration; each tamper edits a copy, through SQLite directly or the store API."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cli_helpers import glassroom_in_process
from glassroom.errors import GlassroomError
from glassroom.ladder.predict import make_prediction, preregister
from glassroom.observe import journal
from glassroom.observe.prediction import check_seal, seal
from glassroom.observe.store import StoreReader, StoreWriter
from glassroom.train.config import run_config_from_mapping
from ladder_helpers import ROOT, write_ladder

FAST = {"fit": {"bootstrap": 20, "momentum": 0.999}}
ALTERED = 3  # glassroom.commands.ladder.ALTERED_EXIT


def glassroom(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "glassroom", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def train_like_the_trainer(run_dir: Path, steps: int = 30, config: dict | None = None) -> None:
    """The store (and, given the hero's config mapping, RUN_DIR/config.yaml) as the trainer writes them."""
    if config is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        resolved = run_config_from_mapping(config).to_dict()
        (run_dir / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    with StoreWriter(run_dir) as w:
        w.event("start", "training from step 0", 0, {"steps": steps})
        for s in range(1, steps + 1):
            w.log(s, {"train/loss": 5.0 - 0.05 * s})
            if s % 10 == 0:
                w.event("eval", f"bits per byte at step {s}: 1.2", s, {"eval/macro/bpb": 1.2})
        w.event("end", f"finished at step {steps}", steps)


@pytest.fixture(scope="module")
def ladder(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("seal") / "ladder"
    _, _, hero = write_ladder(out, noise=0.001, seed=0, spec_overrides=FAST)
    return out, hero.config


@pytest.fixture(scope="module")
def hero_config(ladder) -> dict:
    return ladder[1]


@pytest.fixture(scope="module")
def prediction(ladder) -> dict:
    return make_prediction(*ladder)


@pytest.fixture(scope="module")
def hero(prediction, hero_config, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("hero") / "hero"
    preregister(run_dir, prediction)
    train_like_the_trainer(run_dir, config=hero_config)
    return run_dir


@pytest.fixture
def copy(hero, tmp_path) -> Path:
    run_dir = tmp_path / "hero"
    shutil.copytree(hero, run_dir)
    return run_dir


def verify(run_dir: Path, through=glassroom_in_process) -> subprocess.CompletedProcess:
    """`glassroom ladder verify` in the test process; through=glassroom: through `python -m glassroom`."""
    return through("ladder", "verify", run_dir)


def altered(run_dir: Path, *needles: str, through=glassroom_in_process) -> str:
    result = verify(run_dir, through=through)
    lines = result.stdout.strip().splitlines()
    assert result.returncode == ALTERED, (result.returncode, result.stdout, result.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("altered: ") and not result.stderr, result
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_the_seal_covers_prediction_rungs_commit_and_time(hero, prediction):
    with StoreReader(hero) as reader:
        stored = reader.artifact("prediction")
        events = reader.events()
    s = stored["seal"]
    assert s["algorithm"] == "sha256" and len(s["digest"]) == 64
    assert s["created"] == stored["created"] and s["created"] < events[1]["time"]
    assert s["commit"] and len(s["rungs"]) == len(prediction["rungs"]) == 4
    for rung, identity in zip(s["rungs"], prediction["rungs"]):
        assert rung["config_hash"] == identity["config_sha256"] and rung["name"] == identity["name"]
        assert rung["final"]["eval/macro/loss"] > 0
    body = {"prediction": {k: v for k, v in stored.items() if k != "seal"}, "rungs": s["rungs"],
            "commit": s["commit"], "created": s["created"]}
    assert journal.sha256_hex(journal.canonical(body)) == s["digest"]  # the documented recipe
    kinds = [e["kind"] for e in events]
    assert kinds[:2] == ["prediction", "start"] and s["digest"] in events[0]["text"]
    assert events[0]["data"]["seal_digest"] == s["digest"]


def test_a_clean_run_verifies(hero):
    result = verify(hero, through=glassroom)
    assert result.returncode == 0, result.stdout + result.stderr
    with StoreReader(hero) as reader:
        digest = reader.artifact("prediction")["seal"]["digest"]
    line = result.stdout.strip()
    assert line.startswith(f"sealed prediction intact: sha256 {digest} made ") and ", before step 1 at " in line
    assert "events chained" in line and len(result.stdout.strip().splitlines()) == 1
    as_json = json.loads(glassroom_in_process("ladder", "verify", hero, "--json").stdout)
    assert as_json["ok"] and as_json["digest"] == digest and as_json["chain"]["chained"] == 6


def edit_artifact(run_dir: Path, change) -> None:
    with sqlite3.connect(run_dir / "store.sqlite") as conn:
        value = json.loads(conn.execute("SELECT value FROM artifacts WHERE name = 'prediction'").fetchone()[0])
        change(value)
        conn.execute("UPDATE artifacts SET value = ? WHERE name = 'prediction'", (json.dumps(value),))


def test_editing_the_prediction_in_the_database_is_found(copy):
    def lower_the_band(p):
        p["mean"][5] *= 0.99
    edit_artifact(copy, lower_the_band)
    assert altered(copy, through=glassroom) == "altered: prediction changed after sealing: mean differs"


def test_moving_the_sealing_time_earlier_is_found(copy):
    def earlier(p):
        p["created"] -= 3600
        p["seal"]["created"] -= 3600
    edit_artifact(copy, earlier)
    altered(copy, "changed after sealing", "created differs")


def test_resealing_an_edited_prediction_is_found_by_the_journal(copy):
    """Someone recomputes a valid seal over an edited prediction: the journal's record disagrees."""
    def reseal(p):
        body = {k: v for k, v in p.items() if k not in ("seal",)}
        body["final_loss"] *= 0.9
        p.clear()
        p.update(seal(body, p_rungs, p_commit, p_created))
    with StoreReader(copy) as reader:
        old = reader.artifact("prediction")["seal"]
    p_rungs, p_commit, p_created = old["rungs"], old["commit"], old["created"]
    edit_artifact(copy, reseal)
    altered(copy, "resealed after preregistration")


@pytest.mark.parametrize("sql, needles", [
    ("UPDATE events SET text = 'bits per byte at step 20: 0.9' WHERE kind = 'eval' AND step = 20",
     ("event 4 (eval, step 20) was edited",)),
    ("UPDATE events SET data = '{\"eval/macro/bpb\": 0.9}' WHERE kind = 'eval' AND step = 10",
     ("event 3 (eval, step 10) was edited",)),
    ("DELETE FROM events WHERE kind = 'eval' AND step = 20", ("event 4 removed",)),
    ("INSERT INTO events (time, step, kind, text) VALUES (1e10, 5, 'note', 'planted')", ("has no digest",)),
    ("UPDATE events SET time = time - 7200 WHERE kind = 'start'", ("event 2 (start, step 0) was edited",)),
    ("DELETE FROM artifacts WHERE name = 'prediction'", ("prediction artifact was removed",)),
    ("UPDATE artifacts SET value = '[1, 2]' WHERE name = 'prediction'", ("not a prediction",)),
])
def test_editing_the_journal_in_the_database_is_found(copy, sql, needles):
    with sqlite3.connect(copy / "store.sqlite") as conn:
        conn.execute(sql)
    altered(copy, *needles)


@pytest.mark.parametrize("sql, needles", [
    # Stripping the chain must not make the journal look like one from before the chain existed.
    ("UPDATE events SET digest = NULL", ("the journal's digests were removed", "event 1, the preregistration")),
    ("UPDATE events SET digest = NULL; UPDATE events SET text = 'x' WHERE kind = 'eval' AND step = 20",
     ("the journal's digests were removed",)),
    ("ALTER TABLE events DROP COLUMN digest; UPDATE events SET text = 'x' WHERE kind = 'eval'",
     ("digest column was removed",)),
    ("DROP TABLE events", ("the events table(s) were removed",)),
    # Cutting the journal back to the preregistration: the metric rows still show the run started.
    ("DELETE FROM events WHERE kind != 'prediction'", ("30 metric row(s) but its journal has no start event",)),
    ("UPDATE metrics SET time = 'yesterday' WHERE step = 3", ("time that is not a number",)),
    # The seal's parts outside the digest: what the page shows must be what sealing wrote.
    ("UPDATE artifacts SET value = json_remove(value, '$.seal.fields') WHERE name = 'prediction'",
     ("seal changed after sealing: seal fields removed",)),
    ("UPDATE artifacts SET value = json_set(value, '$.seal.created_iso', '2020-01-01T00:00:00Z') "
     "WHERE name = 'prediction'", ("seal created_iso differs",)),
    ("UPDATE artifacts SET value = json_set(value, '$.seal.note', 'ok') WHERE name = 'prediction'",
     ("seal note added",)),
    ("UPDATE artifacts SET value = json_set(value, '$.seal.fields', 'x', '$.mean[0]', 1.0) WHERE name = 'prediction'",
     ("which part cannot be told",)),
])
def test_stripping_the_chain_or_the_seal_is_found(copy, sql, needles):
    with sqlite3.connect(copy / "store.sqlite") as conn:
        conn.executescript(sql)
    altered(copy, *needles)


def test_the_prediction_is_bound_to_its_hero_config(copy):
    """A valid seal on a run that trains another config (more steps, another lr) is not that run's
    prediction; settings that change how it runs (device, eval_every) may change on a resume."""
    path = copy / "config.yaml"
    original = path.read_text()
    config = yaml.safe_load(original)
    config["train"].update(device="cuda", eval_every=7, checkpoint_every=3)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert verify(copy).returncode == 0
    steps = config["train"]["steps"]
    config["train"]["steps"] = steps * 2
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    altered(copy, "config.yaml is not the hero the prediction was made for",
            f"train.steps ({steps} predicted, {steps * 2} trained)")
    path.write_text("model: [")
    altered(copy, "config.yaml is damaged")
    path.unlink()
    altered(copy, "config.yaml was removed")


def test_a_seal_whose_time_is_not_a_number_is_found(prediction):
    sealed = seal(prediction, [], "abc")
    sealed["seal"]["created"] = sealed["created"] = "soon"
    body = {k: v for k, v in sealed.items() if k != "seal"}
    sealed["seal"]["digest"] = journal.sha256_hex(journal.canonical(
        {"prediction": body, "rungs": [], "commit": "abc", "created": "soon"}))
    assert "not a time" in check_seal(sealed)


def test_verify_refuses_a_store_that_is_not_a_file(tmp_path):
    import os

    run_dir = tmp_path / "fifo"
    run_dir.mkdir()
    os.mkfifo(run_dir / "store.sqlite")  # opening it would block
    result = subprocess.run([sys.executable, "-m", "glassroom", "ladder", "verify", str(run_dir)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "not a regular file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_store_api_refuses_to_replace_the_prediction(copy, prediction):
    with StoreWriter(copy) as writer:
        with pytest.raises(GlassroomError, match="'prediction' is sealed and never replaced"):
            writer.set_artifact("prediction", {**prediction, "final_loss": 0.1})
        writer.set_artifact("status", {"state": "finished", "step": 30})  # other artifacts still change
    with pytest.raises(GlassroomError, match="already holds a preregistered prediction"):
        preregister(copy, prediction)
    assert verify(copy).returncode == 0


def test_a_prediction_inserted_after_the_first_step_is_found(prediction, tmp_path):
    """The store API refuses it (below); a hand-made insertion with a valid seal is caught by verify."""
    run_dir = tmp_path / "late"
    train_like_the_trainer(run_dir)
    rungs = [{"name": r["name"], "config_hash": r["config_sha256"], "final": r["final"]} for r in prediction["rungs"]]
    sealed = seal(prediction, rungs, "abc")
    with StoreWriter(run_dir) as writer:
        writer.set_artifact("prediction", sealed)
        writer.event("prediction", "preregistered", 0, {"seal_digest": sealed["seal"]["digest"]})
    altered(run_dir, "prediction made after the run started")


@pytest.mark.parametrize("started", ["metrics", "start event", "checkpoint"])
def test_preregister_refuses_a_hero_that_has_started(prediction, tmp_path, started):
    run_dir = tmp_path / "hero"
    with StoreWriter(run_dir) as writer:
        if started == "metrics":
            writer.log(500, {"train/loss": 3.0})
        elif started == "start event":
            writer.event("start", "training from step 0", 0)
    if started == "checkpoint":
        (run_dir / "checkpoints" / "step_0000100").mkdir(parents=True)
    with pytest.raises(GlassroomError, match="sealed before"):
        preregister(run_dir, prediction)
    with StoreReader(run_dir) as reader:
        assert reader.artifact("prediction") is None
        assert not reader.events(kinds=["prediction"])


def test_a_user_given_created_time_is_replaced_by_the_sealing_time(prediction, tmp_path):
    before = time.time()
    sealed = preregister(tmp_path / "hero", {**prediction, "created": 1.0, "created_iso": "1970-01-01T00:00:01Z"})
    assert before <= sealed["created"] == sealed["seal"]["created"] <= time.time()
    assert sealed["created_iso"] != "1970-01-01T00:00:01Z" and check_seal(sealed) is None


def test_an_old_store_is_migrated_and_its_chain_starts_at_the_first_digest(tmp_path):
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    with sqlite3.connect(run_dir / "store.sqlite") as conn:  # the schema before the digest column
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, step INTEGER, "
                     "kind TEXT NOT NULL, text TEXT NOT NULL, data TEXT)")
        conn.execute("INSERT INTO events (time, step, kind, text) VALUES (1.5, 0, 'start', 'old')")
    with StoreWriter(run_dir) as writer:
        writer.event("note", "after the upgrade", 3)
        writer.event("note", "and another", 4)
    with sqlite3.connect(run_dir / "store.sqlite") as conn:
        chain = journal.verify_chain(conn)
        assert chain["ok"] and chain["legacy"] == 1 and chain["chained"] == 2
        conn.execute("UPDATE events SET text = 'changed' WHERE id = 2")
        assert "event 2 (note, step 3) was edited" in journal.verify_chain(conn)["problem"]


NOTER = """
import sys
from glassroom.cli import main
for i in range(200):
    assert main(["note", sys.argv[1], f"note {sys.argv[2]}-{i}"]) == 0
"""


@pytest.mark.slow
def test_the_chain_holds_with_two_note_writers_while_the_hero_trains(ladder, tiny_dataset, tmp_path):
    """Three processes append to the journal at once (the trainer and two `glassroom note` loops of
    200 notes): each event is chained inside its own write transaction, so the chain stays whole."""
    config = yaml.safe_load((ROOT / "tests" / "configs" / "train-tiny.yaml").read_text())
    config["data"]["path"] = str(tiny_dataset)
    config["train"].update(steps=80, checkpoint_every=20, eval_every=10)
    (tmp_path / "hero.yaml").write_text(yaml.safe_dump(config))
    hero = tmp_path / "hero"
    preregister(hero, make_prediction(ladder[0], config))
    train = subprocess.Popen([sys.executable, "-m", "glassroom", "train", str(tmp_path / "hero.yaml"), "--out",
                              str(hero)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and train.poll() is None:  # start the notes once training has begun
        with StoreReader(hero) as reader:
            if reader.events(kinds=["start"]):
                break
        time.sleep(0.1)
    notes = [subprocess.Popen([sys.executable, "-c", NOTER, str(hero), w], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for w in "ab"]
    for process in notes + [train]:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-2000:]
    with StoreReader(hero) as reader:
        events = reader.events()
    kinds = [e["kind"] for e in events]
    assert kinds.count("note") == 400 and "end" in kinds
    start, end = events[kinds.index("start")]["time"], events[kinds.index("end")]["time"]
    assert any(start < e["time"] < end for e in events if e["kind"] == "note")  # they did overlap
    result = verify(hero)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"journal: {len(events)} events chained" in result.stdout


@pytest.mark.parametrize("damage, needle", [
    (lambda p: p.pop("metric"), "no metric"),
    (lambda p: p.update(steps="x"), "steps is not a list"),
    (lambda p: p.update(mean=p["mean"][:-1]), "mean is not one finite number per step"),
    (lambda p: p["hi"].__setitem__(0, float("nan")), "hi is not one finite number per step"),
    (lambda p: p.update(confidence=2), "confidence"),
])
def test_a_damaged_band_is_refused_before_it_is_sealed_or_trained_against(prediction, tmp_path, damage, needle):
    """preregister refuses it, and so does the trainer's band watcher (an edited store): one line, not
    a KeyError or a TypeError at the first evaluation."""
    from glassroom.observe.prediction import BandWatcher

    damaged = json.loads(json.dumps(prediction))
    damage(damaged)
    with pytest.raises(GlassroomError, match=needle):
        preregister(tmp_path / "hero", damaged)
    assert not (tmp_path / "hero" / "store.sqlite").exists() or StoreReader(tmp_path / "hero").artifact("prediction") is None
    with pytest.raises(GlassroomError, match=f"preregistered prediction is damaged \\({needle}"):
        BandWatcher(damaged)
    BandWatcher(prediction)  # the intact one is accepted


def test_a_note_with_an_undecodable_byte_is_stored_and_chained(copy):
    """`glassroom note RUN $'\\xff'` reaches the store as a lone surrogate, which SQLite refused with a
    UnicodeEncodeError traceback (exit 1); it is stored with U+FFFD and the chain stays whole."""
    result = subprocess.run([sys.executable, "-m", "glassroom", "note", str(copy), b"bad \xff byte"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    with StoreWriter(copy) as writer:
        writer.event("note", "\ud800", 30)  # a surrogate no byte gives
    with StoreReader(copy) as reader:
        texts = [e["text"] for e in reader.events(kinds=["note"])]
    assert texts[0] == "bad \ufffd byte" and "\ufffd" in texts[1]
    assert verify(copy).returncode == 0
