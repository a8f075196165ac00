"""Tests of glassroom/data/formats.py."""

from __future__ import annotations

from glassroom.data.formats import detag_brown, html_to_text, pack, split_long, strip_gutenberg

from data_helpers import stdlib_files



def real_text(n=3):
    return [p.read_text() for p in stdlib_files("json")[:n]]


def test_format_helpers_on_real_markup():
    html = "<html><head><title>t</title><style>p{}</style></head><body><h1>Title</h1><p>One &amp; two</p><script>x()</script><pre>  a\n  b</pre></body></html>"
    text = html_to_text(html)
    assert "One & two" in text and "x()" not in text and "p{}" not in text and "  a\n  b" in text
    guten = "header\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\nbody text\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\nlicence"
    assert strip_gutenberg(guten) == "body text"
    assert detag_brown("\tThe/at jury/nn said/vbd ``/`` no/at ''/'' ./.\n") == 'The jury said " no ".'
    long = "\n\n".join(real_text(3))
    pieces = split_long(long, 4000)
    assert all(len(p.encode()) <= 4000 for p in pieces) and len(pieces) > 5
    packed = list(pack(["a" * 30] * 10, 100))
    assert len(packed) == 4 and packed[0] == "\n\n".join(["a" * 30] * 3)
