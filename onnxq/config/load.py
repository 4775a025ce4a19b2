"""A QuantConfig from a TOML file or a mapping: every key and type checked, so that a typo fails loudly."""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from onnxq.errors import ConfigError, closest, did_you_mean, one_line
from onnxq.io.reads import regular_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

__all__ = ["read_toml", "build", "typed_fields"]


def read_toml(path: str | Path) -> dict[str, Any]:
    """The TOML file as a mapping; one line naming the problem when it is not a regular UTF-8 TOML file."""
    regular_file(path, "config file", ConfigError)
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
        return tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {one_line(path)} is not UTF-8 text (byte {e.start}) — save it as UTF-8 "
                          "TOML") from None
    except OSError as e:
        raise ConfigError(f"config file {one_line(path)} cannot be read ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {one_line(path)} is not valid TOML: {one_line(e)}") from None


def typed_fields(cls: type, data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The mapping's keys as the dataclass's typed field values (sections built and checked, each on its own), before
    the dataclass itself is made: a caller can override some of them first (command-line flags over a file), so that
    the checks across fields see the values that will run."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"config section {where or 'top level'} must be a table, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = [key for key in data if key not in names]
    if unknown:
        raise ConfigError(_unknown_key(str(unknown[0]), names, where))
    return {key: _convert(hints[key], value, f"{where}{key}") for key, value in data.items()}


def _unknown_key(key: str, names: set[str], where: str) -> str:
    """One line: the key, its table as TOML names it, and the nearest known key (the table's keys when none is
    near)."""
    table = f" in [{where.rstrip('.')}]" if where else ""
    match = closest(key, names)
    if match is not None:
        return f"unknown config key {one_line(repr(key))}{table} — did you mean {match!r}?"
    return f"unknown config key {one_line(repr(key))}{table}; its keys are {', '.join(sorted(names))}"


def build(cls: type, data: Mapping[str, Any], where: str) -> Any:
    """Build a frozen dataclass from a mapping, checking keys and types so typos fail loudly."""
    kwargs = typed_fields(cls, data, where)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"invalid config {where or 'value'}: {e}") from None


def _convert(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, f"{key}.")
    if origin is Literal:
        if value not in typing.get_args(hint):
            choices = typing.get_args(hint)
            hint_text = did_you_mean(value, choices) if isinstance(value, str) else ""
            raise ConfigError(f"config {key} = {value!r} is not one of {list(choices)}{hint_text}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        for arg in args[:-1]:  # the first member the value fits; the last one's error when none does
            try:
                return _convert(arg, value, key)
            except ConfigError:
                pass
        return _convert(args[-1], value, key)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"config {key} must be a table")
        value_type = typing.get_args(hint)[1]
        return {str(k): _convert(value_type, v, f"{key}.{k}") for k, v in value.items()}
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if item is str and (not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value)):
            raise ConfigError(f"config {key} must be a list of strings")
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config {key} must be a list of {'integers' if item is int else 'numbers'}")
        return tuple(_convert(item, v, key) for v in value)
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(f"config {key} must be true or false, got {value!r}")
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"config {key} must be an integer, got {value!r}")
    if hint is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ConfigError(f"config {key} must be a number, got {value!r}")
    if hint is str and not isinstance(value, str):
        raise ConfigError(f"config {key} must be a string, got {value!r}")
    return float(value) if hint is float else value
