"""Plain text from roff source, enough to read a man page's NAME line and its option list.

Rendering every page with groff takes minutes; the chat set needs only short paragraphs, so this
reads the source directly: escapes (fonts, special characters, strings) become their text, font
macros (.B, .BR, ...) their joined arguments, and a page becomes a list of (section, tag, body)
paragraphs, where `tag` is the first line of a .TP/.IP item (an option such as `-v, --invert-match`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# \(xx and \[name] special characters; anything unknown becomes nothing.
_CHARS = {
    "em": "\u2014", "en": "\u2013", "hy": "-", "mi": "-", "aq": "'", "dq": '"', "lq": "\u201c", "rq": "\u201d",
    "oq": "\u2018", "cq": "\u2019", "bu": "\u2022", "co": "\u00a9", "rg": "\u00ae", "tm": "\u2122",
    "ti": "~", "ha": "^", "pl": "+", "mu": "\u00d7", "<=": "\u2264", ">=": "\u2265", "->": "\u2192",
    "<-": "\u2190", "bv": "|", "ba": "|", "ga": "`", "ul": "_", "rs": "\\", "sl": "/", "at": "@",
    "sh": "#", "Do": "$", "eq": "=", "lB": "[", "rB": "]", "lC": "{", "rC": "}", "la": "\u27e8",
    "ra": "\u27e9", "de": "\u00b0", "ss": "\u00df", "a:": "\u00e4", "o:": "\u00f6", "u:": "\u00fc",
}
# \*x, \*(xx and \*[name] strings as man, mdoc and pod2man define them.
_STRINGS = {
    "lq": "\u201c", "rq": "\u201d", 'L"': "\u201c", 'R"': "\u201d", "C`": "", "C'": "", "Aq": "'",
    "aq": "'", "R": "\u00ae", "Tm": "\u2122", "Ba": "|", "Ne": "\u2260", "Le": "\u2264", "Ge": "\u2265",
    "Lt": "<", "Gt": ">", "Pi": "\u03c0", "Pm": "\u00b1", "Lq": "\u201c", "Rq": "\u201d", "-": "\u2014",
}
_SIMPLE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "'": "'", "`": "`", ".": ".", "t": " "}
_ESCAPE = re.compile(
    r"\\(?:f(?:\(..|\[[^\]]*\]|.)"         # font change
    r"|s(?:[+-]?\d|\(\d\d|\[[^\]]*\])"     # size change
    r"|\((..)|\[([^\]]*)\]"                # special character
    r"|\*(?:\((..)|\[([^\]]*)\]|(.))"      # string
    r"|[hvwoHSLlDbXxkRZN]'[^']*'"          # motions, drawing, width, \N'123'
    r"|[zkn](?:\(..|\[[^\]]*\]|.)"         # zero width, marks, number registers
    r"|(.))",
    re.S,
)


def _escape(m: re.Match) -> str:
    char, named, s2, sname, s1, single = m.groups()
    if char is not None or named is not None:
        return _CHARS.get(char or named, "")
    if s2 is not None or sname is not None or s1 is not None:
        return _STRINGS.get(s2 or sname or s1, "")
    text = m.group(0)
    if text.startswith("\\N'"):
        num = text[3:-1]
        return chr(int(num)) if num.isdigit() and int(num) < 0x110000 else ""
    if single is not None:
        return _SIMPLE.get(single, "")
    return ""


def inline(text: str) -> str:
    """Text with roff escapes replaced (comments `\\"` cut)."""
    cut = re.search(r'\\"', text)
    text = text[: cut.start()] if cut else text
    return _ESCAPE.sub(_escape, text)


def args(text: str) -> list[str]:
    """A request's arguments: space-separated, double quotes group ("" inside is a quote)."""
    out, i, n = [], 0, len(text)
    while i < n:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n:
            break
        if text[i] == '"':
            i += 1
            buf = []
            while i < n:
                if text[i] == '"':
                    if i + 1 < n and text[i + 1] == '"':
                        buf.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(text[i])
                i += 1
            out.append("".join(buf))
        else:
            j = i
            while j < n and text[j] not in " \t":
                j += 2 if text[j] == "\\" else 1  # an escape (`\ ` is a space inside the argument)
            j = min(j, n)
            out.append(text[i:j])
            i = j
    return out


