"""The quality classifier on real text: it separates prose from garbled, licence and boilerplate text it
never saw, trains deterministically, scores a text the same whatever its batch; equal-count buckets."""

from __future__ import annotations

import dataclasses
import glob
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from glassroom.data import quality
from glassroom.data.recipe import QualityConfig
from glassroom.errors import GlassroomError

DOCS = sorted(glob.glob("/usr/share/doc/python3.11/html/_sources/library/*.txt"))
STDLIB = Path(sysconfig.get_paths()["stdlib"])
LICENCES = Path("/usr/share/common-licenses")
NAV = ["Home | Documentation | Downloads | Community | Blog | About us",
       "Skip to main content and navigation menu",
       "Subscribe to our newsletter for the latest updates"]


def corpus(first: int, count: int) -> list[dict]:
    """Python docs pages (prose) and stdlib modules (code); some carry a real licence header from
    /usr/share/common-licenses (GPL, Apache, BSD) and some a site's navigation lines."""
    heads = [(LICENCES / name).read_text()[:2500] for name in ("GPL-3", "Apache-2.0", "GPL-2", "LGPL-3", "BSD")]
    out = []
    for i, path in enumerate(DOCS[first: first + count]):
        text = Path(path).read_text()[:12000]
        if i % 3 == 0:
            text = heads[i % len(heads)] + "\n\n" + text
        if i % 4 == 1:
            text = "\n".join(NAV) + "\n\n" + text + "\n\n" + NAV[0]
        out.append({"text": text, "domain": "docs"})
    for path in sorted((STDLIB / "email").glob("*.py"))[: count // 3]:
        out.append({"text": path.read_text()[:12000], "domain": "code"})
    return out


@pytest.fixture(scope="module")
def trained():
    return quality.train(corpus(0, 130), QualityConfig(seed=0))


def test_the_classifier_separates_unseen_prose_from_garbled_licence_and_boilerplate(trained):
    model, info = trained
    assert info["heldout_accuracy"] >= 0.9, info
    sizes = info["training_set"]["windows"]
    assert sizes["licence"] > 0 and sizes["boilerplate"] > 0 and sizes["garbled"] > 0
    assert sizes["positive"] == sizes["garbled"] + sizes["licence"] + sizes["boilerplate"]  # balanced
    # Text the classifier never saw: other docs pages, their garbled versions, licences of other kinds.
    rng = np.random.default_rng(7)
    prose = [w for p in DOCS[150:190] for w in quality.windows(Path(p).read_text())[2:4]]
    garbled = [quality.garble(w, k % 3, rng) for k, w in enumerate(prose)]
    licences = [p for name in ("MPL-1.1", "MPL-2.0", "Artistic", "LGPL-2.1", "GFDL-1.3", "CC0-1.0", "GPL-1")  # not trained on
                for p in [p for p in (LICENCES / name).read_text().split("\n\n") if quality.licence_block(p)][:8]]
    s_prose, s_garbled, s_lic = (model.scores(t) for t in (prose, garbled, licences))
    assert len(prose) > 40 and len(licences) >= 12
    right = np.concatenate([s_prose >= 0.5, s_garbled < 0.5, s_lic < 0.5])
    assert right.mean() >= 0.9, (np.mean(s_prose >= 0.5), np.mean(s_garbled < 0.5), np.mean(s_lic < 0.5))
    assert (s_lic < 0.5).mean() >= 0.8 and (s_prose >= 0.5).mean() >= 0.85
    assert np.median(s_prose) > np.median(s_garbled) + 0.3


def test_info_names_the_method_and_the_training_set(trained):
    _, info = trained
    assert info["method"].startswith("logistic regression") and info["n_features"] == quality.WORD_FEATURES
    ts = info["training_set"]
    assert ts["positive_domains"] == ["code", "docs"] and ts["documents"] == len(corpus(0, 130))
    assert ts["licence_blocks_found"] >= 2 and ts["boilerplate_lines_found"] >= 3 and ts["notes"] == []
    assert set(info["heldout_accuracy_by_kind"]) == set(quality.KINDS)
    assert 0 < sum(ts["heldout_windows"].values()) < sum(ts["windows"].values())
    import json

    json.dumps(info, allow_nan=False)  # manifest-ready: plain JSON, no timings


def test_training_is_deterministic_for_a_seed():
    sample = corpus(200, 24)
    a, info_a = quality.train(sample, QualityConfig(seed=3))
    b, info_b = quality.train(sample, QualityConfig(seed=3))
    assert a.to_bytes() == b.to_bytes() and info_a == info_b
    c, _ = quality.train(sample, QualityConfig(seed=4))
    assert c.to_bytes() != a.to_bytes()
    assert quality.score_batch(a.to_bytes(), ["a plain sentence of prose."]).dtype == np.float32


def test_a_score_does_not_depend_on_its_batch(trained, tmp_path):
    model, _ = trained
    texts = [d["text"] for d in corpus(100, 12)] + ["", "x", "word " * 50_000, "é\u2028 ünïcode \U0001F600 text"]
    blob = model.to_bytes()
    together = quality.score_batch(blob, texts)
    alone = np.array([quality.score_batch(blob, [t])[0] for t in texts])
    backwards = quality.score_batch(blob, texts[::-1])[::-1]
    mixed = quality.score_batch(blob, ["filler text"] * 3 + texts[:5])[3:]
    assert together.dtype == np.float32 and together.tobytes() == alone.tobytes() == backwards.tobytes()
    assert mixed.tobytes() == together[:5].tobytes()
    assert np.all((together >= 0) & (together <= 1))
    path = tmp_path / "quality" / "classifier.npz"
    model.save(path)
    again = quality.QualityModel.load(path)
    assert again.to_bytes() == blob and quality.score_batch(path.read_bytes(), texts).tobytes() == together.tobytes()
    # bounded work: a long document is scored on at most SCORE_CHARS characters (plus the joins)
    long = "word " * 1_000_000
    assert len(quality.scoring_text(long)) <= quality.SCORE_CHARS + quality.SCORE_WINDOWS


def test_a_damaged_classifier_file_is_a_one_line_error(trained, tmp_path):
    model, _ = trained
    for name, data in (("junk", b"not a zip"), ("cut", model.to_bytes()[:300]), ("empty", b"")):
        path = tmp_path / f"{name}.npz"
        path.write_bytes(data)
        with pytest.raises(GlassroomError) as err:
            quality.QualityModel.load(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(GlassroomError, match="cannot read"):
        quality.QualityModel.load(tmp_path / "missing.npz")


def test_buckets_are_equal_count_quantiles_per_domain():
    scores = np.random.default_rng(0).random(1000).astype(np.float32)
    cuts = quality.cutoffs(scores, 5)
    assert len(cuts) == 4 and cuts == sorted(cuts)
    buckets = quality.assign(scores, cuts)
    assert buckets.dtype == np.int8 and np.bincount(buckets).tolist() == [200] * 5
    order = np.argsort(scores)
    assert np.all(np.diff(buckets[order]) >= 0)  # q0 lowest
    assert quality.cutoffs(scores[::-1], 5) == cuts  # order of the documents does not matter
    # 7 documents in 5 buckets: rank r goes to floor(r * 5 / 7)
    seven = np.array([0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8], dtype=np.float32)
    got = quality.assign(seven, quality.cutoffs(seven, 5))
    ranks = np.argsort(np.argsort(seven))
    assert got.tolist() == (ranks * 5 // 7).tolist()
    # ties go up together: all equal scores share one bucket
    assert set(quality.assign(np.full(10, 0.5, np.float32), quality.cutoffs(np.full(10, 0.5), 5)).tolist()) == {4}
    # fewer documents than buckets: rank r -> floor(r * 5 / n); higher buckets empty
    two = np.array([0.2, 0.6], dtype=np.float32)
    assert quality.assign(two, quality.cutoffs(two, 5)).tolist() == [0, 2]
    one = quality.cutoffs([0.4], 5)
    assert quality.assign(np.array([0.4, 1.0], np.float32), one).tolist() == [0, 0] and max(one) > 1
    assert quality.cutoffs([], 5) == [pytest.approx(0.2), pytest.approx(0.4), pytest.approx(0.6), pytest.approx(0.8)]
    for bad in (1, 0, -2, 2.5, True):
        with pytest.raises(GlassroomError, match="buckets must be an integer"):
            quality.cutoffs(scores, bad)
    with pytest.raises(GlassroomError, match="not a finite number"):
        quality.cutoffs([0.1, float("nan")], 5)


def test_a_sample_without_licence_or_boilerplate_trains_on_garbled_text_and_says_so():
    sample = [{"text": Path(p).read_text()[:6000], "domain": "docs"} for p in DOCS[300:316]]
    _, info = quality.train(sample, QualityConfig())
    ts = info["training_set"]
    assert ts["windows"]["licence"] == 0 and ts["licence_blocks_found"] == 0
    assert ts["windows"]["garbled"] + ts["windows"]["boilerplate"] == ts["windows"]["positive"]
    assert any("no licence" in n for n in ts["notes"])


def test_bad_samples_and_positive_domains_are_one_line_errors():
    sample = corpus(0, 6)
    cfg = QualityConfig()
    with pytest.raises(GlassroomError, match=r"quality.positive_domains: no kept documents in poetry .*docs"):
        quality.train(sample, dataclasses.replace(cfg, positive_domains=["poetry"]))
    with pytest.raises(GlassroomError, match="needs at least 4 from 2 documents"):
        quality.train(sample[:1], cfg)
    with pytest.raises(GlassroomError, match="needs at least 4 from 2 documents"):
        quality.train([], cfg)
    with pytest.raises(GlassroomError, match="list of"):
        quality.train([{"text": 3, "domain": "x"}], cfg)
    # positives from one domain only: the other domain's windows are not positives
    _, info = quality.train(sample, dataclasses.replace(cfg, positive_domains=["docs"]))
    assert info["training_set"]["positive_domains"] == ["docs"]


def test_benchmark_reports_speed():
    texts = [Path(p).read_text()[:8000] for p in DOCS[:30]]
    report = quality.benchmark(texts)
    assert report["documents"] == 30 and report["docs_per_s"] > 0 and report["mb_per_s"] > 0
    assert 0 <= report["heldout_accuracy"] <= 1


@pytest.mark.parametrize("text, is_licence", [
    ("# Copyright (C) 2001-2007 Python Software Foundation", True),
    ("SPDX-License-Identifier: MIT", True),
    ("Licensed under the Apache License, Version 2.0;\nyou may not use this file except in compliance", True),
    ("you may not use this file except in compliance with the License. WITHOUT ANY WARRANTY", True),
    ("Permission is hereby granted, free of charge... THE SOFTWARE IS PROVIDED AS IS, WITHOUT WARRANTY OF ANY KIND", True),
    ("Copyright law protects the expression of ideas, not the ideas themselves.", False),
    ("The fitness of a species is measured by its offspring.", False),
])
def test_licence_blocks_are_recognised(text, is_licence):
    assert quality.licence_block(text) is is_licence
    every_phrase = ["copyright", "(c) 2001", "permission is hereby granted", "©", "without any warranty",
                    "licensed under", "all rights reserved", "gnu general public license", "apache license",
                    "mit license", "redistribution and use in source and binary forms", "this program is free software",
                    "merchantability", "fitness for a particular purpose", "warranties of any kind",
                    "license, or (at your option)", "you may not use this file except", "liable for any claim"]
    for a, b in zip(every_phrase, every_phrase[1:]):  # any two distinct phrases make a licence block
        assert quality.licence_block(f"{a.upper()} and then {b}"), (a, b)
