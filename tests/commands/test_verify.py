"""`glassroom verify`: every tampering a forger can make to a sealed hero's record, each recomputing
every digest the forger can (the chain, the metric windows), is named against a copy saved before it
(exit 3); the honest run, trained in three pieces (killed and resumed), verifies against every copy
saved along the way (exit 0).

The hero: the tiny config preregistered against a fitted ladder, killed after step 4 and after step 8
(GLASSROOM_FAULTS kill@N) and resumed each time; after each piece its folder and the published site
are copied, as a watcher would save them."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli_helpers import glassroom_in_process
from glassroom.ladder.predict import make_prediction, preregister
from glassroom.observe import journal, record
from glassroom.observe.prediction import seal
from glassroom.web.publish import publish
from ladder_helpers import ROOT, write_ladder
from train_helpers import run_train

pytestmark = pytest.mark.slow  # every test here reads runs this module trains

ALTERED = 3
FAST = {"fit": {"bootstrap": 20, "momentum": 0.999}}


def glassroom(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "glassroom", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def hero_config(dataset: Path) -> dict:
    config = yaml.safe_load((ROOT / "tests" / "configs" / "train-tiny.yaml").read_text())
    config["data"]["path"] = str(dataset)
    return config


def train_piece(hero: Path, dataset: Path, config_file: Path, kill_at: int | None, resume: bool) -> None:
    env = {"GLASSROOM_FAULTS": f"kill@{kill_at}"} if kill_at else {}
    result = run_train(hero, dataset, resume=resume, env=env, config=config_file)
    assert result.returncode == (-9 if kill_at else 0), result.stderr[-2000:]


@pytest.fixture(scope="module")
def lab(tiny_dataset, tmp_path_factory) -> dict:
    """A lab with a fitted ladder and its sealed hero, trained in three pieces; the run folder and the
    published site saved after each piece (saved/run-1, saved/site-1, ...)."""
    base = tmp_path_factory.mktemp("verify")
    root = base / "lab"
    ladder = root / "ladders" / "fit"
    write_ladder(ladder, noise=0.001, seed=0, spec_overrides=FAST)
    config = hero_config(tiny_dataset)
    config_file = base / "hero.yaml"
    config_file.write_text(yaml.safe_dump(config))
    prediction = make_prediction(ladder, config)
    (ladder / "prediction.json").write_text(json.dumps(prediction))
    hero = root / "runs" / "hero"
    preregister(hero, prediction)
    saved, site = base / "saved", base / "site"
    for piece, kill_at in enumerate((4, 8, None), start=1):
        train_piece(hero, tiny_dataset, config_file, kill_at, resume=piece > 1)
        publish(root, site)
        shutil.copytree(hero, saved / f"run-{piece}")
        shutil.copytree(site, saved / f"site-{piece}")
    shutil.copy(site / "runs" / "runs" / "hero" / "chain.json", saved / "chain-3.json")
    shutil.copy(site / "runs" / "runs" / "hero" / "feed.atom", saved / "feed-3.atom")
    other = root / "runs" / "other-hero"   # another ladder's hero with the same config, for the swap
    preregister(other, make_prediction(ladder, config))
    train_piece(other, tiny_dataset, config_file, None, resume=False)
    return {"root": root, "hero": hero, "other": other, "saved": saved, "site": site, "dataset": tiny_dataset}


@pytest.fixture
def forged(lab, tmp_path) -> Path:
    run_dir = tmp_path / "hero"
    shutil.copytree(lab["hero"], run_dir)
    return run_dir


# ----------------------------------------------------------------------------- a forger's tools

def sql(run_dir: Path, *statements: tuple) -> None:
    conn = sqlite3.connect(run_dir / "store.sqlite")
    with conn:
        for statement in statements:
            conn.execute(*statement) if isinstance(statement, tuple) else conn.execute(statement)
    conn.close()


def events(run_dir: Path) -> list[tuple]:
    conn = sqlite3.connect(run_dir / "store.sqlite")
    rows = conn.execute("SELECT id, time, step, kind, text, data FROM events ORDER BY id").fetchall()
    conn.close()
    return rows


def recompute_everything(run_dir: Path) -> None:
    """What a forger with write access and glassroom's code can redo after an edit: every window's
    digest from the rows as they are now, then every event's digest in order."""
    conn = sqlite3.connect(run_dir / "store.sqlite")
    with conn:
        for id_, _, _, kind, _, data in conn.execute("SELECT id, time, step, kind, text, data FROM events ORDER BY id").fetchall():
            parsed = json.loads(data) if data else None
            window = record.record_of(parsed)
            if kind in record.WINDOW_KINDS and "sha256" in window:
                lo = -(2**62) if window["after"] is None else window["after"] + 1
                rows = conn.execute("SELECT names.name, step, value FROM metrics JOIN names ON names.id = name_id "
                                    "WHERE step BETWEEN ? AND ? ORDER BY names.name, step", (lo, window["to"])).fetchall()
                window.update(rows=len(rows), sha256=record.window_digest(rows))
                conn.execute("UPDATE events SET data = ? WHERE id = ?", (json.dumps(parsed), id_))
        previous = ""
        for id_, when, step, kind, text, data in conn.execute(
                "SELECT id, time, step, kind, text, data FROM events ORDER BY id").fetchall():
            previous = journal.event_digest(previous, id_, when, step, kind, text, data)
            conn.execute("UPDATE events SET digest = ? WHERE id = ?", (previous, id_))
    conn.close()


