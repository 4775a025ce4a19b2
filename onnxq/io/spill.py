"""Float weights that exist only in this process's memory — computed by the run (SmoothQuant's scaled weights, a
transpose folded at preparation) or given as an in-memory model — moved to a temporary data file and read back
memory-mapped, like an input's own external data: between phases they are paged out (io.memory.page_out) instead
of staying resident beside the sessions and the quantized weights. On SmolLM2-135M's default run (SmoothQuant)
they were 618 MB of anonymous memory held from smoothing to the end, for a 653 MB model.

The file lives for one run: `close` loads what the run's returned model still reads from it (the weights of nodes
kept float) back into memory, then deletes it."""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import onnx_ir as ir

from onnxq.io.memory import memory_map, page_out, raw_bytes
from onnxq.io.model import model_size_bytes

__all__ = ["SpillFile", "SPILL_MIN_BYTES", "SPILL_TENSOR_MIN_BYTES", "SPILL_QUANTIZED_MIN_BYTES"]

logger = logging.getLogger(__name__)

# Below this many bytes of in-memory float weights a model's memory is the interpreter's and ORT's own: no file.
SPILL_MIN_BYTES = 64 << 20
# Smaller tensors (norms, biases, scales) stay in memory: each spilled tensor maps the file once.
SPILL_TENSOR_MIN_BYTES = 1 << 20
# The same for quantized weights, a quarter of their float size: SmolLM2's int8 projections are 330-880 kB each.
SPILL_QUANTIZED_MIN_BYTES = 64 << 10
# Offsets aligned for any dtype numpy maps and for AVX-512 loads.
_ALIGN = 64
_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE})
_NAME = "spilled-weights.bin"


