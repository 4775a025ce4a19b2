"""Custom-operator libraries (onnxruntime-extensions' and the like): resolved and loaded once when a run starts, then
registered by every ONNX Runtime session the run makes (io.sessions). The nodes they define stay float: onnxq has no
planner for them, and the nodes around them are quantized as usual.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import onnxruntime as ort

from onnxq.errors import ConfigError

__all__ = ["custom_op_libraries", "register_libraries", "libraries_loaded"]

_LIBRARIES: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("onnxq_custom_op_libraries",
                                                                              default=())


@contextlib.contextmanager
def custom_op_libraries(names: Sequence[str]) -> Iterator[tuple[str, ...]]:
    """Within it, every session onnxq makes registers these libraries: each name a shared library's path, or an
    importable package with get_library_path() (onnxruntime_extensions). Each is loaded once here, so that a library
    ONNX Runtime cannot load is refused in one line before any work."""
    paths = tuple(dict.fromkeys(_resolved(name) for name in names))
    for path in paths:
        _check_loads(path)
    token = _LIBRARIES.set(tuple(dict.fromkeys((*_LIBRARIES.get(), *paths))))
    try:
        yield paths
    finally:
        _LIBRARIES.reset(token)


def register_libraries(options: ort.SessionOptions) -> ort.SessionOptions:
    """options with the run's custom-op libraries registered (none outside custom_op_libraries)."""
    for path in _LIBRARIES.get():
        options.register_custom_ops_library(path)
    return options


def libraries_loaded() -> bool:
    return bool(_LIBRARIES.get())


def _resolved(name: str) -> str:
    if Path(name).is_file():
        return str(Path(name).resolve())
    if Path(name).suffix.lower() in (".so", ".dll", ".dylib") or "/" in name or "\\" in name:
        raise ConfigError(f"custom-op library {name!r} is not a file — pass the library's path")
    try:
        path = importlib.import_module(name).get_library_path()
    except ImportError:
        raise ConfigError(f"custom-op library {name!r} is neither a file nor an installed Python package — pass the "
                          f"library's path, or install the package (onnxruntime_extensions: pip install "
                          f"onnxruntime-extensions)") from None
    except AttributeError:
        raise ConfigError(f"custom-op library {name!r}: the package has no get_library_path() — pass the library's "
                          "path") from None
    return str(path)


def _check_loads(path: str) -> None:
    try:
        ort.SessionOptions().register_custom_ops_library(path)
    except Exception as e:  # noqa: BLE001 — onnxruntime's reason, whatever its type
        reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise ConfigError(f"onnxruntime {ort.__version__} cannot load the custom-op library {path} ({reason}) — "
                          "pass a library built for this onnxruntime and platform") from None
