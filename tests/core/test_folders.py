"""glassroom/folders.py's ownership manifest, and the four commands that write an output folder with
it (publish, export, data build, data chatset): they never delete or overwrite what they did not
write. For each command, random files planted in its --out (random names and depths, a .git/HEAD,
a stray site.json, a manifest whose digest is wrong) are refused in one line with exit 2, every byte
kept, with and without --force; its own earlier output is replaced and leaves no stale file."""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
import string
import zlib
from pathlib import Path

import pytest

from data_helpers import error_line, make_corpus, write_recipe
from glassroom.cli import main
from glassroom.errors import GlassroomError
from glassroom.folders import OWNED, check_owned, folder_files, read_owned, record_owned, write_owned
from hf_helpers import train_tiny_run
from web_helpers import write_run


def snapshot(folder: Path) -> dict[str, str]:
    """Every path below `folder` (hidden ones included) with its bytes' sha256 (folders: "dir")."""
    return {p.relative_to(folder).as_posix(): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*"))}


# ---------------------------------------------------------------------- the manifest itself


def test_the_manifest_lists_what_was_written_and_refuses_the_rest(tmp_path):
    out = tmp_path / "out"
    assert check_owned(out, "cmd") is None  # missing: nothing to lose
    (out / "empty" / "deeper").mkdir(parents=True)
    assert check_owned(out, "cmd") is None  # only empty folders: nothing to lose
    (out / "a.txt").write_text("a")
    (out / "sub" / "b.bin").parent.mkdir()
    (out / "sub" / "b.bin").write_bytes(b"\x00b")
    body = write_owned(out, "cmd")
    assert body["files"] == {"a.txt": hashlib.sha256(b"a").hexdigest(), "sub/b.bin": hashlib.sha256(b"\x00b").hexdigest()}
    assert check_owned(out, "cmd")["state"] == "complete" and read_owned(out, "other") is None
    with pytest.raises(GlassroomError, match="holds a.txt, and no valid .glassroom-manifest.json of glassroom other"):
        check_owned(out, "other")  # another command's folder
    (out / "sub" / "b.bin").write_bytes(b"edited")
    with pytest.raises(GlassroomError, match="sub/b.bin was changed since glassroom cmd wrote it"):
        check_owned(out, "cmd")
    (out / "sub" / "b.bin").write_bytes(b"\x00b")
    (out / "sub" / "mine.txt").write_text("mine")
    with pytest.raises(GlassroomError, match="holds sub/mine.txt, which glassroom cmd did not write"):
        check_owned(out, "cmd")
    record_owned(out, "cmd", ["sub/mine.txt"])  # a later command on the same folder adds its file
    assert set(check_owned(out, "cmd")["files"]) == {"a.txt", "sub/b.bin", "sub/mine.txt"}
    # A manifest edited by hand (the body changed, the digest not) is no manifest.
    forged = json.loads((out / OWNED).read_text())
    forged["files"]["c.txt"] = forged["files"]["a.txt"]
    (out / OWNED).write_text(json.dumps(forged))
    assert read_owned(out, "cmd") is None
    with pytest.raises(GlassroomError, match="holds a.txt, and no valid"):
        check_owned(out, "cmd")
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / OWNED).write_text("{}")
    with pytest.raises(GlassroomError, match=f"holds {OWNED}, and no valid"):
        check_owned(lone, "cmd")  # a stray manifest alone does not make a folder ours


def test_a_symbolic_link_is_never_taken_for_a_file_written(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "target.txt").write_text("elsewhere")
    (out / "a.txt").write_text("a")
    write_owned(out, "cmd")
    (out / "a.txt").unlink()
    (out / "a.txt").symlink_to(tmp_path / "target.txt")
    with pytest.raises(GlassroomError, match="a.txt is a symbolic link, which glassroom cmd never writes"):
        check_owned(out, "cmd")
    (out / "a.txt").unlink()
    (out / "dir-link").symlink_to(tmp_path)
    assert folder_files(out) == ["dir-link"]
    with pytest.raises(GlassroomError, match="dir-link is a symbolic link"):
        check_owned(out, "cmd")


# ---------------------------------------------------------------------- the four commands