class SpillFile:
    """One run's temporary data file of spilled float weights (created on first use)."""

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._offset = 0
        self._spilled: list[ir.ExternalTensor] = []

    def spill(self, models: Iterable[ir.Model | None]) -> int:
        """Move every in-memory float initializer of at least SPILL_TENSOR_MIN_BYTES of the models (bodies
        included) to the file; a tensor the models share is written once and shared. Nothing when they hold
        under SPILL_MIN_BYTES of such weights; what a full disk refuses stays in memory. Returns the bytes
        spilled."""
        holders = [(value, value.const_value) for model in models if model is not None for graph in model.graphs()
                   for value in graph.initializers.values() if _spillable(value.const_value)]
        if _distinct_bytes(holders) < SPILL_MIN_BYTES and not self._spilled:
            return 0
        return sum(t.nbytes for t in self._move(holders, "float weights").values())

    def spill_quantized(self, model: ir.Model) -> dict[int, ir.ExternalTensor]:
        """The rewrite's in-memory weights of the model (int8 and the like: any type but strings and 4-bit ones,
        which ORT takes inside the graph; at least SPILL_QUANTIZED_MIN_BYTES each) moved to the file as `spill`
        moves float ones, when the model holds at least SPILL_MIN_BYTES of them: paged out between phases, they are
        no longer anonymous memory beside every later step's sessions (SmolLM2's W8A8 weights: 157 MB through
        verification, sensitivity and timing). Returns id(the array each held) → its twin, for a memo that holds
        the same arrays (passes.graph.builder.remap_shared_weights)."""
        holders = [(value, value.const_value) for graph in model.graphs() for value in graph.initializers.values()
                   if _spillable_quantized(value.const_value)]
        if _distinct_bytes(holders) < SPILL_MIN_BYTES:
            return {}
        twins = self._move(holders, "quantized weights")
        return {id(tensor.raw): twins[id(tensor)] for _, tensor in holders if id(tensor) in twins}

    def storing(self, model: ir.Model) -> Callable[[ir.TensorProtocol], ir.TensorProtocol] | None:
        """`stored` for what a pass computes from this model, when the model is large enough to spill at all (at
        least SPILL_MIN_BYTES of weights, the rule of `spill`); None keeps a small model's in memory."""
        return self.stored if model_size_bytes(model) >= SPILL_MIN_BYTES else None

    def storing_rows(self, model: ir.Model) -> Callable[[str, tuple[int, ...], Iterable[np.ndarray]],
                                                         ir.TensorProtocol] | None:
        """`stored_rows` under the same rule as `storing`."""
        return self.stored_rows if self.storing(model) is not None else None

    def stored(self, tensor: ir.TensorProtocol) -> ir.TensorProtocol:
        """One float weight a pass has just computed, moved to the file at once when it is spillable (else, or
        when the disk refuses it, the tensor as it is): a pass that makes many (SmoothQuant's scaled weights, a
        second copy of the model) then holds one at a time, not all until the next spill."""
        if not _spillable(tensor):
            return tensor
        try:
            return self._write(tensor)
        except OSError as e:
            logger.warning("a float weight kept in memory: the temporary file refused it (%s)", e)
            return tensor

    def stored_rows(self, name: str, shape: tuple[int, ...], pieces: Iterable[np.ndarray]) -> ir.TensorProtocol:
        """A float32 weight of `shape` a pass computes piece by piece along its first axis, written as the pieces
        come, so that the pass holds one at a time instead of the whole (SmoothQuant's scaled lm_head: 113 MB for
        SmolLM2, beside the 113 MB of its source's pages). The tensor `stored` would give for the whole: in memory
        under SPILL_TENSOR_MIN_BYTES, or what the disk refuses (the pieces written so far read back)."""
        pieces = iter(pieces)
        if 4 * int(np.prod(shape, dtype=np.int64)) < SPILL_TENSOR_MIN_BYTES:
            return ir.Tensor(np.concatenate(list(pieces)).reshape(shape), name=name)
        start, written, piece = self._start(), 0, np.zeros(0, np.float32)
        try:
            with open(self._folder / _NAME, "ab") as file:
                file.truncate(start)
                for piece in pieces:
                    file.write(np.ascontiguousarray(piece, np.float32).reshape(-1).view(np.uint8))
                    file.flush()  # a refusal raises here, before the piece counts as written
                    written += piece.size
        except OSError as e:
            logger.warning("a float weight kept in memory: the temporary file refused it (%s)", e)
            done = np.fromfile(self._folder / _NAME, np.float32, count=written, offset=start) if written else piece[:0]
            rest = [p.reshape(-1) for p in (piece, *pieces)]
            return ir.Tensor(np.concatenate([done.reshape(-1), *rest]).astype(np.float32).reshape(shape), name=name)
        return self._appended(start, 4 * written, ir.DataType.FLOAT, shape, name)

    def stored_array(self, array: np.ndarray) -> np.ndarray:
        """An array the run holds outside any model (its memo's 4-bit codes and scales: passes.graph.builder.
        spill_shared_blocks) moved to the file and read back memory-mapped, when it is in memory and at least
        SPILL_QUANTIZED_MIN_BYTES (else, or when the disk refuses it, the array as it is)."""
        if array.nbytes < SPILL_QUANTIZED_MIN_BYTES or memory_map(array) is not None:
            return array
        try:
            return self._write(ir.Tensor(np.ascontiguousarray(array))).numpy()
        except OSError as e:
            logger.warning("a quantized weight's blocks kept in memory: the temporary file refused them (%s)", e)
            return array

    def page_out(self) -> None:
        for tensor in self._spilled:
            page_out(tensor)

    def close(self, keep: ir.Model | None) -> None:
        """Load the spilled tensors `keep` still reads into memory, then delete the file."""
        if self._folder is None:
            return
        spilled = {id(t) for t in self._spilled}
        if keep is not None:
            for graph in keep.graphs():
                for value in graph.initializers.values():
                    if id(value.const_value) in spilled:
                        value.const_value = ir.Tensor(np.array(value.const_value.numpy()),
                                                      name=value.const_value.name)
        self._spilled.clear()
        shutil.rmtree(self._folder, ignore_errors=True)
        self._folder = None

    def _move(self, holders: list[tuple[ir.Value, ir.TensorProtocol]], what: str) -> dict[int, ir.ExternalTensor]:
        """Each distinct tensor of (value, tensor) pairs written to the file once and its values pointed at the
        twin; id(tensor) → twin (the holders keep each tensor alive: ids stay unique). What a full disk refuses
        stays in memory."""
        twins: dict[int, ir.ExternalTensor] = {}
        for value, tensor in holders:
            if id(tensor) not in twins:
                try:
                    twins[id(tensor)] = self._write(tensor)
                except OSError as e:
                    logger.warning("%s kept in memory: the temporary file refused them (%s)", what, e)
                    break
            value.const_value = twins[id(tensor)]
        return twins

    def _write(self, tensor: ir.TensorProtocol) -> ir.ExternalTensor:
        start = self._start()
        data = raw_bytes(tensor)
        with open(self._folder / _NAME, "ab") as file:
            file.truncate(start)  # the alignment's padding (or what a refused write left)
            file.write(data)
        return self._appended(start, len(data), tensor.dtype, tensor.shape, tensor.name)

    def _start(self) -> int:
        """The aligned offset the next tensor is written at (the file made on first use)."""
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="onnxq-spill-"))
            atexit.register(shutil.rmtree, self._folder, ignore_errors=True)  # a run_steps without close
        return self._offset + -self._offset % _ALIGN

    def _appended(self, start: int, length: int, dtype: ir.DataType, shape: ir.Shape | tuple[int, ...],
                  name: str | None) -> ir.ExternalTensor:
        twin = ir.ExternalTensor(_NAME, start, length, dtype, name=name,
                                 shape=shape if isinstance(shape, ir.Shape) else ir.Shape(shape),
                                 base_dir=self._folder)
        self._offset = start + length
        self._spilled.append(twin)
        return twin


def _distinct_bytes(holders: list[tuple[ir.Value, ir.TensorProtocol]]) -> int:
    return sum(t.nbytes for t in {id(t): t for _, t in holders}.values())


def _spillable_quantized(tensor: ir.TensorProtocol | None) -> bool:
    # A view of a memory map (a graph rebuilt from the remapped memo) is on file already.
    return (isinstance(tensor, ir.Tensor) and isinstance(tensor.raw, np.ndarray) and memory_map(tensor) is None
            and tensor.dtype != ir.DataType.STRING and tensor.dtype.itemsize >= 1
            and tensor.nbytes >= min(SPILL_QUANTIZED_MIN_BYTES, SPILL_TENSOR_MIN_BYTES))


def _spillable(tensor: ir.TensorProtocol | None) -> bool:
    return (tensor is not None and not isinstance(tensor, ir.ExternalTensor) and tensor.dtype in _FLOATS
            and tensor.nbytes >= SPILL_TENSOR_MIN_BYTES)
