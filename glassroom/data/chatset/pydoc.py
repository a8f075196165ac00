"""Questions from the Python standard library's own docstrings, read with `ast` (nothing imported).

For each public module, function, class and method with a docstring: what it does (the docstring's
first paragraph) and, for functions and methods, how it is called (its parameters as written in
the source, `self` and `cls` left out). Private names (a leading _ anywhere in the dotted name),
tests, IDLE, the turtle demos and the bundled installers are left out.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import sysconfig
from collections import Counter
from pathlib import Path

from glassroom.data.chatset.common import Fact, Kind, squash

SKIP_DIRS = {"test", "tests", "idle_test", "idlelib", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
             "site-packages", "dist-packages", "__pycache__", "config-3"}
MAX_BODY = 400  # characters of a docstring paragraph; longer ones are skipped

_SYSTEMS = (
    "You are a helpful assistant who knows the Python standard library well.",
    "Answer questions about Python briefly, quoting the documentation where you can.",
)
DOES = Kind(
    "does",
    ("What does `{name}` do?", "What is `{name}` for?", "Explain what `{name}` does in Python.",
     "In Python's standard library, what does `{name}` do?"),
    ("{body}", "Its docstring says: {body}", "`{name}`: {body}"),
    _SYSTEMS,
)
MODULE = Kind(
    "module",
    ("What is the Python module `{name}` for?", "What does the `{name}` module provide?",
     "Tell me about Python's `{name}` module."),
    ("{body}", "Its docstring says: {body}", "The `{name}` module: {body}"),
    _SYSTEMS,
)
CALL = Kind(
    "call",
    ("What arguments does `{name}` take?", "What is the signature of `{name}`?", "How do I call `{name}`?"),
    ("It is called as `{name}{body}`.", "The signature is `{name}{body}`.", "`{name}{body}`, as the source defines it."),
    _SYSTEMS,
)


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def licence(root: Path) -> str:
    where = root / "LICENSE.txt"
    return f"PSF-2.0: see {where}" if where.is_file() else "PSF-2.0: the Python Software Foundation License"


def module_files(root: Path) -> list[tuple[str, Path]]:
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(("_", "config-")))
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            rel = Path(folder, name).relative_to(root).with_suffix("")
            parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
            if parts and not any(p.startswith("_") or "-" in p for p in parts):
                out.append((".".join(parts), Path(folder, name)))
    return out


def first_paragraph(doc: str) -> str | None:
    """The docstring's first paragraph on one line, skipping a signature line such as `f(x) -> y`."""
    for para in re.split(r"\n\s*\n", inspect.cleandoc(doc)):
        text = squash(para)
        if not text or re.match(r"^[\w.]+\(.*\)( -> .*)?$", text):
            continue
        if text.startswith(">>>"):  # a doctest, not a description
            return None
        if len(text) > MAX_BODY or len(text.split()) < 3:
            return None
        return text
    return None


def signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> str:
    params = fn.args
    if method and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
        positional = params.posonlyargs + params.args
        if positional and positional[0].arg in ("self", "cls"):
            if params.posonlyargs:
                params = ast.arguments(params.posonlyargs[1:], params.args, params.vararg, params.kwonlyargs,
                                       params.kw_defaults, params.kwarg, params.defaults)
            else:
                params = ast.arguments([], params.args[1:], params.vararg, params.kwonlyargs,
                                       params.kw_defaults, params.kwarg, params.defaults)
    return f"({ast.unparse(params)})"


def _doc_paragraph(node) -> str | None:
    """The first paragraph of a module's, class's or function's docstring, if it has one."""
    doc = ast.get_docstring(node, clean=False)
    return first_paragraph(doc) if doc else None


def _public(name: str) -> bool:
    return not name.startswith("_")


def facts(seed: int, root: Path, skipped: Counter) -> list[Fact]:
    lic = licence(root)
    out: list[Fact] = []

    seen: set[tuple[str, str]] = set()

    def add(kind: Kind, name: str, body: str) -> None:
        if (kind.name, name) in seen:  # a name defined twice (one per platform, say): the first
            skipped["python: a name defined again in its module"] += 1
            return
        seen.add((kind.name, name))
        out.append(Fact("python", kind, f"python:{name}", name, body, lic, {"name": name}))

    def function(node, name: str, method: bool) -> None:
        doc = ast.get_docstring(node, clean=False)
        body = first_paragraph(doc) if doc else None
        if body:
            add(DOES, name, body)
        sig = signature(node, method)
        if sig != "()" and len(sig) <= 160 and (body or doc):
            add(CALL, name, sig)

    for module, path in module_files(root):
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):
            skipped["python: a module that does not parse"] += 1
            continue
        body = _doc_paragraph(tree)
        if body:
            add(MODULE, module, body)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
                function(node, f"{module}.{node.name}", False)
            elif isinstance(node, ast.ClassDef) and _public(node.name):
                cls = f"{module}.{node.name}"
                body = _doc_paragraph(node)
                if body:
                    add(DOES, cls, body)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(item.name):
                        function(item, f"{cls}.{item.name}", True)
    return out
