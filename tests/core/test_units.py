"""Tests of glassroom/units.py."""

from __future__ import annotations

import pytest

from glassroom.units import format_count, model_name, parse_count



def test_counts_read_and_print_with_suffixes():
    assert parse_count("18.75T") == 18.75e12
    assert parse_count("50K") == 50_000
    assert parse_count("1.6b") == 1.6e9
    assert parse_count(2e9) == 2e9
    for bad in ("lots", "1.5X", "", None, True):
        with pytest.raises(ValueError):
            parse_count(bad)
    assert format_count(8_030_261_248) == "8.0B"
    assert format_count(61_300_000) == "61.3M"
    assert format_count(535e9) == "535B"
    assert model_name(46.7e9, 12.9e9) == "46.7B-A12.9B"
    assert model_name(8e9, 8e9) == "8.0B"