@pytest.fixture(scope="module")
def inputs(tiny_dataset, tmp_path_factory) -> dict[str, Path]:
    """What each command reads: a lab of runs (publish), a run trained 4 steps (export), a recipe of
    real text (data build); data chatset reads the stdlib's docstrings."""
    root = tmp_path_factory.mktemp("owned")
    write_run(root / "lab" / "runs" / "a", steps=120, every=20, eval_every=60, state="finished")
    make_corpus(root / "corpus")
    return {"lab": root / "lab", "run": train_tiny_run(root, "llama", tiny_dataset),
            "recipe": write_recipe(root / "corpus", tokenizer={"vocab_size": 512, "sample_bytes": "200K"})}


COMMANDS = {  # argv with {out}; whether it has --force; a file of its own a later run no longer writes
    "publish": (["publish", "{lab}", "--out", "{out}"], False, "runs/gone/index.html"),
    "export": (["export", "{run}", "--out", "{out}"], True, "model-00001-of-00002.safetensors"),
    "data build": (["data", "build", "{recipe}", "--out", "{out}", "--workers", "1"], True, "shards/stale.bin"),
    "data chatset": (["data", "chatset", "--out", "{out}", "--sources", "python", "--max-per-source", "20"], True,
                     "domains/old/sft-train.jsonl"),
}
COMMAND_NAMES = {"publish": "publish", "export": "export", "data build": "data build", "data chatset": "data chatset"}


def _plant(out: Path, seed: int) -> None:
    """Random user files at random depths (some inside the command's own folders), a .git/HEAD, a
    stray site.json and a manifest that looks like the command's but whose digest is wrong."""
    rng = random.Random(seed)
    existing = [p for p in out.rglob("*") if p.is_dir()] if out.is_dir() else []
    for _ in range(5):
        where = rng.choice([out, *existing]) if existing and rng.random() < 0.5 else out
        for _ in range(rng.randint(0, 3)):
            where = where / "".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 8)))
        where.mkdir(parents=True, exist_ok=True)
        name = "".join(rng.choices(string.ascii_letters + string.digits + "._-", k=rng.randint(1, 12))).lstrip(".") or "x"
        (where / name).write_bytes(rng.randbytes(rng.randint(0, 300)))
    (out / ".git").mkdir(exist_ok=True)
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    if not (out / "site.json").exists():
        (out / "site.json").write_text('{"generation": "g1", "runs": []}')


def _forge(out: Path, command: str) -> None:
    """A manifest that lists everything in `out` as the command's, with a digest that is not its body's."""
    files = {rel: hashlib.sha256((out / rel).read_bytes()).hexdigest() for rel in folder_files(out)}
    body = {"format": "glassroom-owned/1", "command": command, "state": "complete", "files": files,
            "digest": "0" * 64}
    (out / OWNED).write_text(json.dumps(body))


@pytest.fixture(scope="module")
def first_outputs(tmp_path_factory) -> dict[str, Path]:
    """Each command's first output into a new folder, written once for the module (by `command`)."""
    return {"root": tmp_path_factory.mktemp("first")}