_FONT_SPACED = {"B", "I", "SM", "SB"}
_FONT_JOINED = {"BR", "BI", "IR", "IB", "RB", "RI"}
_BREAKS = {"PP", "P", "LP", "HP", "RS", "RE", "TP", "IP", "SH", "SS", "sp", "EX", "EE", "Bl", "El", "It", "Sh", "Ss"}


_MDOC_TEXT = {"Nm", "Ar", "Fl", "Cm", "Pa", "Xr", "Em", "Sy", "Li", "Dq", "Ql", "Va", "Ev", "Op", "Ic", "Sq", "Pq"}
_MDOC_QUIET = _MDOC_TEXT | {"Ns", "Oo", "Oc", "Xo", "Xc", "No", "Bq", "Brq", "Eq", "Qq"}


def _mdoc(words: list[str]) -> str:
    """mdoc macro arguments as text: `Fl v Ar file` -> `-v file`, macro names dropped."""
    out, flag = [], False
    for w in words:
        if w == "Fl":
            flag = True
            continue
        if w in _MDOC_QUIET:
            continue
        out.append(("-" if flag else "") + inline(w))
        flag = False
    if flag:
        out.append("-")
    return " ".join(out)


@dataclass
class Paragraph:
    section: str  # the .SH heading, upper case
    tag: str  # the item tag of a .TP/.IP paragraph ("" for a plain one)
    body: str  # its first paragraph of text, lines joined by spaces


def paragraphs(source: str) -> list[Paragraph]:
    """The page's paragraphs in order. mdoc's .Nm/.Nd in NAME are read as `name - description`."""
    out: list[Paragraph] = []
    section, tag, body = "", "", []
    want_tag = False  # after .TP: the next text line is the tag
    nm = ""  # mdoc: the name a bare .Nm stands for

    def flush() -> None:
        nonlocal tag, body
        text = " ".join(" ".join(body).split())
        if text or tag:
            out.append(Paragraph(section, " ".join(tag.split()), text))
        tag, body = "", []

    skipping = False  # inside a macro definition or an .ig block, up to its `..`
    for raw in source.splitlines():
        if skipping:
            skipping = not re.match(r"^[.']\s*\.", raw)  # `..`, or `.  .` inside an indented block
            continue
        if raw.startswith((".", "'")):
            parts = args(raw[1:].strip().replace("\\\\", "\\"))  # \\ in a macro argument is one \
            if not parts:
                continue
            name, rest = parts[0], parts[1:]
            if name in ("de", "de1", "am", "ig"):
                skipping = True
                continue
            if name in _FONT_SPACED or name in _FONT_JOINED:
                text = inline((" " if name in _FONT_SPACED else "").join(rest))
                if want_tag:
                    tag, want_tag = text, False
                else:
                    body.append(text)
                continue
            if name == "Nd":  # mdoc NAME: .Nm ls / .Nd list directory contents
                body.append("- " + inline(" ".join(rest)))
                continue
            if name == "Nm":  # the page's name, given once and then used bare
                nm = nm or _mdoc(rest)
                body.append(_mdoc(rest) or nm)
                continue
            if name in _MDOC_TEXT:
                body.append(_mdoc(rest))
                continue
            if name == "RS" and not tag and len(body) == 1 and body[0].startswith("-"):
                tag, body = body[0], []  # docbook pages: an option line, then its text indented
                continue
            if name == "TQ":  # another tag line for the same item
                want_tag = True
                continue
            if name in _BREAKS:
                flush()
                if name in ("SH", "SS", "Sh", "Ss"):
                    if name in ("SH", "Sh"):
                        section = inline(" ".join(rest)).strip().upper()
                elif name == "TP":
                    want_tag = True
                elif name == "IP" and rest:
                    tag = inline(rest[0])
                elif name == "It":
                    tag = _mdoc(rest)
                continue
            continue  # anything else: no text of its own
        text = inline(raw)
        if want_tag:
            tag = (tag + ", " + text) if tag else text
            want_tag = False
        elif raw.strip() == "" and body:
            flush()
        else:
            body.append(text)
    flush()
    return out
