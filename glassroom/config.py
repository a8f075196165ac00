"""Typed, strictly validated configs: YAML in, frozen dataclasses out.

Every section (model, data, train, observe, ...) is a frozen dataclass. `build_section` turns a
mapping into one, checking each key against the dataclass: an unknown key, a missing key, a value
of the wrong type or an impossible value raises ConfigError naming the key path (`model.moe.top_k`).
Integer fields also take counts with suffixes (`50K`); float fields take strings such as `3e-4`,
which YAML 1.1 would otherwise read as text. Every number must be finite: NaN (`.nan`) is refused
everywhere and infinity (`.inf`) everywhere except fields whose metadata is ALLOW_INF (a bound that
may be switched off). `--set key.path=value` overrides apply to the raw mapping before validation.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

from glassroom import yaml_io
from glassroom.errors import ConfigError, GlassroomError
from glassroom.numbers import shown
from glassroom.units import parse_count

# Field metadata for a float that may be `.inf` (e.g. a warning threshold switched off); NaN never is.
ALLOW_INF = {"allow_inf": True}


# ----------------------------------------------------------------------------- reading files


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping; a clear error for anything else (yaml_io's rules)."""
    data = yaml_io.read_user_file(path, "a YAML config file")
    if not isinstance(data, dict):
        raise GlassroomError(f"{path}: expected a YAML mapping of sections (model:, train:, ...)")
    return data


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of `raw` with each `key.path=value` set; values are read as YAML scalars."""
    import copy

    result = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected key.path=value")
        try:
            value = yaml_io.safe_load(text) if text.strip() else None
        except yaml_io.NumberNodeError as exc:   # a 5,000-digit integer: refused, not kept as text
            raise ConfigError(f"--set {key.strip()}: {exc.problem}") from None
        except yaml.YAMLError:
            value = text
        except yaml_io.YamlLimitError as exc:
            raise ConfigError(f"--set {key.strip()}: {yaml_io.describe_error(exc)}") from None
        node = result
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {key}: {part} is not a section")
            node = child
        node[parts[-1]] = value
    return result


# ----------------------------------------------------------------------------- validation


def build_section(cls: type, data: Any, path: str) -> Any:
    """An instance of dataclass `cls` from mapping `data`; errors name `path.key`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys, got {_describe(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"{path}.{key}: unknown key{hint}")
    values = {}
    for name, field in fields.items():
        key_path = f"{path}.{name}"
        if name in data:
            values[name] = _convert(hints[name], data[name], key_path,
                                    allow_inf=bool(field.metadata.get("allow_inf")))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key_path}: missing required key")
    instance = cls(**values)
    check = getattr(instance, "check", None)
    if check is not None:
        check(path)
    return instance


MAX_INT = 2 ** 63 - 1


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, (dict, list)):
        return f"a {type(value).__name__}"
    return shown(value, 60) if isinstance(value, str) else f"{value!r}"


def _convert(hint: Any, value: Any, path: str, allow_inf: bool = False) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _convert(options[0], value, path, allow_inf)
        errors = []
        for option in options:
            try:
                return _convert(option, value, path, allow_inf)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0])
    if value is None:
        raise ConfigError(f"{path}: a value is required, got null")
    if origin is Literal:
        if value not in args:
            allowed = ", ".join(str(a) for a in args)
            hint = ("; YAML reads off, no and false (on, yes, true) as a boolean: write one of the words above"
                    if isinstance(value, bool) and all(isinstance(a, str) for a in args) else "")
            raise ConfigError(f"{path}: {value!r} is not one of {allowed}{hint}")
        return value
    if dataclasses.is_dataclass(hint):
        return build_section(hint, value, path)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {_describe(value)}")
        key_type, value_type = args
        return {
            _convert(key_type, k, f"{path}.{k}"): _convert(value_type, v, f"{path}.{k}")
            for k, v in value.items()
        }
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {_describe(value)}")
        items = [_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {_describe(value)}")
        return value
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(f"{path}: expected a whole number, got {value!r}")
        if not isinstance(value, int):
            try:
                number = parse_count(value)
            except ValueError:
                raise ConfigError(f"{path}: expected a whole number, got {_describe(value)}") from None
            if not math.isfinite(number) or number != int(number):
                raise ConfigError(f"{path}: expected a whole number, got {_describe(value)}")
            value = int(number)
        if abs(value) > MAX_INT:  # what the run store (SQLite), numpy and torch hold
            raise ConfigError(f"{path}: {value:.3g} is too large (at most 2**63 - 1)")
        return value
    if hint is float:
        if isinstance(value, bool):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        number = None
        if isinstance(value, (int, float)):
            number = float(value) if not isinstance(value, int) or abs(value) < 2 ** 1023 else math.inf
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise ConfigError(f"{path}: expected a number, got {_describe(value)}")
        if math.isnan(number) or (math.isinf(number) and not allow_inf):
            raise ConfigError(f"{path}: must be a finite number, got {_describe(value)}")
        return number
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected text, got {_describe(value)}")
        return value
    if hint is Any:
        return value
    raise TypeError(f"config field {path} has an unsupported type {hint!r}")


def require_positive(path: str, **values: Optional[float]) -> None:
    """ConfigError naming the first of `values` (key=value) that is present and not above zero."""
    for key, value in values.items():
        if value is not None and value <= 0:
            raise ConfigError(f"{path}.{key}: must be positive, got {value}")


def require_non_negative(path: str, **values: Optional[float]) -> None:
    """ConfigError naming the first of `values` (key=value) that is present and below zero."""
    for key, value in values.items():
        if value is not None and value < 0:
            raise ConfigError(f"{path}.{key}: must be zero or more, got {value}")


def as_dict(section: Any) -> dict[str, Any]:
    """A plain mapping of a config section, as it is saved with a run (resolved config)."""
    return dataclasses.asdict(section)