class TestCommandsDeleteOnlyWhatTheyWrote:
    @pytest.fixture(params=list(COMMANDS), ids=lambda c: c.replace(" ", "-"))
    def command(self, request, inputs, first_outputs):
        argv, has_force, stale = COMMANDS[request.param]

        def run(out: Path, force: bool, capsys) -> tuple[int, str]:
            args = [a.format(out=out, **inputs) for a in argv] + (["--force"] if force else [])
            code = main(args)
            return code, capsys.readouterr().err

        def first_run(out: Path, capsys) -> tuple[int, str]:
            """What run(out, False) gives in a new folder: the command's first output (written once,
            then copied)."""
            if request.param not in first_outputs:
                written = first_outputs["root"] / request.param.replace(" ", "-") / "out"
                written.parent.mkdir()
                code, err = run(written, False, capsys)
                if code != 0:
                    return code, err
                first_outputs[request.param] = written
            shutil.copytree(first_outputs[request.param], out, symlinks=True, dirs_exist_ok=True)
            return 0, ""

        return request.param, run, has_force, stale, first_run

    @pytest.mark.slow
    @pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
    @pytest.mark.parametrize("where", ["new-folder", "own-output", "own-output-forged-manifest"])
    def test_planted_files_are_refused_in_one_line_and_kept(self, command, where, force, tmp_path, capsys):
        name, run, has_force, _, first_run = command
        if force and not has_force:
            pytest.skip(f"{name} has no --force (every publish replaces its own site)")
        out = tmp_path / "parent" / "out"
        out.mkdir(parents=True)
        if where != "new-folder":
            code, err = first_run(out, capsys)
            assert code == 0, err
        _plant(out, seed=zlib.crc32(f"{name} {where} {force}".encode()))
        if where == "own-output-forged-manifest":
            _forge(out, COMMAND_NAMES[name])
        before = snapshot(tmp_path / "parent")
        code, err = run(out, force, capsys)
        line = error_line(err)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "not replacing it" in line or "not publishing over it" in line, line
        assert snapshot(tmp_path / "parent") == before  # every planted file byte for byte, nothing beside DIR

    @pytest.mark.slow
    def test_an_edited_file_of_its_own_is_refused(self, command, tmp_path, capsys):
        name, run, has_force, _, first_run = command
        out = tmp_path / "out"
        code, err = first_run(out, capsys)
        assert code == 0, err
        edited = folder_files(out)[len(folder_files(out)) // 2]
        (out / edited).write_bytes((out / edited).read_bytes() + b"\nmy edit\n")
        before = snapshot(tmp_path)
        code, err = run(out, has_force, capsys)
        assert code == 2 and f"{edited} was changed since glassroom {COMMAND_NAMES[name]} wrote it" in error_line(err)
        assert snapshot(tmp_path) == before

    @pytest.mark.slow
    def test_its_own_output_is_replaced_and_leaves_no_stale_file(self, command, tmp_path, capsys):
        name, run, has_force, stale, first_run = command
        out = tmp_path / "out"
        code, err = first_run(out, capsys)
        assert code == 0, err
        (out / stale).parent.mkdir(parents=True, exist_ok=True)
        (out / stale).write_bytes(b"written by an earlier run of the command")
        record_owned(out, COMMAND_NAMES[name], [stale])  # as that run would have listed it
        if has_force:
            code, err = run(out, False, capsys)
            assert code == 2 and "--force" in error_line(err)
        code, err = run(out, has_force, capsys)
        assert code == 0, err
        owned = read_owned(out, COMMAND_NAMES[name])
        assert owned is not None and owned["state"] == "complete"
        assert not (out / stale).exists()
        assert folder_files(out) == sorted(owned["files"])  # everything there is listed, and only that
        assert not [p.name for p in tmp_path.iterdir() if p.name != "out"], "left beside --out"


def test_a_publish_killed_midway_is_taken_up_by_the_next(inputs, tmp_path, monkeypatch):
    from glassroom.web import publish as site

    out = tmp_path / "site"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(site, "publish_feeds", killed)  # after the data and pages, before site.json
        with pytest.raises(KeyboardInterrupt):
            site.publish(inputs["lab"], out)
    assert read_owned(out, "publish")["state"] == "in progress" and not (out / "site.json").exists()
    assert (out / "index.html").is_file()
    # What a SIGKILL inside folders.replace_file leaves: a page and the manifest half-written.
    (out / ".compare.html.tmp-999999").write_text("<html")
    (out / f".{OWNED}.tmp-999999").write_text('{"format"')
    site.publish(inputs["lab"], out, log=io.StringIO().write)
    assert not (out / ".compare.html.tmp-999999").exists() and not (out / f".{OWNED}.tmp-999999").exists()
    owned = read_owned(out, "publish")
    assert owned["state"] == "complete" and folder_files(out) == sorted(owned["files"])
    assert (out / "site.json").is_file()
    # Stopped again: a file outside the site's layout put there since is still not taken for the site's.
    with monkeypatch.context() as patch:
        patch.setattr(site, "publish_feeds", killed)
        with pytest.raises(KeyboardInterrupt):
            site.publish(inputs["lab"], out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(GlassroomError, match="holds notes.txt, which glassroom publish did not write"):
        site.publish(inputs["lab"], out)
    assert (out / "notes.txt").read_text() == "mine"


def test_a_stray_site_json_does_not_make_a_site(inputs, tmp_path):
    from glassroom.web.publish import publish

    out = tmp_path / "site"
    for rel, text in (("site.json", "{}"), ("runs/mine/index.html", "<p>mine</p>"), ("data/g1/x.json", "[1]")):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    before = snapshot(tmp_path)
    with pytest.raises(GlassroomError, match="holds data/g1/x.json, and no valid .glassroom-manifest.json"):
        publish(inputs["lab"], out)
    assert snapshot(tmp_path) == before
