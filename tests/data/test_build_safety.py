"""`glassroom data build` cannot destroy what it was not asked to: --force only over a glassroom
dataset, a lock per --out (two real processes), stale build folders of killed builds cleared,
special-token text inside documents kept as text, an unfilled vocabulary reported, and a table of
bad inputs that each end in exit 2 with one line and nothing touched."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_helpers import make_corpus, write_recipe
from glassroom.cli import main
from glassroom.data.build import FORMAT, build_dataset, dataset_format
from glassroom.data.mixture import Dataset
from glassroom.data.recipe import load_recipe
from glassroom.errors import GlassroomError
from glassroom.folders import record_owned

EOS = "<|endoftext|>"


def tree_digest(path: Path) -> str:
    """Names and bytes of everything below `path`, hidden files included."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety")
    make_corpus(root)
    recipe = write_recipe(root)
    out = root / "ds"
    build_dataset(load_recipe(recipe), out, workers=1, log=io.StringIO())
    # Folders a careless --out could hit: a browser extension, plain notes, an empty source.
    ext = root / "extension"
    ext.mkdir()
    (ext / "manifest.json").write_text(json.dumps({"manifest_version": 3, "name": "my extension"}))
    (ext / "background.js").write_text("chrome.runtime.onInstalled.addListener(() => {});\n")
    notes = root / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("buy milk\n")
    fake = root / "fake-dataset"  # a manifest.json that only looks like JSON of a dataset
    fake.mkdir()
    (fake / "manifest.json").write_text(json.dumps({"format": "something-else/1", "domains": {}}))
    (fake / "keep.txt").write_text("keep me\n")
    (root / "empty-src").mkdir()
    (root / "empty-src" / "a.txt").write_text("")
    (root / "plain-file").write_text("not a folder\n")
    (root / "not-gzip.jsonl.gz").write_bytes(b"this is not gzip data")
    (root / "folder.yaml").mkdir()
    (root / "binary.yaml").write_bytes(b"\x00\xff\xfe\x01\x80binary")
    (root / "list.yaml").write_text("- 1\n- 2\n")
    bomb = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdef", "bcdefg"):
        bomb.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    (root / "bomb.yaml").write_text("\n".join(bomb) + "\n")
    return root, recipe, out


# ----------------------------------------------------------------------------- --force and --out


@pytest.mark.slow
def test_a_built_dataset_carries_the_format_marker(lab):
    root, _, out = lab
    assert json.loads((out / "manifest.json").read_text())["format"] == FORMAT
    assert dataset_format(out) == FORMAT
    for folder in ("extension", "notes", "fake-dataset", "empty-src"):
        assert dataset_format(root / folder) is None, folder


