"""A memory-mapped file truncated by another program while onnxq reads it: the read faults with SIGBUS, which
Python cannot turn into an exception (its own handler returns to the faulting read, which faults again). The
command line installs a handler that says so in one line, removes the run's staged outputs and exits 2; what
changed without truncation is caught when the run ends (io.outputs compares every input with its snapshot)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator

from onnxq.io.outputs import staging_folders

__all__ = ["sigbus_as_error", "SIGBUS_MESSAGE"]

SIGBUS_MESSAGE = ("onnxq: error: a memory-mapped input (the model's external data, or a calibration array) was "
                  "truncated or replaced while onnxq read it; nothing was written — rerun when no other program "
                  "writes to it\n")
_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)
_fired = threading.Event()


@_HANDLER
def _on_sigbus(signum: int) -> None:
    # Runs on the faulting thread (Python's or one of onnxruntime's); the first one reports and ends the process.
    if _fired.is_set():
        while True:
            time.sleep(1)
    _fired.set()
    for folder in staging_folders():
        shutil.rmtree(folder, ignore_errors=True)
    os.write(2, SIGBUS_MESSAGE.encode())
    os._exit(2)


@contextlib.contextmanager
def sigbus_as_error() -> Iterator[None]:
    """Within it, SIGBUS ends the process with one line and exit 2 (where the C library has signal(): Linux,
    macOS); the previous handler is restored after."""
    bus = getattr(signal, "SIGBUS", None)
    try:
        libc = ctypes.CDLL(None)
        install = libc.signal
    except (OSError, AttributeError):
        install = None
    if bus is None or install is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    install.restype = ctypes.c_void_p
    install.argtypes = [ctypes.c_int, ctypes.c_void_p]
    previous = install(bus, ctypes.cast(_on_sigbus, ctypes.c_void_p))
    try:
        yield
    finally:
        install(bus, previous)
