"""Reading YAML that a user (or a stranger) wrote, without letting it blow up: one bounded reader
for every command that takes YAML (train, data build, ladder, serve, publish).

PyYAML's safe loader refuses code, but not size: a few hundred bytes of nested aliases
("billion laughs") expand into millions of nodes when constructed or dumped again. `safe_load`
composes the node graph first (aliases stay shared references, so composing is cheap), counts the
nodes the document would have once every alias is expanded, and refuses it when that count, the
nesting depth or the text's size passes a limit. A key given twice in one mapping is refused too
(PyYAML would keep the last one silently). Only then is the document constructed, by a loader whose
integers and floats are read by glassroom/numbers.py: a 5,000-digit integer or `1.0e400` is refused
with its line instead of a traceback (or a silent infinity).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from glassroom import numbers
from glassroom.errors import GlassroomError

MAX_BYTES = 4 * 1024 * 1024        # a config is a few KB; a ladder spec or recipe a few tens
MAX_NODES = 200_000                # nodes after alias expansion
MAX_DEPTH = 64                     # nesting of mappings and sequences


class YamlLimitError(ValueError):
    """The document is bigger, deeper or more aliased than any config needs."""


class NumberNodeError(yaml.constructor.ConstructorError):
    """A number in the document past numbers.py's bounds; its problem names the limit."""


class BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader whose int and float scalars go through numbers.py's bounds."""

    def construct_yaml_int(self, node):
        try:
            numbers.check_int_text(str(node.value).replace("_", ""))
        except numbers.NumberError as exc:
            raise NumberNodeError(None, None, str(exc), node.start_mark) from None
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        value = super().construct_yaml_float(node)
        try:
            numbers.check_float_text(str(node.value))
            if isinstance(value, float) and math.isinf(value) and not str(node.value).lstrip("+-").lower() == ".inf":
                numbers.check_finite(value, str(node.value))
        except numbers.NumberError as exc:
            raise NumberNodeError(None, None, str(exc), node.start_mark) from None
        return value


    def construct_mapping(self, node, deep=False):
        """As SafeLoader's, naming the key whose value is a refused number."""
        try:
            return super().construct_mapping(node, deep)
        except NumberNodeError as exc:
            for key, value in node.value:
                if value.start_mark is exc.problem_mark and isinstance(key, yaml.ScalarNode):
                    exc.problem = f"{key.value}: {exc.problem}"
            raise


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
BoundedLoader.add_constructor("tag:yaml.org,2002:float", BoundedLoader.construct_yaml_float)


def _refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    """Two equal plain keys in one mapping (two domains named `code`): PyYAML keeps the last one
    silently; a config that says a thing twice is refused instead, naming the key and its line."""
    seen: set[str] = set()
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
            if key.value in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key.value!r} (a key may appear once in a mapping)", key.start_mark)
            seen.add(key.value)


def _expanded_size(root: yaml.Node) -> int:
    """Nodes in the document with every alias expanded, computed on the shared graph (memoised),
    stopping as soon as the limits are passed. Raises YamlLimitError."""
    sizes: dict[int, int] = {}
    # Iterative post-order walk: (node, depth, children_done)
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    on_path: set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if depth > MAX_DEPTH:
            raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1
            continue
        if isinstance(node, yaml.MappingNode):
            if not done:
                _refuse_duplicate_keys(node)
            children = [n for pair in node.value for n in pair]
        else:
            children = list(node.value)
        if not done:
            if key in sizes:
                continue
            if key in on_path:    # a recursive alias (&a [*a]): infinite once expanded
                raise YamlLimitError("an alias refers to itself")
            on_path.add(key)
            stack.append((node, depth, True))
            for child in children:
                if id(child) not in sizes:
                    stack.append((child, depth + 1, False))
            continue
        on_path.discard(key)
        total = 1
        for child in children:
            total += sizes.get(id(child), 1)
            if total > MAX_NODES:
                raise YamlLimitError(f"expands to more than {MAX_NODES:,} values (aliases)")
        sizes[key] = total
    return sizes.get(id(root), 0)


def safe_load(text: str) -> Any:
    """Like yaml.safe_load, with the limits above. Raises yaml.YAMLError or YamlLimitError."""
    if len(text) > MAX_BYTES:
        raise YamlLimitError(f"{len(text):,} characters, more than the {MAX_BYTES:,} a config may have")
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    except RecursionError:   # `a: [[[[...]]]]` thousands deep: the parser's own recursion runs out
        raise YamlLimitError("nested too deeply (lists or mappings inside each other thousands of times)") from None
    finally:
        loader.dispose()


def describe_error(exc: Exception) -> str:
    """One line for a YAML problem: where and what."""
    if isinstance(exc, YamlLimitError):
        return f"refused: {exc}"
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    if isinstance(exc, NumberNodeError):
        return f"refused{where}: {exc.problem}"
    problem = getattr(exc, "problem", None) or "cannot be parsed"
    return f"not valid YAML{where}: {problem}"


def load_file(path: str | Path) -> Any:
    """The document in `path`; OSError, UnicodeDecodeError, yaml.YAMLError or YamlLimitError.
    The size is checked before the file is read whole."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise YamlLimitError(f"{size:,} bytes, more than the {MAX_BYTES:,} a config may have")
    return safe_load(path.read_text(encoding="utf-8"))


def read_user_file(path: str | Path, what: str) -> Any:
    """The document in a file a user named (a run config, a recipe, a ladder spec), every problem
    one GlassroomError naming the path: missing, a folder, a device or pipe (never read: a FIFO
    would block), unreadable, not text, not YAML, or past the limits. `what` is how the messages
    name the expected file ("a YAML config file")."""
    p = Path(path)
    if not p.exists():
        raise GlassroomError(f"{path}: no such file")
    if p.is_dir():
        raise GlassroomError(f"{path}: is a folder, expected {what}")
    if not p.is_file():
        raise GlassroomError(f"{path}: not a regular file (a device, pipe or socket); give {what}")
    try:
        return load_file(p)
    except UnicodeDecodeError:
        raise GlassroomError(f"{path}: not a text file, expected {what}") from None
    except OSError as exc:   # permissions, an I/O error
        raise GlassroomError(f"{path}: cannot be read ({exc.strerror or exc}); check the path") from None
    except (yaml.YAMLError, YamlLimitError) as exc:
        raise GlassroomError(f"{path}: {describe_error(exc)}") from None
