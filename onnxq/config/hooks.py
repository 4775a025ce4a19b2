"""A user's own function named in a config or on the command line: "package.module:function" (imported) or
"path/to/file.py:function" (a file, relative to the working directory), or the function itself from Python."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onnxq.errors import ConfigError, one_line, whole_message

__all__ = ["resolve_hook", "hook_name"]

_LOADED: dict[str, Callable[..., Any]] = {}  # a file is executed once per process, however often it is resolved


def hook_name(hook: str | Callable[..., Any]) -> str:
    """How the report names a hook: its spec, or a function's module:qualname."""
    if isinstance(hook, str):
        return hook
    return f"{getattr(hook, '__module__', '?')}:{getattr(hook, '__qualname__', type(hook).__name__)}"


def resolve_hook(hook: str | Callable[..., Any], key: str) -> Callable[..., Any]:
    """The function a spec names; one line naming the spec and the fix when it cannot be had."""
    if callable(hook):
        return hook
    where, sep, name = hook.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ConfigError(f"{key} {one_line(repr(hook))} is not MODULE:FUNCTION or FILE.py:FUNCTION — name the "
                          "function to call, e.g. mytask.metrics:evaluate")
    # A file is known by its absolute path: the same relative spec from another working directory is another file.
    cache_key = f"{Path(where).resolve()}:{name}" if where.endswith(".py") else hook
    if cache_key in _LOADED:
        return _LOADED[cache_key]
    module = _load_file(where, key) if where.endswith(".py") else _import(where, key)
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"{key} {one_line(repr(hook))}: {one_line(where)} has no function {name!r} — check the "
                          "name")
    _LOADED[cache_key] = function
    return function


def _import(module: str, key: str) -> Any:
    # As `python -m` does, a module in the working directory is found (for this import only).
    here = str(Path.cwd())
    sys.path.append(here)
    try:
        return importlib.import_module(module)
    except Exception as e:  # the user's module failing to import is their error, with its own text
        raise ConfigError(f"{key}: importing {one_line(module)} failed ({type(e).__name__}: {whole_message(e)}) — "
                          "check that it is importable from here") from None
    finally:
        if sys.path and sys.path[-1] == here:
            sys.path.pop()


def _load_file(path: str, key: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{key}: {one_line(path)} is not a file — give the path of the .py file that holds the "
                          "function")
    spec = importlib.util.spec_from_file_location(f"onnxq_hook_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ConfigError(f"{key}: running {one_line(path)} failed ({type(e).__name__}: {whole_message(e)}) — fix "
                          "the file") from None
    return module
