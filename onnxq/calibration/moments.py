"""Second moments of the activations that 4-bit weights read: per weight, XᵀX / n (GPTQ's Hessian) or its diagonal
(activation-aware clipping), summed over every node that reads the weight — a weight shared by many nodes (an
unrolled RNN's cell, read once per time step) is fitted to all of its inputs and quantized once.

Memory is bounded by a budget, not by the model: the weights are taken in graph order in chunks whose K×K float64
accumulators fit it, one pass over the calibration data per chunk, and only the chunk in use is held. Within the
budget (the usual case) that is one pass and every matrix stays for the sensitivity and fallback probes that
quantize again; beyond it a later request for an earlier chunk's matrix runs its pass again."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable

import numpy as np
import onnx_ir as ir

from onnxq.calibration.channels import values_per_batch
from onnxq.calibration.specs import Batch
from onnxq.errors import CalibrationDataError

__all__ = ["WeightKey", "WeightMoments", "weight_key", "BUDGET_BYTES"]

logger = logging.getLogger(__name__)

# float64 accumulators held at once: 1 GiB is 4 matrices of K = 4096 (an LSTM's shared cells in one pass), 30
# layers of a 576-wide language model's q/k/v/gate/up inputs.
BUDGET_BYTES = 1 << 30

# (weight initializer name, read transposed): the matrix's K axis is its rows, or its columns for Gemm transB.
WeightKey = tuple[str, bool]


def weight_key(node: ir.Node) -> WeightKey:
    trans_b = node.attributes.get("transB")
    return node.inputs[1].name or "", node.op_type == "Gemm" and trans_b is not None and trans_b.value == 1


@dataclasses.dataclass(frozen=True)
class _Chunk:
    keys: tuple[WeightKey, ...]
    activations: tuple[str, ...]


class WeightMoments:
    """readers: for each weight, the activations (value names) that its nodes multiply it with.
    batches: a fresh pass over the calibration data (less the held-back samples) each time it is called."""

    def __init__(self, model: ir.Model, readers: dict[WeightKey, list[str]], batches: Callable[[], Iterable[Batch]],
                 full: bool, budget: int | None = None) -> None:
        self.model, self.readers, self.batches, self.full = model, readers, batches, full
        self.budget = BUDGET_BYTES if budget is None else budget
        self._widths = {key: self._width(key) for key in readers}  # K of each weight
        self._chunks = self._plan(self.budget)
        self._held: dict[WeightKey, np.ndarray] = {}
        self.passes = 0  # over the data
        # Nodes whose weight's inputs no batch made (a branch never taken): rounded to nearest, said in the report.
        self.unseen_nodes: set[str] = set()
        self.most_held = 0  # matrices held at once, at most

    @property
    def chunks(self) -> int:
        return len(self._chunks)

    def get(self, key: WeightKey) -> np.ndarray | None:
        """The weight's matrix (or diagonal); None for a weight no plan reads with data."""
        if key not in self.readers:
            return None
        if key not in self._held:
            self._held = self._collect(next(c for c in self._chunks if key in c.keys))
            self.most_held = max(self.most_held, len(self._held))
        return self._held.get(key)  # None too for a weight whose input no batch made (an If branch never taken)

    def prefetch(self) -> None:
        """Run the first pass now (it also feeds the samples held back for verification)."""
        if self._chunks:
            self.get(self._chunks[0].keys[0])

    def _plan(self, budget: int) -> list[_Chunk]:
        widths = self._widths
        chunks, keys, held = [], [], 0
        for key in self.readers:
            size = widths[key] ** 2 * 8 if self.full else widths[key] * 8
            if keys and held + size > budget:
                chunks.append(keys)
                keys, held = [], 0
            keys.append(key)
            held += size
        if keys:
            chunks.append(keys)
        if len(chunks) > 1:
            logger.info("second moments: %d weights in %d passes over the data (budget %d MiB)", len(self.readers),
                        len(chunks), budget >> 20)
        return [_Chunk(tuple(c), tuple(dict.fromkeys(a for k in c for a in self.readers[k]))) for c in chunks]

    def _width(self, key: WeightKey) -> int:
        """K: the weight's rows, or its columns when read transposed (an initializer's or a Constant's shape)."""
        for node in self.model.graph.all_nodes():  # a body's weight too
            if node.op_type in ("MatMul", "Gemm") and len(node.inputs) > 1 and weight_key(node) == key:
                tensor = ir.convenience.get_const_tensor(node.inputs[1])
                if tensor is not None and len(tensor.shape) == 2:
                    return int(tensor.shape[0 if not key[1] else 1])
        return 1

    def _collect(self, chunk: _Chunk) -> dict[WeightKey, np.ndarray]:
        self._held = {}  # the previous chunk's matrices go before this one's are made
        self.passes += 1
        sums: dict[WeightKey, np.ndarray] = {}
        rows = dict.fromkeys(chunk.keys, 0)
        batches = 0
        for arrays in values_per_batch(self.model, list(chunk.activations), self.batches()):
            batches += 1
            for key in chunk.keys:
                # Rows of K (the weight's width): a body's value comes out flattened (calibration.bodies), and one
                # a run did not make (a branch not taken) comes out empty: no rows.
                width = self._widths[key]
                parts = [p.reshape(-1, width) for p in (np.asarray(arrays[a], np.float32)
                                                        for a in self.readers[key]) if p.size]
                if not parts:
                    continue
                flat = np.concatenate(parts)
                squares = (flat.T.astype(np.float64) @ flat if self.full
                           else np.einsum("ij,ij->j", flat, flat, dtype=np.float64))
                if not np.all(np.isfinite(squares)):
                    raise CalibrationDataError(f"the model computes NaN or inf for an input of weight {key[0]!r} on a "
                                               "calibration batch — check those inputs")
                if key in sums:
                    sums[key] += squares
                else:
                    sums[key] = squares
                rows[key] += flat.shape[0]
        if not batches:
            raise CalibrationDataError("calibration data holds no samples — pass at least one sample per input")
        unseen = set(chunk.keys) - set(sums)
        self.unseen_nodes |= {n.name or "" for n in self.model.graph.all_nodes()
                              if n.op_type in ("MatMul", "Gemm") and len(n.inputs) > 1 and n.inputs[1] is not None
                              and weight_key(n) in unseen}
        return {key: sums[key] / rows[key] for key in sums}
