"""`glassroom data build` / `data mixture` through the CLI: bad input is one line, exit 2, nothing damaged."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys

import pytest

from data_helpers import make_corpus, write_recipe, run_cli, error_line
from glassroom.cli import main


def folder_digest(path):
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    make_corpus(root)
    recipe = write_recipe(root)
    out = root / "data"
    assert main(["data", "build", str(recipe), "--out", str(out), "--workers", "1"]) == 0
    return root, recipe, out


@pytest.mark.slow
def test_build_prints_a_summary(corpus, capsys):
    root, recipe, out = corpus
    code, stdout, stderr = run_cli(["data", "build", str(recipe), "--out", str(root / "second"), "--workers", "2"], capsys)
    assert code == 0, stderr
    assert "dataset 'stdlib-test' built" in stdout and "email" in stdout and "web" in stdout
    # The funnel: dedup clusters and removals, decontamination, the quality classifier's accuracy.
    import re
    assert re.search(r"  dedup: \d+ duplicate clusters, \d+ documents removed \(bands \d+ x rows \d+, threshold 0.8\)", stdout)
    assert "  decontamination: " in stdout and "train documents removed, " in stdout and "kept that share less (13-word" in stdout
    assert "  quality: 5 buckets per domain, classifier held-out accuracy 0." in stdout
    assert "tokenizer: trained byte-level BPE, vocabulary 1024" in stderr
    assert "clean:" in stderr and "tokenize:" in stderr  # stage lines with rates
    # Malformed JSONL lines are not an error: skipped, counted and reported on one warning line.
    warnings = [line for line in stderr.splitlines() if line.startswith("warning: source jsonl:")]
    assert len(warnings) == 2 and "skipped 2 malformed JSONL lines (first at" in warnings[0]
    assert "extra.jsonl:4)" in warnings[0]


def test_existing_dataset_needs_force_and_is_kept(corpus, capsys):
    root, recipe, out = corpus
    before = folder_digest(out)
    code, _, err = run_cli(["data", "build", str(recipe), "--out", str(out)], capsys)
    assert code == 2 and "already exists; pass --force" in error_line(err)
    assert folder_digest(out) == before


def test_missing_source_is_one_line_and_nothing_damaged(corpus, capsys):
    root, recipe, out = corpus
    before = folder_digest(out)
    code, _, err = run_cli(["data", "build", str(recipe), "--out", str(out), "--force",
                            "--set", f"domains.web.sources=[{{kind: files, path: {root}/nowhere/*.txt}}]"], capsys)
    assert code == 2
    line = error_line(err)
    assert "domains.web.sources[0]" in line and "no files match" in line and "nowhere" in line
    assert folder_digest(out) == before


def test_missing_corpus_names_the_install_script(corpus, capsys, monkeypatch, tmp_path):
    root, recipe, out = corpus
    monkeypatch.setenv("GLASSROOM_CORPORA_DIR", str(tmp_path / "empty"))
    code, _, err = run_cli(["data", "build", str(recipe), "--out", str(tmp_path / "x"),
                            "--set", "domains.web.sources=[{kind: brown}]"], capsys)
    assert code == 2 and "scripts/install-corpora.sh" in error_line(err)
    assert not (tmp_path / "x").exists()


def test_domain_empty_after_filtering_fails_without_damage(corpus, capsys):
    root, recipe, out = corpus
    before = folder_digest(out)
    # Every real document is longer than 100 bytes and the planted short one has 40: nothing is left.
    code, _, err = run_cli(["data", "build", str(recipe), "--out", str(out), "--force",
                            "--set", "clean.max_bytes=100", "--set", "clean.min_bytes=50"], capsys)
    assert code == 2
    line = error_line(err)
    assert "domain email: 0 documents left after cleaning" in line and "too_long" in line
    assert folder_digest(out) == before
    assert not [p for p in root.iterdir() if p.name.startswith(".data.")], "temporary folder left behind"


def test_bad_recipe_values_name_the_key(corpus, capsys):
    root, recipe, out = corpus
    for setting, fragment in [
        ("dedup.threshold=1.5", "recipe.dedup.threshold: must be between 0 and 1"),
        ("domains.web.sources[0]=1", "recipe.domains"),
        ("tokenizer.vocab_sise=10", "recipe.tokenizer.vocab_sise: unknown key (did you mean vocab_size?)"),
        ("split.validation_fraction=0", "recipe.split.validation_fraction: must be above 0"),
        # bands x rows are derived; when no banding of num_perm reaches dedup.recall, say what to change
        ("dedup.threshold=0.01", "recipe.dedup.num_perm: 128 permutations catch a pair at threshold 0.01 with "
                                 "probability 0.724 at most, below recall 0.95; raise recipe.dedup.num_perm to 299"),
    ]:
        code, _, err = run_cli(["data", "build", str(recipe), "--out", str(root / "bad"), "--set", setting], capsys)
        assert code == 2 and fragment in error_line(err), (setting, err)


def test_mixture_command_reports_epochs_and_rejects_bad_weights(corpus, capsys):
    root, recipe, out = corpus
    code, stdout, err = run_cli(["data", "mixture", str(out), "--weights", "email=3,web=1", "--tokens", "10M",
                                 "--seq-len", "64", "--max-epochs", "2"], capsys)
    assert code == 0 and "email" in stdout and "0.750" in stdout
    assert "warning: domain email would be seen" in err
    for weights, fragment in [("email=-1,web=1", "negative weight"), ("email=0,web=0", "all are zero"),
                              ("email=x", "expected a number")]:
        code, _, err = run_cli(["data", "mixture", str(out), "--weights", weights, "--tokens", "1M"], capsys)
        assert code == 2 and fragment in error_line(err)
    code, _, err = run_cli(["data", "mixture", str(root), "--weights", "a=1", "--tokens", "1M"], capsys)
    assert code == 2 and "not a built dataset" in error_line(err)


def test_mixture_refuses_a_domain_given_twice_and_an_infinite_budget(corpus, capsys):
    _, _, out = corpus
    code, _, err = run_cli(["data", "mixture", str(out), "--weights", "email=1,email=2", "--tokens", "1M"], capsys)
    assert code == 2 and "email is given twice" in error_line(err)
    for tokens in ("1e400", "1e400K"):
        code, _, err = run_cli(["data", "mixture", str(out), "--weights", "email=1", "--tokens", tokens], capsys)
        assert code == 2 and error_line(err).startswith("error: --tokens:") and "not a finite count" in err


def test_cli_subprocess_exit_code_and_single_line(corpus):
    root, recipe, out = corpus
    proc = subprocess.run([sys.executable, "-m", "glassroom", "data", "build", str(root / "missing.yaml"), "--out", str(root / "y")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: ") and "missing.yaml" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bible") is None, reason="needs scripts/install-corpora.sh --minimal (Debian bible-kjv)")
def test_tiny_recipe_builds(tmp_path, capsys):
    code, stdout, err = run_cli(["data", "build", "experiments/data-tiny.yaml", "--out", str(tmp_path / "tiny")], capsys)
    assert code == 0, err
    for domain in ("prose", "docs", "code"):
        assert domain in stdout


def test_a_missing_decontamination_file_is_refused_before_any_text_is_read(tmp_path, capsys):
    make_corpus(tmp_path / "corpus")
    recipe = write_recipe(tmp_path / "corpus", decontaminate={"files": [str(tmp_path / "nope.jsonl")]})
    code, _, err = run_cli(["data", "build", recipe, "--out", tmp_path / "out"], capsys)
    assert code == 2 and "decontaminate.files[0]: " in error_line(err) and "nope.jsonl: no such file" in err
    assert not (tmp_path / "out").exists()