def band_event(run_dir: Path) -> tuple:
    """The first event the band watcher wrote (the hero left or came back into the band), else the first eval."""
    rows = events(run_dir)
    return next((e for e in rows if e[3] == "prediction" and e[2]), None) or next(e for e in rows if e[3] == "eval")


def verify(target: Path, *copies: Path, through=glassroom_in_process) -> subprocess.CompletedProcess:
    """`glassroom verify` in the test process; through=glassroom: through `python -m glassroom`."""
    return through("verify", target, *[a for c in copies for a in ("--against", c)])


def passes_alone(target: Path) -> None:
    result = verify(target)
    assert result.returncode == 0, result.stdout + result.stderr


def named(result: subprocess.CompletedProcess, *needles: str) -> str:
    lines = result.stdout.strip().splitlines()
    assert result.returncode == ALTERED, (result.returncode, result.stdout, result.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("altered: ") and not result.stderr, result
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------- the honest run

@pytest.mark.slow
def test_the_honest_run_extends_every_copy_saved_while_it_trained(lab):
    saved = lab["saved"]
    copies = [saved / "run-1", saved / "run-2", saved / "run-3", saved / "chain-3.json", saved / "feed-3.atom",
              saved / "site-1", saved / "site-2"]
    result = verify(lab["hero"], *copies, through=glassroom)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "record format 2" in result.stdout and "match their digests" in result.stdout
    assert "prediction: sealed sha256" in result.stdout and f"extends {len(copies)} saved copies" in result.stdout
    site = verify(lab["site"], saved / "site-1", saved / "site-2", saved / "chain-3.json", saved / "feed-3.atom",
                  saved / "run-1")
    assert site.returncode == 0, site.stdout + site.stderr
    assert "1 ladder pages show the sealed numbers" in site.stdout


def test_the_site_and_the_feed_carry_the_head(lab):
    site = json.loads((lab["site"] / "site.json").read_text())
    chain = json.loads((lab["site"] / "runs" / "runs" / "hero" / "chain.json").read_text())
    assert site["chains"]["runs/hero"] == chain["head"] and chain["format"] == record.FORMAT
    assert chain["events"][-1][:2] == [chain["head"]["id"], chain["head"]["digest"]]
    feed = (lab["site"] / "runs" / "runs" / "hero" / "feed.atom").read_text()
    assert f"/chain/{chain['head']['id']}</id>" in feed and chain["head"]["digest"] in feed


# ----------------------------------------------------------------------------- the tamperings

def test_deleting_an_event_and_renumbering_is_named(lab, forged):
    gone = band_event(forged)
    sql(forged, ("DELETE FROM events WHERE id = ?", (gone[0],)), ("UPDATE events SET id = id - 1 WHERE id > ?", (gone[0],)))
    recompute_everything(forged)
    passes_alone(forged)   # what `ladder verify` alone could not see
    named(verify(forged, lab["saved"] / "run-2"), f"event {gone[0]} was {gone[3]}", "renumbered")


def test_rewording_the_band_event_is_named(lab, forged):
    event = band_event(forged)
    sql(forged, ("UPDATE events SET text = ? WHERE id = ?", ("train/loss stayed inside the predicted band", event[0])))
    recompute_everything(forged)
    passes_alone(forged)
    named(verify(forged, lab["saved"] / "run-2"), f"event {event[0]} ({event[3]}", "rewritten")


def test_erasing_every_event_after_the_start_is_named(lab, forged):
    start = next(e for e in events(forged) if e[3] == "start")
    sql(forged, ("DELETE FROM events WHERE id > ?", (start[0],)))
    recompute_everything(forged)
    named(verify(forged, lab["saved"] / "chain-3.json", through=glassroom), "cut back", f"ends at event {start[0]}")


def test_editing_metric_rows_is_named_alone_and_against_a_copy_when_the_windows_are_recomputed(lab, forged):
    edit = ("UPDATE metrics SET value = value * 0.5 WHERE step BETWEEN 1 AND 4 AND name_id = "
            "(SELECT id FROM names WHERE name = 'train/loss')")
    sql(forged, edit)
    named(verify(forged), "metric rows of steps up to 4 were edited after checkpoint event")
    recompute_everything(forged)
    passes_alone(forged)
    named(verify(forged, lab["saved"] / "run-1"), "(checkpoint at step 4) was rewritten")


def test_a_row_added_to_a_closed_window_is_named(lab, forged):
    sql(forged, "INSERT INTO names (name) VALUES ('eval/forged')",
        "INSERT INTO metrics SELECT id, 2, 1.0, 1.0 FROM names WHERE name = 'eval/forged'")
    named(verify(forged), "metric rows of steps up to 4 were edited", "rows now")


def test_swapping_in_another_heros_store_is_named(lab, forged):
    for name in ("store.sqlite", "store.sqlite-wal", "store.sqlite-shm"):
        (forged / name).unlink(missing_ok=True)
        if (lab["other"] / name).exists():
            shutil.copy(lab["other"] / name, forged / name)
    passes_alone(forged)   # a whole, honest record: of another run
    named(verify(forged, lab["saved"] / "run-1"), "the record was replaced")
    named(verify(forged, lab["saved"] / "feed-3.atom"), "event")


@pytest.mark.parametrize("key, value", [("eval_sequences", 64), ("precision", "fp32")])
def test_changing_how_the_loss_is_measured_after_sealing_is_named(lab, forged, key, value):
    config = yaml.safe_load((forged / "config.yaml").read_text())
    config["train"][key] = value
    (forged / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    named(verify(forged), "config.yaml was edited after the run recorded its settings", key)
    for id_, _, _, kind, _, data in events(forged):   # the forger rewrites the recorded settings too
        if kind in ("start", "resume"):
            parsed = json.loads(data)
            parsed["record"]["measure"][key] = value
            sql(forged, ("UPDATE events SET data = ? WHERE id = ?", (json.dumps(parsed), id_)))
    recompute_everything(forged)
    named(verify(forged), "otherwise than the sealed prediction says", key)
    reseal(forged, lambda p: p["hero"]["measure"].update({key: value}))   # and the seal, and its event
    recompute_everything(forged)
    passes_alone(forged)
    named(verify(forged, lab["saved"] / "run-1"), "the record was replaced: its first event 1 (prediction")


def reseal(run_dir: Path, change) -> None:
    """Edit the sealed prediction, seal it again as preregistration did, and record the new digest in
    its event (the chain is recomputed after)."""
    conn = sqlite3.connect(run_dir / "store.sqlite")
    prediction = json.loads(conn.execute("SELECT value FROM artifacts WHERE name = 'prediction'").fetchone()[0])
    old = prediction.pop("seal")
    change(prediction)
    sealed = seal(prediction, old["rungs"], old["commit"], old["created"])
    id_, data = conn.execute("SELECT id, data FROM events WHERE kind = 'prediction' ORDER BY id").fetchone()
    data = {**json.loads(data), "seal_digest": sealed["seal"]["digest"]}
    with conn:
        conn.execute("UPDATE artifacts SET value = ? WHERE name = 'prediction'", (json.dumps(sealed),))
        conn.execute("UPDATE events SET data = ? WHERE id = ?", (json.dumps(data), id_))
    conn.close()


def _random_tampering(run_dir: Path, rng: random.Random) -> str:
    """One edit a forger could make to what the band is compared with, chosen and placed at random:
    an event's text, step, kind, time or data changed, an event deleted or inserted, a metric value
    changed, a metric row deleted or added inside a closed window. Returns what it did."""
    conn = sqlite3.connect(run_dir / "store.sqlite")
    ids = [r[0] for r in conn.execute("SELECT id FROM events ORDER BY id")]
    last_to = max(record.record_of(json.loads(d)).get("to") or 0 for d, in conn.execute(
        "SELECT data FROM events WHERE kind IN ('checkpoint', 'end') AND data IS NOT NULL"))
    metric = conn.execute("SELECT name_id, step, value FROM metrics WHERE step <= ? ORDER BY name_id, step", (last_to,)).fetchall()
    conn.close()
    kind = rng.choice(["text", "step", "kind", "time", "data", "delete event", "insert event",
                       "metric value", "delete metric", "add metric"])
    event_id, row = rng.choice(ids), rng.choice(metric)
    if kind in ("text", "kind"):
        sql(run_dir, (f"UPDATE events SET {kind} = {kind} || ? WHERE id = ?", (rng.choice([".", " ", "x"]), event_id)))
    elif kind in ("step", "time"):
        sql(run_dir, (f"UPDATE events SET {kind} = COALESCE({kind}, 0) + ? WHERE id = ?", (rng.choice([-1, 1, 7]), event_id)))
    elif kind == "data":
        sql(run_dir, ("UPDATE events SET data = ? WHERE id = ?", (json.dumps({"forged": rng.random()}), event_id)))
    elif kind == "delete event":
        sql(run_dir, ("DELETE FROM events WHERE id = ?", (event_id,)))
    elif kind == "insert event":
        sql(run_dir, ("UPDATE events SET id = -(id + 1) WHERE id >= ?", (event_id,)), "UPDATE events SET id = -id WHERE id < 0",
            ("INSERT INTO events (id, time, step, kind, text, data) VALUES (?, 1.0, 1, 'note', 'all fine', NULL)", (event_id,)))
    elif kind == "metric value":
        sql(run_dir, ("UPDATE metrics SET value = ? WHERE name_id = ? AND step = ?",
                      ((row[2] or 0.0) * rng.choice([0.5, 0.999, 1.001]) + 1e-9, row[0], row[1])))
    elif kind == "delete metric":
        sql(run_dir, ("DELETE FROM metrics WHERE name_id = ? AND step = ?", (row[0], row[1])))
    else:
        sql(run_dir, "INSERT INTO names (name) VALUES ('eval/forged')",
            ("INSERT INTO metrics (name_id, step, value, time) SELECT id, ?, 0.0, 1.0 FROM names WHERE name = 'eval/forged'",
             (rng.randrange(last_to + 1),)))
    return f"{kind} (event {event_id}, metric row {row[:2]})"


@pytest.mark.parametrize("seed", range(12))
def test_any_rewrite_of_the_record_with_every_digest_recomputed_is_named_against_a_saved_copy(lab, tmp_path, seed):
    """The class of the tamperings above, generated: a random edit anywhere in the chained events or
    the windowed metric rows, every digest recomputed as a forger would, against the run folder and
    the chain.json saved at the end: exit 3, one line."""
    rng = random.Random(seed)
    run_dir = tmp_path / "hero"
    shutil.copytree(lab["hero"], run_dir)
    what = _random_tampering(run_dir, rng)
    recompute_everything(run_dir)
    for copy in (lab["saved"] / "run-3", lab["saved"] / "chain-3.json"):
        result = verify(run_dir, copy)
        assert result.returncode == ALTERED, (what, copy.name, result.stdout, result.stderr[-500:])


def test_a_published_prediction_edited_after_sealing_is_named(lab, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(lab["site"], site)
    generation = json.loads((site / "site.json").read_text())["generation"]
    meta_file = site / "data" / generation / "runs" / "runs" / "hero" / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["artifacts"]["prediction"]["final_loss"] -= 0.5
    meta_file.write_text(json.dumps(meta))
    named(verify(site, lab["saved"] / "site-2"), "run runs/hero: the published prediction", "final_loss differs")


def test_a_ladder_page_edited_after_sealing_is_named(lab, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(lab["site"], site)
    page = next((site / "ladders" / "l").rglob("ladder.json"))
    view = json.loads(page.read_text())
    view["hero"]["predicted"] -= 0.5
    page.write_text(json.dumps(view))
    named(verify(site, lab["saved"] / "site-2"), "ladder.json", "predicted", "the ladder page was edited")


def test_a_site_whose_chain_was_recomputed_is_named_against_a_saved_site(lab, forged, tmp_path):
    """The forger rewrites the record and publishes again: the site is consistent with itself, not with
    the site a watcher saved."""
    root = tmp_path / "lab"
    (root / "runs").mkdir(parents=True)
    shutil.copytree(forged, root / "runs" / "hero")
    event = band_event(root / "runs" / "hero")
    sql(root / "runs" / "hero", ("UPDATE events SET text = ? WHERE id = ?", ("stayed inside the band", event[0])))
    recompute_everything(root / "runs" / "hero")
    publish(root, tmp_path / "site")
    assert verify(tmp_path / "site").returncode == 0
    named(verify(tmp_path / "site", lab["saved"] / "site-2"), "run runs/hero", f"event {event[0]}", "rewritten")


def test_bad_input_is_one_line_and_exit_2(lab, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "note.txt").write_text("hello")
    for through, args in ((glassroom, [tmp_path / "missing"]), (glassroom_in_process, [tmp_path / "empty"]),
                          (glassroom_in_process, [lab["hero"], "--against", tmp_path / "note.txt"]),
                          (glassroom_in_process, [lab["hero"], "--against", tmp_path / "missing"])):
        result = through("verify", *args)
        assert result.returncode == 2 and result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1, result


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill_after_checkpoint@8", "kill@6"])
def test_a_run_killed_and_resumed_anywhere_verifies(tiny_dataset, tmp_path, fault):
    """Killed between a checkpoint's rename and its event (the event and its window are journaled on
    resume), or between checkpoints (the steps after the checkpoint are redone and their rows logged
    again): the record verifies against the copy saved at the kill."""
    run_dir = tmp_path / "run"
    killed = run_train(run_dir, tiny_dataset, env={"GLASSROOM_FAULTS": fault})
    assert killed.returncode == -9, killed.stderr[-2000:]
    shutil.copytree(run_dir, tmp_path / "saved")
    resumed = run_train(run_dir, tiny_dataset, resume=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    result = verify(run_dir, tmp_path / "saved")
    assert result.returncode == 0, result.stdout + result.stderr
