"""Decontamination judges overlap by coverage: evaluation pages copied whole, in half or lightly edited into
training text are removed, distinct pages that share phrases with evaluation pages are kept (flagged as
overlapping), on planted sets generated from real documentation pages with several seeds; and the rule of
one shared n-gram, which this replaces, fails the same sets."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from decontam_planting import KINDS, PLACES, planted_set
from glassroom.data import decontam
from glassroom.data.recipe import DecontaminateConfig

CFG = DecontaminateConfig()


def verdict_of(planted, cfg=CFG):
    index = decontam.EvalIndex.build(cfg, [("validation:docs", t) for t in planted.evals])
    hits = decontam.scan_batch(index.to_bytes(), planted.train)
    return decontam.decide(index, hits, cfg, lambda ks: [planted.train[k] for k in ks])


@pytest.mark.parametrize("seed", range(4))
def test_planted_copies_are_removed_and_distinct_pages_kept(seed):
    planted = planted_set(seed, kinds=("whole", "half", "edited"))
    verdict = verdict_of(planted)
    removed = set(np.flatnonzero(verdict.contaminated).tolist())
    missed = {planted.how[i] for i in planted.leaks - removed}
    assert not missed, f"planted copies kept: {missed}"
    assert removed == planted.leaks, "distinct pages removed"
    assert {h.split("/")[0] for h in planted.how.values()} == {"whole", "half", "edited"}
    assert {h.split("/")[1] for h in planted.how.values()} == set(PLACES)
    # distinct pages do share phrases with the evaluation pages: they are kept and listed as overlapping
    assert verdict.overlapping.sum() >= 3 and not (verdict.overlapping & verdict.contaminated).any()
    for i in np.flatnonzero(verdict.overlapping):
        assert verdict.reason(int(i)).startswith("kept: its longest passage of validation:docs #")


def test_one_shared_n_gram_as_the_rule_removes_distinct_pages_on_the_same_sets():
    wrong = 0
    for seed in range(4):
        planted = planted_set(seed, kinds=("whole", "half", "edited"))
        verdict = verdict_of(planted, replace(CFG, eval_coverage=1e-9))
        wrong += len(set(np.flatnonzero(verdict.contaminated).tolist()) - planted.leaks)
    assert wrong >= 10


def test_each_threshold_catches_its_own_kind_of_copy():
    planted = planted_set(5, kinds=KINDS)
    verdict = verdict_of(planted)
    for i, how in planted.how.items():
        kind, place = how.split("/")
        reason = verdict.reason(i)
        if kind == "whole":
            assert verdict.eval_passage[i] == 1.0 and "holds a passage of 100% of validation:docs #" in reason
        if kind == "half":
            assert 0.3 <= verdict.eval_passage[i] < 0.7, reason
        if kind == "edited":  # the edits cut every passage short; together they still cover most of the page
            assert verdict.eval_passage[i] < 0.3 and verdict.eval_coverage[i] >= 0.5, reason
        if place == "alone" and kind != "edited":  # a copy standing alone is evaluation text through and through
            assert verdict.train_coverage[i] >= 0.8 and "evaluation text (at least 50%)" in reason
    # the thresholds are the recipe's: raising all three past what any copy reaches keeps everything
    keep_all = replace(CFG, eval_passage=1.0, eval_coverage=1.0, train_coverage=1.0)
    pure = [h for h in planted.how.values() if h.startswith("whole") or h == "half/alone"]  # a share of 1.0
    assert verdict_of(planted, keep_all).contaminated.sum() == len(pure)


def test_recipe_refuses_shares_outside_zero_to_one():
    from glassroom.errors import ConfigError

    for key in ("eval_passage", "eval_coverage", "train_coverage"):
        for bad in (0, -0.1, 1.5):
            with pytest.raises(ConfigError, match=f"decontaminate.{key}: must be a share"):
                replace(CFG, **{key: bad}).check("decontaminate")
