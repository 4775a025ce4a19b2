"""Resident memory between phases: memory-mapped weights paged out, the C heap trimmed."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap

import onnx_ir as ir

__all__ = ["page_out", "trim_heap"]


def page_out(source: ir.Model | ir.TensorProtocol) -> None:
    """Drop a model's (or one tensor's) memory-mapped external data from this process's resident memory. It stays
    valid: the next read faults it back in from the file, through the page cache. So the float weights a phase
    has read are not counted next to what the next phase builds."""
    if not hasattr(mmap, "MADV_DONTNEED"):  # not Linux / macOS: leave it to the OS
        return
    tensors = ([v.const_value for v in source.graph.initializers.values()] if isinstance(source, ir.Model)
               else [source])
    for tensor in tensors:
        if isinstance(tensor, ir.ExternalTensor) and tensor.raw is not None:
            tensor.raw.madvise(mmap.MADV_DONTNEED)


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


def trim_heap() -> None:
    """Hand the C heap's free pages back to the OS. glibc keeps what ORT sessions freed (their weight copies and
    pre-packed buffers), which would otherwise be counted under the next phase's float weights."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
