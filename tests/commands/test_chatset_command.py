"""`glassroom data chatset` options: a --tokenizer that is not a tokenizer is refused in one line
before anything is read or written."""

from __future__ import annotations

import pytest

from data_helpers import error_line, run_cli


@pytest.mark.parametrize("content, says", [
    ('{"a": 1}', "not a valid tokenizer.json"),
    ("not json at all", "not a valid tokenizer.json"),
])
def test_a_tokenizer_option_that_is_not_a_tokenizer_is_refused(tmp_path, capsys, content, says):
    tok = tmp_path / "tokenizer.json"
    tok.write_text(content)
    out = tmp_path / "set"
    code, _, err = run_cli(["data", "chatset", "--tokenizer", tok, "--out", out], capsys)
    assert code == 2 and says in error_line(err) and "--tokenizer" in error_line(err)
    assert not out.exists() and tok.read_text() == content
