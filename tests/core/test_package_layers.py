"""The package's layers, checked on the source (docs/design.md, "Dependencies point one way").

Every file under glassroom/ is parsed (never imported); every import statement counts, the ones
inside functions too, relative imports resolved. The rules:

- no import cycle between glassroom modules;
- every import from another package goes down the package order, which is read from the
  ```layers block of docs/design.md (one line per level, bottom first; names on one line share it);
- observe, web and pipeline never reach torch (or transformers, lm_eval, accelerate) nor
  glassroom.train, through any chain of glassroom imports (package __init__ files included);
- no private name (`_x`) is imported from another glassroom module;
- an import inside a function, of a glassroom module or of a heavy library, says why it is there
  with `# lazy: <reason>` on its line or the line above, except in the places that exist to be
  lazy (cli.py, glassroom/__init__.py, glassroom/commands/: `glassroom --help` imports them all).

The checker's functions take {module name: (file, source)}, so the tests at the end plant
violations in synthetic sources and check that each is reported with its file and line.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "glassroom"
HEAVY = ("torch", "transformers", "lm_eval", "ray", "sklearn")  # what a function-level import may defer
TORCH_LIKE = ("torch", "transformers", "lm_eval", "accelerate")  # what the light packages never reach
LIGHT = ("observe", "web", "pipeline")
FORBIDDEN_FOR_LIGHT = "train"
LAZY_PLACES = ("cli", "__init__", "commands")  # `glassroom --help` imports these; lazy by design
LAZY = re.compile(r"#\s*lazy:\s*\S")


@dataclass(frozen=True)
class Imp:
    importer: str  # module name
    file: str  # its path, as given
    line: int
    target: str  # a module of the package, or a top-level third-party name
    names: tuple[str, ...]  # the names of `from X import a, b` (empty for `import X`)
    in_function: bool
    lazy: bool  # `# lazy: reason` on the statement's lines or the line above
    internal: bool


def package_sources(root: Path = ROOT, package: str = PACKAGE) -> dict[str, tuple[str, str]]:
    """{module name: (file relative to root, source)} for every .py file of the package."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = (str(path.relative_to(root)), path.read_text(encoding="utf-8"))
    return out


def _owner(target: str, modules) -> str:
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def _statements(tree: ast.AST):
    """(import node, inside a function?) for every import statement, in one pass."""
    todo = [(tree, False)]
    while todo:
        node, in_function = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
            continue
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        todo.extend((child, inner) for child in ast.iter_child_nodes(node))