@pytest.mark.parametrize("folder", ["extension", "notes", "fake-dataset"])
def test_force_never_replaces_a_folder_that_is_not_a_dataset(lab, folder, capsys):
    root, recipe, _ = lab
    before = tree_digest(root)
    code = main(["data", "build", str(recipe), "--out", str(root / folder), "--force", "--workers", "1"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "no valid .glassroom-manifest.json" in line and "not replacing it" in line and folder in line
    assert tree_digest(root) == before


def test_a_symlinked_manifest_does_not_make_a_dataset(lab, tmp_path):
    root, recipe, out = lab
    target = tmp_path / "victim"
    target.mkdir()
    (target / "precious.txt").write_text("mine\n")
    os.symlink(out / "manifest.json", target / "manifest.json")
    assert dataset_format(target) is None
    with pytest.raises(GlassroomError, match="not replacing it"):
        build_dataset(load_recipe(recipe), target, force=True, workers=1, log=io.StringIO())
    assert (target / "precious.txt").read_text() == "mine\n"


@pytest.mark.slow
def test_force_replaces_a_dataset_and_an_empty_folder_is_used(lab, tmp_path):
    root, recipe, out = lab
    ds = tmp_path / "again"
    build_dataset(load_recipe(recipe), ds, workers=1, log=io.StringIO())
    (ds / "shards" / "stale-marker").write_text("from the first build\n")
    with pytest.raises(GlassroomError, match="holds shards/stale-marker, which glassroom data build did not write"):
        build_dataset(load_recipe(recipe), ds, force=True, workers=1, log=io.StringIO())
    record_owned(ds, "data build", ["shards/stale-marker"])  # one the build wrote, as a build that wrote more would
    build_dataset(load_recipe(recipe), ds, force=True, workers=1, log=io.StringIO())
    assert dataset_format(ds) == FORMAT and not (ds / "shards" / "stale-marker").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    build_dataset(load_recipe(recipe), empty, workers=1, log=io.StringIO())  # no --force needed
    assert dataset_format(empty) == FORMAT
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], "lock or build folder left behind"


@pytest.mark.slow
def test_force_refuses_a_dataset_that_also_holds_the_users_files(lab, tmp_path, capsys):
    root, recipe, _ = lab
    ds = tmp_path / "mine"
    build_dataset(load_recipe(recipe), ds, workers=1, log=io.StringIO())
    (ds / "notes.txt").write_text("my notes about this corpus\n")
    before = tree_digest(ds)
    code = main(["data", "build", str(recipe), "--out", str(ds), "--force", "--workers", "1"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "notes.txt" in line and "not replacing it" in line
    assert tree_digest(ds) == before
    (ds / "notes.txt").unlink()
    assert main(["data", "atlas", str(ds), "--k", "2"]) == 0  # the atlas is the dataset's own: replaced
    assert main(["data", "build", str(recipe), "--out", str(ds), "--force", "--workers", "1"]) == 0


def test_out_and_source_folders_may_not_contain_one_another(lab, tmp_path, capsys):
    root, recipe, _ = lab
    inside = root / "pkg_b" / "built"
    code = main(["data", "build", str(recipe), "--out", str(inside),
                 "--set", f"domains.web.sources=[{{kind: files, path: {root / 'pkg_b'}}}]"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "inside the source folder" in line and "pkg_b" in line
    assert not inside.exists()
    # The other way round: a dataset whose own folder is read by a source; --force would delete it.
    ds = tmp_path / "ds"
    build_dataset(load_recipe(recipe), ds, workers=1, log=io.StringIO())
    extra = ds / "shards" / "extra"  # inside the dataset's own folders (files beside them are refused anyway)
    extra.mkdir()
    (extra / "a.txt").write_text("some text of mine " * 20)
    before = tree_digest(ds)
    code = main(["data", "build", str(recipe), "--out", str(ds), "--force",
                 "--set", f"domains.web.sources=[{{kind: files, path: {extra / 'a.txt'}}}]"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and ("inside --out" in line or "which glassroom data build did not write" in line), line
    assert tree_digest(ds) == before


# ----------------------------------------------------------------------------- stale folders, lock


def test_stale_build_folders_of_dead_builds_are_removed(lab, tmp_path):
    root, recipe, _ = lab
    out = tmp_path / "data"
    pid = dead_pid()
    stale = tmp_path / f".data.building-{pid}"
    (stale / "staging").mkdir(parents=True)
    (stale / "staging" / "web.jsonl").write_text("{}\n")
    old = tmp_path / f".data.old-{pid}"
    old.mkdir()
    other = tmp_path / f".data2.building-{pid}"  # another --out's folder: not ours to judge here
    other.mkdir()
    log = io.StringIO()
    build_dataset(load_recipe(recipe), out, workers=1, log=log)
    assert not stale.exists() and not old.exists() and other.exists()
    assert f"removed .data.building-{pid}, left by a build (pid {pid}) that did not finish" in log.getvalue()
    assert dataset_format(out) == FORMAT


@pytest.mark.slow
def test_a_build_killed_between_its_renames_gets_the_old_dataset_back(lab, tmp_path, capsys):
    root, recipe, _ = lab
    out = tmp_path / "data"
    build_dataset(load_recipe(recipe), out, workers=1, log=io.StringIO())
    before = tree_digest(out)
    pid = dead_pid()
    os.rename(out, tmp_path / f".data.old-{pid}")  # what a kill after the first rename leaves
    code = main(["data", "build", str(recipe), "--out", str(out), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "already exists; pass --force" in one_error_line(err)
    assert f"put back {out}" in err
    assert tree_digest(out) == before and not (tmp_path / f".data.old-{pid}").exists()


def test_a_planted_lock_symlink_is_not_followed(lab, tmp_path, capsys):
    root, recipe, _ = lab
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.symlink(victim, tmp_path / ".data.lock")
    code = main(["data", "build", str(recipe), "--out", str(tmp_path / "data"), "--workers", "1"])
    assert code == 2 and "cannot create or open the build lock" in one_error_line(capsys.readouterr().err)
    assert victim.read_text() == "precious\n" and not (tmp_path / "data").exists()


def _start_build(recipe: Path, out: Path) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "glassroom", "data", "build", str(recipe), "--out", str(out),
                             "--workers", "1", "--progress-every", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_build_folder(proc: subprocess.Popen, out: Path) -> Path:
    building = out.parent / f".{out.name}.building-{proc.pid}"
    deadline = time.monotonic() + 60
    while not building.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.005)
    return building


@pytest.mark.slow
def test_a_second_build_to_the_same_out_is_refused_while_the_first_runs(lab, tmp_path):
    root, recipe, _ = lab
    out = tmp_path / "data"
    first = _start_build(recipe, out)
    try:
        building = _wait_for_build_folder(first, out)
        os.kill(first.pid, signal.SIGSTOP)  # hold it mid-build, lock taken
        second = subprocess.run([sys.executable, "-m", "glassroom", "data", "build", str(recipe), "--out", str(out),
                                 "--force", "--workers", "1"], capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        line = one_error_line(second.stderr)
        assert line == f"error: another build (pid {first.pid}) is writing {out}; wait for it to finish or choose another --out"
        assert building.exists(), "the live build's folder was removed"
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert dataset_format(out) == FORMAT
    assert not (tmp_path / ".data.lock").exists() and not building.exists()


@pytest.mark.slow
def test_two_builds_started_together_never_both_succeed(lab, tmp_path):
    root, recipe, _ = lab
    out = tmp_path / "data"
    procs = [_start_build(recipe, out) for _ in range(2)]
    errs = [p.communicate(timeout=180)[1] for p in procs]
    results = [(p.returncode, err) for p, err in zip(procs, errs)]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    err = next(err for code, err in results if code == 2)
    line = one_error_line(err)
    assert "another build (pid" in line or "already exists; pass --force" in line
    assert dataset_format(out) == FORMAT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


@pytest.mark.slow
def test_a_killed_build_leaves_nothing_that_blocks_the_next(lab, tmp_path):
    root, recipe, _ = lab
    out = tmp_path / "data"
    first = _start_build(recipe, out)
    building = _wait_for_build_folder(first, out)
    first.kill()
    first.communicate()
    assert building.exists()  # SIGKILL: no cleanup ran
    second = _start_build(recipe, out)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert f"removed {building.name}, left by a build (pid {first.pid}) that did not finish" in err
    assert not building.exists() and dataset_format(out) == FORMAT


# ----------------------------------------------------------------------------- tokens


def test_special_token_text_inside_a_document_is_ordinary_text(lab, tmp_path):
    root, recipe, _ = lab
    docs = [
        f"How GPT-2 marks the end of a document: it appends {EOS} after the text, so a model "
        f"learns to stop there. A tutorial might print {EOS}{EOS} twice, or write <|endoftext|> "
        f"in the middle of a sentence, and none of that is a document boundary. " * 2,
        f"{EOS} at the very start of a document, then ordinary prose about tokenizers and their "
        f"special tokens, which only the builder may insert between documents. Then {EOS}",
    ]
    src = tmp_path / "tutorial.jsonl"
    src.write_text("".join(json.dumps({"text": d, "id": f"tut-{i}"}) + "\n" for i, d in enumerate(docs)))
    recipe_path = write_recipe(tmp_path, domains={
        "docs": {"sources": [{"kind": "jsonl", "path": str(src), "id_field": "id"},
                             {"kind": "files", "path": str(root / "pkg_b" / "*.py")}]}})
    out = tmp_path / "data"
    build_dataset(load_recipe(recipe_path), out, workers=1, log=io.StringIO())
    ds = Dataset(out)
    tok = ds.tokenizer()
    found = 0
    for split in ("train", "validation"):
        shard = ds.shard("docs", split)
        ids = shard.doc_ids()
        assert int((shard.tokens == ds.eos_id).sum()) == shard.n_docs  # one EOS per document, no more
        for i, doc_id in enumerate(ids):
            tokens = shard.doc_tokens(i).tolist()
            assert ds.eos_id not in tokens, doc_id
            if doc_id.endswith(("tut-0", "tut-1")):
                assert tok.decode(tokens) == docs[int(doc_id[-1])].strip()
                found += 1
    assert found == 2


def test_encoding_keeps_any_special_token_text_as_text(lab):
    from glassroom.data.tokenizer import encode_documents, load_tokenizer

    root, _, out = lab
    tok = load_tokenizer(out / "tokenizer.json")
    tok.add_special_tokens(["<|im_start|>"])
    special = {tok.token_to_id(EOS), tok.token_to_id("<|im_start|>")}
    text = f"<|im_start|>user says {EOS} and <|im_start|> again"
    ids, offsets = encode_documents(tok, [text, "plain"], tok_dtype := __import__("numpy").dtype("uint16"))
    first = ids[offsets[0]: offsets[1] - 1].tolist()
    assert not special & set(first) and tok.decode(first) == text
    assert ids.dtype == tok_dtype and ids[offsets[1] - 1] == tok.token_to_id(EOS)


def test_a_vocabulary_the_corpus_cannot_fill_is_reported(lab, tmp_path):
    root, recipe, _ = lab
    log = io.StringIO()
    m = build_dataset(load_recipe(recipe, ["tokenizer.vocab_size=60000", "tokenizer.sample_bytes=200K"]),
                      tmp_path / "data", workers=1, log=log)
    filled = m["tokenizer"]["vocab_size"]
    assert filled < 60000
    assert f"warning: vocabulary 60000 asked, the corpus filled {filled:,}" in log.getvalue()
    assert m["tokenizer"]["vocab_size_asked"] == 60000
    assert m["tokenizer"]["warnings"] == [f"vocabulary 60000 asked, the corpus filled {filled:,}"]
    for split in ("train", "validation"):
        assert 0 < m["domains"]["web"][split]["max_token_id"] < filled


def test_a_filled_vocabulary_has_no_warning(lab):
    root, recipe, out = lab
    m = json.loads((out / "manifest.json").read_text())
    assert m["tokenizer"]["vocab_size"] == m["tokenizer"]["vocab_size_asked"] == 1024
    assert "warnings" not in m["tokenizer"]


# ----------------------------------------------------------------------------- bad inputs


BAD_INPUTS = [
    # (name, arguments with {root}, {recipe} and {ds} placeholders, a fragment of the error line)
    ("recipe missing", ["data", "build", "{root}/nope.yaml", "--out", "{root}/o"], "nope.yaml: no such file"),
    ("recipe is a folder", ["data", "build", "{root}/folder.yaml", "--out", "{root}/o"], "is a folder"),
    ("recipe is binary", ["data", "build", "{root}/binary.yaml", "--out", "{root}/o"], "not a text file"),
    ("recipe not a mapping", ["data", "build", "{root}/list.yaml", "--out", "{root}/o"], "expected a YAML mapping"),
    ("recipe is a device", ["data", "build", "/dev/null", "--out", "{root}/o"], "not a regular file"),
    ("alias bomb", ["data", "build", "{root}/bomb.yaml", "--out", "{root}/o"], "refused: expands to more than"),
    ("unknown key", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "tokenizer.vocab=5"],
     "recipe.tokenizer.vocab: unknown key"),
    ("bad type", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "dedup.num_perm=many"],
     "recipe.dedup.num_perm: expected a whole number"),
    ("domains a list", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "domains=[1, 2]"],
     "recipe.domains: expected a mapping"),
    ("negative size", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "tokenizer.sample_bytes=-1000000"],
     "recipe.tokenizer.sample_bytes: must be positive"),
    ("negative source cap", ["data", "build", "{recipe}", "--out", "{root}/o",
                             "--set", "domains.web.sources=[{kind: files, path: {root}/pkg_b, max_bytes: -5}]"],
     "max_bytes: must be positive"),
    ("zero vocabulary", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "tokenizer.vocab_size=0"],
     "recipe.tokenizer.vocab_size: must be between 300 and 1M"),
    ("NaN threshold", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "dedup.threshold=.nan"],
     "recipe.dedup.threshold"),
    ("unknown source kind", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "domains.web.sources=[{kind: wiki}]"],
     "kind: 'wiki' is not one of"),
    ("bad domain name", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "domains={'../x': {sources: [{kind: bible}]}}"],
     "domain names use letters"),
    ("bad man sections", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "domains.web.sources=[{kind: man, sections: 1-x}]"],
     "sections: '1-x' is not a list of man sections"),
    ("source path missing", ["data", "build", "{recipe}", "--out", "{root}/o",
                             "--set", "domains.web.sources=[{kind: files, path: {root}/nowhere/*.txt}]"], "no files match"),
    ("empty source", ["data", "build", "{recipe}", "--out", "{root}/o", "--workers", "1",
                      "--set", "domains.web.sources=[{kind: files, path: {root}/empty-src}]"], "gave no text"),
    ("fake .gz source", ["data", "build", "{recipe}", "--out", "{root}/o", "--workers", "1",
                         "--set", "domains.web.sources=[{kind: jsonl, path: {root}/not-gzip.jsonl.gz}]"], "unreadable files 1"),
    ("archive not an archive", ["data", "build", "{recipe}", "--out", "{root}/o",
                                "--set", "domains.web.sources=[{kind: archive, path: {root}/plain-file}]"],
     "is not a tar or zip archive"),
    ("tokenizer.path not a tokenizer", ["data", "build", "{recipe}", "--out", "{root}/o",
                                        "--set", "tokenizer.path={root}/plain-file"], "not a valid tokenizer.json"),
    ("out inside a source", ["data", "build", "{recipe}", "--out", "{root}/pkg_b/o",
                             "--set", "domains.web.sources=[{kind: files, path: {root}/pkg_b}]"], "inside the source folder"),
    ("source reads /", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "domains.web.sources=[{kind: files, path: /}]"],
     "is inside the source folder /,"),
    ("out is a file", ["data", "build", "{recipe}", "--out", "{root}/plain-file", "--force"], "exists and is not a folder"),
    ("out is the recipe", ["data", "build", "{recipe}", "--out", "{recipe}", "--force"], "exists and is not a folder"),
    ("out parent is a file", ["data", "build", "{recipe}", "--out", "{root}/plain-file/o"], "is a file, not a folder"),
    ("out parent missing", ["data", "build", "{recipe}", "--out", "{root}/no/such/o"], "no such folder for --out"),
    ("out not a dataset", ["data", "build", "{recipe}", "--out", "{root}/notes", "--force"], "not replacing it"),
    ("out is the corpus root", ["data", "build", "{recipe}", "--out", "{root}", "--force"], "not replacing it"),
    ("out exists", ["data", "build", "{recipe}", "--out", "{ds}"], "already exists; pass --force"),
    ("out name too long", ["data", "build", "{recipe}", "--out", "{root}/" + "x" * 300], "folder name is too long"),
    ("out parent name too long", ["data", "build", "{recipe}", "--out", "{root}/" + "x" * 300 + "/o"],
     "File name too long"),
    ("workers 0", ["data", "build", "{recipe}", "--out", "{root}/o", "--workers", "0"], "--workers: must be at least 1"),
    ("progress NaN", ["data", "build", "{recipe}", "--out", "{root}/o", "--progress-every", "nan"], "--progress-every"),
    ("bad --set", ["data", "build", "{recipe}", "--out", "{root}/o", "--set", "novalue"], "expected key.path=value"),
    ("mixture on notes", ["data", "mixture", "{root}/notes", "--weights", "a=1", "--tokens", "1M"], "not a built dataset"),
    ("mixture on an extension", ["data", "mixture", "{root}/extension", "--weights", "a=1", "--tokens", "1M"],
     "not a glassroom dataset manifest"),
    ("mixture on a file", ["data", "mixture", "{root}/plain-file", "--weights", "a=1", "--tokens", "1M"], "is a file"),
    ("mixture unknown domain", ["data", "mixture", "{ds}", "--weights", "wiki=1", "--tokens", "1M"], "no domain 'wiki'"),
    ("mixture NaN epochs", ["data", "mixture", "{ds}", "--weights", "web=1", "--tokens", "1M", "--max-epochs", "nan"],
     "--max-epochs"),
    ("mixture zero seq-len", ["data", "mixture", "{ds}", "--weights", "web=1", "--tokens", "1M", "--seq-len", "0"],
     "--seq-len"),
    ("mixture on a too-long name", ["data", "mixture", "{root}/" + "x" * 300, "--weights", "a=1", "--tokens", "1M"],
     "File name too long"),
    ("atlas on notes", ["data", "atlas", "{root}/notes"], "not a built dataset"),
    ("atlas on an extension", ["data", "atlas", "{root}/extension"], "not a glassroom dataset manifest"),
    ("atlas on a missing folder", ["data", "atlas", "{root}/nowhere"], "no such folder"),
]


@pytest.mark.parametrize("name,args,fragment", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_and_nothing_touched(lab, capsys, name, args, fragment):
    root, recipe, out = lab
    argv = [a.replace("{root}", str(root)).replace("{recipe}", str(recipe)).replace("{ds}", str(out)) for a in args]
    before = tree_digest(root)
    code = main(argv)
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert fragment in line, line
    assert tree_digest(root) == before, "a refused command changed files"


def test_bad_input_through_a_real_process(lab):
    root, recipe, _ = lab
    proc = subprocess.run([sys.executable, "-m", "glassroom", "data", "build", str(root / "bomb.yaml"), "--out", str(root / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "bomb.yaml" in proc.stderr and "Traceback" not in proc.stderr
