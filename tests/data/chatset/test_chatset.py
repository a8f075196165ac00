"""`glassroom data chatset`: a conversation and preference set from the man pages, the stdlib's
docstrings and the dictd dictionaries on this machine; deterministic, split by subject, answers
that are the sources' own text, recipes that `glassroom data build` reads, one-line errors."""

from __future__ import annotations

import gzip
import inspect
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from data_helpers import run_cli, error_line
from glassroom.cli import main
from glassroom.data.chatset import dictionary, man, pydoc
from glassroom.data.chatset.common import answer, squash
from glassroom.folders import OWNED

CAP = 250
SOURCES = ("man", "python", "gcide", "wn")


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def data_files(folder: Path) -> dict[str, bytes]:
    """Every file but the recipes (they name the folder's own path) and the ownership manifest (it
    holds the recipes' sha256)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix != ".yaml" and p.name != OWNED}


@pytest.fixture(scope="module")
def chatset(tmp_path_factory):
    root = tmp_path_factory.mktemp("chatset")
    out = root / "set"
    assert main(["data", "chatset", "--out", str(out), "--max-per-source", str(CAP), "--seed", "3"]) == 0
    return out


@pytest.mark.slow
def test_counts_files_and_licences(chatset):
    info = json.loads((chatset / "chatset.json").read_text())
    assert info["seed"] == 3 and info["format"] == "glassroom-chatset/1"
    assert list(info["sources"]) == list(SOURCES) and info["skipped_sources"] == {}
    sft = {part: records(chatset / "sft" / f"{part}.jsonl") for part in ("train", "heldout")}
    dpo = {part: records(chatset / "dpo" / f"{part}.jsonl") for part in ("train", "heldout")}
    for part in ("train", "heldout"):
        assert info["totals"]["sft"][part] == len(sft[part]) and info["totals"]["dpo"][part] == len(dpo[part])
    per_source = Counter(r["source"] for part in sft.values() for r in part)
    for name in SOURCES:  # each source is capped, whole subjects at a time, and nearly fills its cap
        assert CAP - 10 <= per_source[name] <= CAP, per_source
    held = len(sft["heldout"]) / (len(sft["train"]) + len(sft["heldout"]))
    assert 0.02 < held < 0.09
    want = {"man": r"^[a-z0-9.+-]+: see /usr/share/doc/[a-z0-9.+-]+/copyright$", "python": "^PSF-2.0",
            "gcide": "^GPL-2.0-or-later", "wn": "^WordNet"}
    for r in sft["train"] + dpo["heldout"]:
        assert re.match(want[r["source"]], r["licence"]), r
    for r in sft["train"]:
        roles = [m["role"] for m in r["messages"]]
        assert roles in (["user", "assistant"], ["system", "user", "assistant"])
    systems = sum(r["messages"][0]["role"] == "system" for r in sft["train"])
    assert 0.15 < systems / len(sft["train"]) < 0.45
    readme = (chatset / "README.md").read_text()
    assert "PSF-2.0" in readme and "GPL-2.0-or-later" in readme and "| man | man |" in readme
    # the domain files hold the same records, split by domain, for the recipes
    by_domain = sum(len(records(p)) for p in (chatset / "domains").glob("*/sft-train.jsonl"))
    assert by_domain == len(sft["train"])
    assert sorted(p.name for p in (chatset / "domains").iterdir()) == ["dictionary", "man", "python"]


@pytest.mark.slow
def test_question_phrasing_varies(chatset):
    questions = [r["messages"][-2]["content"] for r in records(chatset / "sft" / "train.jsonl") if r["source"] == "wn"]
    openings = Counter(q.split("'")[0] for q in questions)
    assert len(openings) >= 4 and max(openings.values()) < 0.5 * len(questions)


@pytest.mark.slow
def test_no_subject_in_both_splits(chatset):
    for task in ("sft", "dpo"):
        train = {r["subject"] for r in records(chatset / task / "train.jsonl")}
        held = {r["subject"] for r in records(chatset / task / "heldout.jsonl")}
        assert held and not train & held
    # a word asked of both dictionaries is in one split for both
    both = Counter()
    for part in ("train", "heldout"):
        for r in records(chatset / "sft" / f"{part}.jsonl"):
            if r["source"] in ("gcide", "wn"):
                both[r["subject"]] += 1
    assert any(n == 2 for n in both.values())


@pytest.mark.slow
def test_pairs_reject_another_subjects_answer(chatset):
    sft = {r["id"]: r for part in ("train", "heldout") for r in records(chatset / "sft" / f"{part}.jsonl")}
    answers_by_kind: dict[tuple, set] = {}
    for r in sft.values():
        answers_by_kind.setdefault(tuple(r["id"].split("/")[:2]), set()).add(r["messages"][-1]["content"])
    pairs = records(chatset / "dpo" / "train.jsonl") + records(chatset / "dpo" / "heldout.jsonl")
    assert len(pairs) >= 0.98 * len(sft)
    for p in pairs:
        conv = sft[p["id"]]
        assert p["chosen"] == conv["messages"][-1]["content"]
        assert p["rejected"] != p["chosen"] and p["rejected"].strip()
        prompt = conv["messages"][:-1]
        assert p["prompt"] == (prompt[0]["content"] if len(prompt) == 1 else prompt)
    # the rejected text is another fact's: it differs from the chosen one in its body, not only its framing
    wn = [p for p in pairs if p["source"] == "wn"]
    assert all(p["rejected"].split(": ")[0] == p["chosen"].split(": ")[0] for p in wn)  # the same framing
    subjects_of: dict[str, set] = {}  # a definition -> the words it answers
    for r in sft.values():
        if r["source"] == "wn":
            subjects_of.setdefault(r["messages"][-1]["content"].split(": ", 1)[1], set()).add(r["subject"])
    for p in wn:  # around the definition of another word of the set
        assert subjects_of[p["rejected"].split(": ", 1)[1]] - {p["subject"]}, p


@pytest.mark.slow
def test_same_seed_same_bytes_and_force_replaces_only_a_chatset(chatset, tmp_path, capsys):
    again = tmp_path / "again"
    shutil.copytree(chatset, again)  # an earlier chat set, its manifest included: --force may replace it
    (again / "chatset.json").write_text("{}")
    code, _, err = run_cli(["data", "chatset", "--out", str(again), "--force"], capsys)
    assert code == 2 and "chatset.json was changed since" in error_line(err)  # edited since: not replaced
    (again / "chatset.json").write_bytes((chatset / "chatset.json").read_bytes())
    code, out, err = run_cli(["data", "chatset", "--out", str(again), "--max-per-source", str(CAP), "--seed", "3",
                              "--force"], capsys)
    assert code == 0, err
    assert data_files(again) == data_files(chatset)
    assert str(again.resolve()) in (again / "sft.yaml").read_text()
    other = tmp_path / "other"
    assert main(["data", "chatset", "--out", str(other), "--max-per-source", str(CAP), "--seed", "4",
                 "--sources", "wn"]) == 0
    wn3 = [r for r in records(chatset / "sft" / "train.jsonl") if r["source"] == "wn"]
    wn4 = records(other / "sft" / "train.jsonl")
    assert {r["id"] for r in wn3} != {r["id"] for r in wn4}  # another seed draws other words


def test_ls_and_grep_answers_are_their_man_pages(tmp_path):
    skipped = Counter()
    facts = {f.id: f for f in man.facts(0, Path("/usr/share/man"), Path("/var/lib/dpkg/info"), skipped)}
    ls = facts["man/purpose/ls"]
    grep_v = facts.get("man/option/grep -v") or facts.get("man/which_option/grep -v")
    rendered = subprocess.run(["groff", "-mandoc", "-Tutf8", "-rLL=250n", "-rHY=0", "-P-cbou"],
                              input=gzip.decompress(Path("/usr/share/man/man1/ls.1.gz").read_bytes()),
                              capture_output=True, env=dict(os.environ, LC_ALL="C.UTF-8")).stdout.decode()
    assert "ls - list directory contents" in squash(rendered)  # what `man ls` shows under NAME
    assert ls.body == "list directory contents" and "list directory contents" in answer(ls, 0)
    assert ls.licence == "coreutils: see /usr/share/doc/coreutils/copyright"
    assert "`ls`" in answer(ls, 0)
    if grep_v is not None:  # grep's page gives at most a few options, drawn by the seed
        assert "Invert the sense of matching" in answer(grep_v, 0)
    options = [f for f in facts.values() if f.kind.name == "option" and f.subject == "man:ls"]
    for f in options:  # each option's text is in the rendered page
        assert squash(f.body) in squash(rendered).replace("‐", "-"), f.body
    assert max(Counter(f.subject.split(" ")[0].split("_")[0] for f in facts.values()
                       if f.kind.name == "purpose").values()) <= man.FAMILY_PAGES


@pytest.mark.slow
def test_python_answers_are_the_docstrings():
    import json as json_module

    facts = {f.id: f for f in pydoc.facts(0, pydoc.stdlib_dir(), Counter())}
    does = facts["python/does/json.dumps"]
    assert does.body == squash(inspect.getdoc(json_module.dumps).split("\n\n")[0])
    call = facts["python/call/json.dumps"]
    assert call.body == str(inspect.signature(json_module.dumps))
    method = facts["python/call/json.decoder.JSONDecoder.decode"]
    assert "self" not in method.body and method.body.startswith("(s")
    assert f"`json.dumps{call.body}`" in answer(call, 0)
    assert not any("._" in f.subject or f.subject.startswith("python:_") for f in facts.values())


@pytest.mark.slow
def test_dictionary_answers_are_first_definitions():
    facts = {f.id: f for f in dictionary.facts(0, Path("/usr/share/dictd"), ["gcide", "wn"], Counter())}
    entries = dict(dictionary.entries(Path("/usr/share/dictd"), "wn"))
    dog = facts["wn/meaning/dog"]
    assert dog.body.startswith("a member of the genus Canis") and dog.body in squash(entries["dog"])
    assert "syn:" not in " ".join(f.body for f in list(facts.values())[:5000])
    assert not any("{" in f.body or "[1913" in f.body for f in facts.values())
    epigram = facts["gcide/meaning/epigram"]
    assert epigram.body.startswith("A short poem treating concisely and pointedly of a single thought")
    assert epigram.fields["pos"] == "noun"


@pytest.mark.slow
def test_recipes_build_sft_and_dpo_datasets(chatset, tmp_path):
    out = tmp_path / "sft-data"
    assert main(["data", "build", str(chatset / "sft.yaml"), "--out", str(out), "--workers", "1",
                 "--set", "tokenizer.vocab_size=512"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "sft" and sorted(manifest["domains"]) == ["dictionary", "man", "python"]
    held = Counter(r["source"] for r in records(chatset / "sft" / "heldout.jsonl"))
    assert manifest["domains"]["man"]["validation"]["documents"] == held["man"]
    assert manifest["domains"]["dictionary"]["validation"]["documents"] == held["gcide"] + held["wn"]
    dpo = tmp_path / "dpo-data"
    assert main(["data", "chatset", "--out", str(tmp_path / "with-tok"), "--max-per-source", "60", "--sources",
                 "python", "--tokenizer", str(out / "tokenizer.json")]) == 0
    recipe = tmp_path / "with-tok" / "dpo.yaml"
    assert f'path: "{(out / "tokenizer.json").resolve()}"' in recipe.read_text()
    assert main(["data", "build", str(recipe), "--out", str(dpo), "--workers", "1"]) == 0
    manifest = json.loads((dpo / "manifest.json").read_text())
    pairs = len(records(tmp_path / "with-tok" / "dpo" / "train.jsonl"))
    assert manifest["task"] == "dpo" and manifest["domains"]["python"]["train"]["documents"] == 2 * pairs


def test_bad_input_is_one_line(tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    for force in ([], ["--force"]):  # a folder this command did not write: never replaced
        code, _, err = run_cli(["data", "chatset", "--out", str(full), *force], capsys)
        assert code == 2 and "holds notes.txt" in error_line(err) and "even with --force" in error_line(err)
    assert (full / "notes.txt").read_text() == "mine" and sorted(os.listdir(full)) == ["notes.txt"]
    (tmp_path / "file").write_text("mine")
    code, _, err = run_cli(["data", "chatset", "--out", str(tmp_path / "file"), "--force"], capsys)
    assert code == 2 and "is a file" in error_line(err) and (tmp_path / "file").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli(["data", "chatset", "--out", str(tmp_path / "a"), "--sources", "man", "--man-dir", str(empty)], capsys)
    assert code == 2 and "no man pages in" in error_line(err) and not (tmp_path / "a").exists()
    code, _, err = run_cli(["data", "chatset", "--out", str(tmp_path / "a"), "--sources", "gcide,wn",
                            "--dictd-dir", str(empty)], capsys)
    assert code == 2 and "dictd database 'gcide'" in error_line(err)
    for args, words in ((["--sources", "man,bogus"], "unknown source 'bogus'"),
                        (["--max-per-source", "0"], "--max-per-source"),
                        (["--tokenizer", str(tmp_path / "nope.json")], "--tokenizer")):
        code, _, err = run_cli(["data", "chatset", "--out", str(tmp_path / "a"), *args], capsys)
        assert code == 2 and words in error_line(err), err
    assert not (tmp_path / "a").exists()


@pytest.mark.slow
def test_a_missing_source_is_a_counted_skip(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "set"
    code, stdout, err = run_cli(["data", "chatset", "--out", str(out), "--sources", "man,python", "--man-dir", str(empty),
                                 "--max-per-source", "40"], capsys)
    assert code == 0 and "note: source man skipped: no man pages in" in err
    info = json.loads((out / "chatset.json").read_text())
    assert list(info["sources"]) == ["python"] and "man" in info["skipped_sources"]
    assert "skipped: no man pages" in (out / "README.md").read_text()
    assert "man:" not in (out / "sft.yaml").read_text() and "python:" in (out / "sft.yaml").read_text()


def _page(name: str) -> list:
    from glassroom.data.chatset.roff import paragraphs

    return paragraphs(gzip.decompress(Path(f"/usr/share/man/man1/{name}.1.gz").read_bytes()).decode("utf-8", "replace"))


def test_roff_reads_real_pages():
    def name_line(page):
        return next(p.body for p in page if p.section == "NAME" and p.body)

    tags = lambda page: [p.tag for p in page if p.tag]  # noqa: E731
    assert "-f, --fast" in tags(_page("skill"))  # `.BR \-f , \ \-\-fast`: an escaped space inside an argument
    assert "-o file, --output=file" in tags(_page("memusagestat"))
    assert name_line(_page("readtags")) == "readtags - Find tag file entries matching specified names"  # .de skipped
    assert name_line(_page("choom")) == "choom - display and adjust OOM-killer score."  # `.  am` ... `.  .` skipped
    assert name_line(_page("ssh")) == "ssh - OpenSSH remote login client"  # mdoc .Nm/.Nd
    ssh = {p.tag: p.body for p in _page("ssh")}
    assert ssh["-4"] == "Forces ssh to use IPv4 addresses only."  # a bare .Nm is the page's name
    git = {p.tag: p.body for p in _page("git-commit")}  # docbook: option line, then .RS text
    assert git["-a, --all"].startswith("Tell the command to automatically stage files")




one_error = error_line  # data_helpers


WN = "/usr/share/dictd/wn"


def _dictd(folder, index_lines, dz=True):

    folder.mkdir()
    (folder / "wn.index").write_text("\n".join(index_lines) + "\n")
    if dz is True:
        shutil.copy(f"{WN}.dict.dz", folder / "wn.dict.dz")
    elif dz:
        (folder / "wn.dict.dz").write_bytes(dz)
    return folder


def _wn_lines(n=120):
    lines = []
    with open(f"{WN}.index", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= 20000:
                lines.append(line.rstrip("\n"))
            if len(lines) == n:
                return lines


def chatset_2(out, dictd, *extra):
    return main(["data", "chatset", "--out", str(out), "--sources", "wn", "--dictd-dir", str(dictd), *extra])


def test_chatset_dictd_index_with_bad_lines_skips_and_counts_them(tmp_path, capsys):
    """An index line whose offset is not base-64 crashed with KeyError (a traceback, exit 1)."""
    lines = _wn_lines()
    lines.insert(10, "zebrawood\t!!\tC8")
    lines.insert(20, "zebrafish\tD2CX")
    dictd = _dictd(tmp_path / "dictd", lines)
    assert chatset_2(tmp_path / "set", dictd) == 0, capsys.readouterr().err
    info = json.loads((tmp_path / "set" / "chatset.json").read_text())
    assert info["sources"]["wn"]["skipped"]["wn: index line with a bad offset or size"] == 1
    assert info["sources"]["wn"]["conversations"]["train"] > 10


@pytest.mark.parametrize("dz, expect", [(False, "No such file"), (b"\x1f\x8b\x08\x00broken", "cannot be read")])
def test_chatset_missing_or_broken_dict_dz_is_one_line(tmp_path, capsys, dz, expect):
    dictd = _dictd(tmp_path / "dictd", _wn_lines(), dz=dz)
    assert chatset_2(tmp_path / "set", dictd) == 2
    line = one_error(capsys.readouterr().err)
    assert "wn.dict.dz" in line and expect in line
    assert not (tmp_path / "set").exists()


def test_chatset_that_would_have_no_held_out_subject_is_one_line(tmp_path, capsys):
    """A source that gave no usable question (or a cap of one): the set was written with recipes
    whose `domains:` was empty, and `data build` then said `recipe.domains: a value is required`."""
    dictd = _dictd(tmp_path / "dictd", _wn_lines())
    assert chatset_2(tmp_path / "set", dictd, "--max-per-source", "1") == 2
    line = one_error(capsys.readouterr().err)
    assert "--max-per-source 1 keeps 1 question(s) about fewer than 2 subjects" in line
    assert not (tmp_path / "set").exists()


def test_chatset_runs_to_one_folder_take_turns(tmp_path, capsys, monkeypatch):
    """Two runs to the same new --out: the later one replaced the earlier one's set without --force
    (both had checked --out before reading their sources). Now the later one is refused in one line,
    and one holding the lock is refused at once."""
    import glassroom.data.chatset as chatset_pkg
    from glassroom.data.build import build_lock

    dictd = _dictd(tmp_path / "dictd", _wn_lines())
    out = tmp_path / "set"
    real_make = chatset_pkg.make

    def make_while_another_run_writes(*args, **kwargs):
        made = real_make(*args, **kwargs)
        monkeypatch.setattr(chatset_pkg, "make", real_make)
        assert chatset_2(out, dictd, "--seed", "7") == 0  # the other run finishes first
        return made

    monkeypatch.setattr(chatset_pkg, "make", make_while_another_run_writes)
    assert chatset_2(out, dictd) == 2
    assert "exists and is not empty" in one_error(capsys.readouterr().err)
    assert json.loads((out / "chatset.json").read_text())["seed"] == 7
    with build_lock(out.resolve()):
        assert chatset_2(out, dictd, "--force") == 2
    assert "is writing" in one_error(capsys.readouterr().err)
    assert json.loads((out / "chatset.json").read_text())["seed"] == 7
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
