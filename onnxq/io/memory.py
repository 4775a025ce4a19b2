"""Resident memory between phases: memory-mapped weights paged out, the C heap trimmed."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import sys

import numpy as np
import onnx_ir as ir

__all__ = ["page_out", "trim_heap", "hold_mmap_threshold", "MMAP_THRESHOLD_BYTES", "memory_map", "raw_bytes"]

# The C heap's buffers from this size up are mapped and unmapped whole (hold_mmap_threshold).
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def page_out(source: ir.Model | ir.TensorProtocol | np.ndarray) -> None:
    """Drop a model's (or one tensor's, or an array's) memory-mapped external data from this process's resident
    memory. It stays valid: the next read faults it back in from the file, through the page cache. So the float
    weights a phase has read are not counted next to what the next phase builds."""
    if not hasattr(mmap, "MADV_DONTNEED"):  # not Linux / macOS: leave it to the OS
        return
    tensors = ([v.const_value for v in source.graph.initializers.values()] if isinstance(source, ir.Model)
               else [source])
    for tensor in tensors:
        mapping = memory_map(tensor)
        if mapping is not None:
            mapping.madvise(mmap.MADV_DONTNEED)


def memory_map(tensor: ir.TensorProtocol | np.ndarray | None) -> mmap.mmap | None:
    """The memory map a tensor's bytes are read from: an external tensor's own (once read), or the one an in-memory
    tensor's array (or an array) is a view of (a weight the run's spill file holds, given to a graph through the
    run's memo: passes.graph.builder.remap_shared_weights); None for a tensor with memory of its own."""
    if isinstance(tensor, ir.ExternalTensor):
        return tensor.raw
    base = tensor if isinstance(tensor, np.ndarray) else getattr(tensor, "raw", None)
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None


@functools.cache
def _libc_function(name: str):
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


@functools.cache
def hold_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD_BYTES for the rest of the process; whether it was set (False
    where the C library is not glibc). By default glibc raises the threshold to the size of each mapped buffer
    freed, up to 32 MiB: once a language model's first 25 MB logits buffer is freed, every later one comes from the
    heap, where the small buffers of ORT's arena-less segment sessions (io.segments) pin it — the freed space stays
    resident until the run ends and the heap is trimmed. Optimum's SmolLM2 4-bit, each step's exact peak: the
    sensitivity 785 -> 691 MiB, the verification 730 -> 629. The price: a large buffer's pages are faulted in again
    each time it is made (those steps ran ~20 % slower). Called where a model is run in segments: a process-wide
    setting, made for the large models that need it."""
    mallopt = _libc_function("mallopt")
    return mallopt is not None and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1


def trim_heap() -> None:
    """Hand the C heap's free pages back to the OS. glibc keeps what ORT sessions freed (their weight copies and
    pre-packed buffers), which would otherwise be counted under the next phase's float weights."""
    trim = _libc_function("malloc_trim")
    if trim is not None:
        trim(0)


def raw_bytes(tensor: ir.TensorProtocol) -> bytes | np.ndarray:
    """The tensor's bytes as ONNX stores them (raw_data), without a copy where its array already is that layout (a
    whole copy per tensor was the load's peak: the 113 MB table a folded Transpose makes, +113 MB while written):
    what io.spill and io.streamed_proto write."""
    # A lazy tensor (a float16 weight read as float32: passes.float16.model) evaluated once, its array taken whole:
    # tobytes() evaluates it and copies the result (+113 MB while SmolLM2's float16 table was spilled).
    array = (tensor.raw if isinstance(tensor, ir.Tensor) else tensor.numpy() if isinstance(tensor, ir.LazyTensor)
             else None)
    if (isinstance(array, np.ndarray) and array.flags.c_contiguous and array.dtype.isnative
            and sys.byteorder == "little" and array.dtype.itemsize * 8 == tensor.dtype.bitwidth):
        return array.reshape(-1).view(np.uint8)
    return tensor.tobytes()
