"""glibc's mmap threshold held fixed where a model runs in segments (io.memory.hold_mmap_threshold): a buffer over
the threshold is mapped (and unmapped when freed) even after a larger mapped buffer was freed — glibc's default
would have raised the threshold past it and taken it from the heap. Each case in a fresh process: the threshold is
process-wide and cannot be put back."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from decoder_model import kv_decoder

import onnxq.io.segments as segments
from onnxq.io import OrtModel, load_model
from onnxq.io.memory import MMAP_THRESHOLD_BYTES, _libc_function
from onnxq.io.sessions import session_options

_PROBE = """
import ctypes, ctypes.util, sys
from onnxq.io.memory import MMAP_THRESHOLD_BYTES, hold_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "held":
    assert hold_mmap_threshold()
large = libc.malloc(30 << 20)  # mapped either way (over the 128 KiB glibc starts from), then freed
libc.free(large)
before = libc.mallinfo2().hblkhd
block = libc.malloc(MMAP_THRESHOLD_BYTES + (1 << 20))
print(libc.mallinfo2().hblkhd - before)
libc.free(block)
"""


def _mapped_bytes(case: str) -> int:
    # glibc's own tunables in the environment would set the threshold before the probe does.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    done = subprocess.run([sys.executable, "-c", _PROBE, case], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


@pytest.mark.skipif(_libc_function("mallinfo2") is None or _libc_function("mallopt") is None,
                    reason="needs glibc 2.33+ (mallopt, mallinfo2): not this C library")
def test_a_held_threshold_maps_a_buffer_that_glibc_s_default_would_take_from_the_heap():
    size = MMAP_THRESHOLD_BYTES + (1 << 20)
    assert MMAP_THRESHOLD_BYTES < 30 << 20  # the probe frees 30 MiB first: under glibc's 32 MiB ceiling
    # glibc's default: the freed 30 MiB buffer raised the threshold, so the next one came from the heap.
    assert _mapped_bytes("default") == 0
    assert _mapped_bytes("held") >= size


def test_a_segmented_session_holds_the_threshold(monkeypatch):
    held = []
    monkeypatch.setattr(segments, "hold_mmap_threshold", lambda: held.append(True))
    monkeypatch.setattr(segments, "SEGMENT_FROM_BYTES", 0)
    monkeypatch.setattr(segments, "_MIN_SEGMENT_BYTES", 0)
    model = load_model(kv_decoder())
    session = OrtModel(model).session(session_options(optimize=False), ["CPUExecutionProvider"])
    assert isinstance(session, segments.SegmentedSession)
    assert held == [True]