def parse_imports(sources: dict[str, tuple[str, str]], package: str = PACKAGE) -> list[Imp]:
    out = []
    for name, (file, source) in sources.items():
        tree = ast.parse(source, file)
        lines = source.splitlines()
        is_pkg = file.endswith("__init__.py")
        for node, in_function in _statements(tree):
            if isinstance(node, ast.Import):
                pairs = [(a.name, ()) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")
                    base = base if is_pkg else base[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                pairs = []
                for a in node.names:  # `from pkg import submodule` imports the submodule
                    sub = f"{module}.{a.name}"
                    pairs.append((sub, ()) if sub in sources else (module, (a.name,)))
            else:
                continue
            around = lines[max(node.lineno - 2, 0):node.end_lineno]
            lazy = any(LAZY.search(text) for text in around)
            for target, names in pairs:
                internal = target == package or target.startswith(package + ".")
                target = _owner(target, sources) if internal else target.split(".")[0]
                if internal and target == name:
                    continue
                out.append(Imp(name, file, node.lineno, target, names, in_function, lazy, internal))
    return out


def where(imp: Imp) -> str:
    return f"{imp.file}:{imp.line}"


def find_cycles(imports: list[Imp]) -> list[str]:
    """Each strongly connected group of modules (more than one), with the imports that close it."""
    edges = defaultdict(dict)
    for imp in imports:
        if imp.internal:
            edges[imp.importer].setdefault(imp.target, imp)
    index, low, stack, on, groups, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan, iterative enough for ~200 modules
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    out = []
    for group in groups:
        inner = [imp for a in group for b, imp in sorted(edges[a].items()) if b in group]
        out.append("import cycle between " + ", ".join(group) + ": "
                   + "; ".join(f"{where(i)} imports {i.target}" for i in inner))
    return out


def read_order(text: str) -> dict[str, int]:
    """{package: level} from the ```layers block (bottom first, `N. name name  # comment`)."""
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/design.md: no ```layers block (the package order, bottom first)"
    order = {}
    for level, line in enumerate(x for x in block.group(1).splitlines() if x.split("#")[0].strip()):
        names = re.sub(r"^\s*\d+\.\s*", "", line.split("#")[0]).split()
        for n in names:
            order[n.rstrip(":,")] = level
    return order


def package_of(module: str, package: str = PACKAGE) -> str:
    """glassroom.data.build -> data; glassroom.cli -> cli; glassroom -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(imports: list[Imp], order: dict[str, int]) -> list[str]:
    out = []
    for imp in imports:
        if not imp.internal:
            continue
        a, b = package_of(imp.importer), package_of(imp.target)
        for p in (a, b):
            if p not in order:
                out.append(f"{where(imp)}: the package {p} is not in docs/design.md's layers block")
        if a in order and b in order and order[b] > order[a]:
            out.append(f"{where(imp)}: {imp.importer} ({a}, level {order[a]}) imports {imp.target} "
                       f"({b}, level {order[b]}, above it)")
    return sorted(set(out))


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def light_reaches(imports: list[Imp], modules, light=LIGHT, forbidden=FORBIDDEN_FOR_LIGHT,
                  heavy=TORCH_LIKE, package: str = PACKAGE) -> list[str]:
    """For each module of a light package: the first chain of imports that reaches torch (or the
    like) or the forbidden package, named by file and line."""
    edges = defaultdict(list)
    for imp in imports:
        edges[imp.importer].append(imp)
    bad_pkg = f"{package}.{forbidden}"
    out = []
    for start in sorted(m for m in modules if package_of(m) in light):
        # A module imported by name may have any of its functions called: all its imports count.
        # A package __init__ that runs only because a module below it is imported (full=False)
        # counts with its module-level imports alone.
        seen, queue, via = {(start, True)}, [(start, True)], {}
        found = None
        while queue and not found:
            m, full = queue.pop(0)
            hops = [(imp, True) for imp in edges.get(m, []) if full or not imp.in_function]
            for parent in _parents(m):  # importing a.b.c runs a/__init__ and a/b/__init__ first
                if parent in modules and parent != m:
                    hops.append((Imp(m, modules[m], 1, parent, (), False, False, True), False))
            for imp, follow_all in hops:
                t = imp.target
                if (not imp.internal and t in heavy) or (imp.internal and (t == bad_pkg or t.startswith(bad_pkg + "."))):
                    found = imp
                    break
                if imp.internal and (t, True) not in seen and (t, follow_all) not in seen:
                    seen.add((t, follow_all))
                    via[t] = imp
                    queue.append((t, follow_all))
        if found:
            chain, m = [found], found.importer
            while m != start:
                chain.append(via[m])
                m = via[m].importer
            chain.reverse()
            out.append(f"{start} reaches {found.target}: "
                       + " -> ".join(f"{where(i)} imports {i.target}" for i in chain))
    return out


def private_imports(imports: list[Imp]) -> list[str]:
    return [f"{where(imp)}: {imp.importer} imports {name} from {imp.target} (private to it)"
            for imp in imports if imp.internal for name in imp.names
            if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))]


def unexplained_lazy(imports: list[Imp], heavy=HEAVY) -> list[str]:
    out = []
    for imp in imports:
        if not imp.in_function or imp.lazy or package_of(imp.importer) in LAZY_PLACES:
            continue
        if imp.internal or imp.target in heavy:
            out.append(f"{where(imp)}: {imp.importer} imports {imp.target} inside a function without "
                       "`# lazy: <reason>` (hoist it to the top of the file, or say why it waits)")
    return sorted(set(out))


# ----------------------------------------------------------------------------- the package itself


@pytest.fixture(scope="module")
def package():
    sources = package_sources()
    return sources, parse_imports(sources)


def _report(problems: list[str]) -> str:
    return f"{len(problems)} problem(s):\n" + "\n".join(problems)


def test_no_import_cycles(package):
    problems = find_cycles(package[1])
    assert not problems, _report(problems)


def test_imports_go_down_the_package_order(package):
    order = read_order((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))
    problems = upward_imports(package[1], order)
    assert not problems, _report(problems)


def test_observe_web_and_pipeline_never_reach_torch_or_train(package):
    sources, imports = package
    problems = light_reaches(imports, {m: f for m, (f, _) in sources.items()})
    assert not problems, _report(problems)


def test_no_private_names_across_modules(package):
    problems = private_imports(package[1])
    assert not problems, _report(problems)


def test_function_level_imports_say_why(package):
    problems = unexplained_lazy(package[1])
    assert not problems, _report(problems)


# ----------------------------------------------------------------------------- the checker itself


def _fake(**modules: str) -> dict[str, tuple[str, str]]:
    """Synthetic package `glassroom`: fake(data__build="...") is glassroom/data/build.py."""
    out = {}
    for key, source in modules.items():
        name = "glassroom" if key == "root" else "glassroom." + key.replace("__", ".")
        file = "glassroom/__init__.py" if key == "root" else "glassroom/" + key.replace("__", "/") + ".py"
        out[name] = (file, source)
    return out


ORDER = "```layers\n1. errors\n2. data    # a comment\n3. pipeline steps\n```\n"


def test_checker_reports_an_upward_import_with_file_and_line():
    sources = _fake(errors="", data__build="import os\n\n\ndef f():\n    from glassroom.pipeline import graph  # lazy: x\n",
                    pipeline__graph="from glassroom.data import build\n", steps__data="from glassroom.pipeline.graph import G\n")
    problems = upward_imports(parse_imports(sources), read_order(ORDER))
    assert len(problems) == 1 and problems[0].startswith("glassroom/data/build.py:5:"), problems
    assert "glassroom.pipeline.graph" in problems[0]


def test_checker_reports_a_package_missing_from_the_order():
    problems = upward_imports(parse_imports(_fake(web__x="from glassroom.errors import E\n", errors="")), read_order(ORDER))
    assert problems == ["glassroom/web/x.py:1: the package web is not in docs/design.md's layers block"]


def test_checker_reports_a_cycle_with_both_imports():
    sources = _fake(data__a="from glassroom.data.b import x\n",
                    data__b="import os\n\n\ndef g():\n    from . import a  # lazy: planted\n")
    problems = find_cycles(parse_imports(sources))
    assert len(problems) == 1, problems
    assert "glassroom/data/a.py:1 imports glassroom.data.b" in problems[0]
    assert "glassroom/data/b.py:5 imports glassroom.data.a" in problems[0]


def test_checker_follows_chains_into_torch_and_train():
    sources = _fake(web__page="from glassroom.data.tok import t\n", data__tok="def f():\n    import torch\n",
                    pipeline__run="from glassroom.train import trainer\n", train__trainer="",
                    observe__store="import sqlite3\n")
    modules = {m: f for m, (f, _) in sources.items()}
    problems = light_reaches(parse_imports(sources), modules)
    assert any(p.startswith("glassroom.web.page reaches torch: glassroom/web/page.py:1 imports glassroom.data.tok"
                            " -> glassroom/data/tok.py:2 imports torch") for p in problems), problems
    assert any("glassroom/pipeline/run.py:1 imports glassroom.train.trainer" in p for p in problems), problems
    assert not any(p.startswith("glassroom.observe") for p in problems)


def test_checker_counts_package_inits_on_the_way():
    sources = _fake(web__page="from glassroom.model.config import C\n", model="from glassroom.model import layers\n",
                    model__config="", model__layers="import torch\n")
    problems = light_reaches(parse_imports(sources), {m: f for m, (f, _) in sources.items()})
    assert len(problems) == 1 and "glassroom/model/layers.py:1 imports torch" in problems[0], problems


def test_checker_reports_private_names_and_unexplained_lazy_imports():
    sources = _fake(data__a="def f():\n    from glassroom.data.b import _hidden, shown\n    import torch\n"
                            "    # lazy: torch stays out of the data build's import\n    import torch as t\n",
                    data__b="_hidden = shown = 1\n", commands__x="def run(a):\n    import torch\n",
                    ladder__y="from .z import __version__\n", ladder__z="__version__ = 1\n")
    imports = parse_imports(sources)
    assert private_imports(imports) == ["glassroom/data/a.py:2: glassroom.data.a imports _hidden from glassroom.data.b "
                                        "(private to it)"]
    lazy = unexplained_lazy(imports)
    assert [p.split(": ")[0] for p in lazy] == ["glassroom/data/a.py:2", "glassroom/data/a.py:3"], lazy
