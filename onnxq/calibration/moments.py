"""Second moments of the activations that weights read: per weight, XᵀX / n (GPTQ's Hessian) or its diagonal
(activation-aware clipping), summed over every node that reads the weight — a weight shared by many nodes (an
unrolled RNN's cell, read once per time step) is fitted to all of its inputs and quantized once. A Conv's rows are
its im2col rows (numerics.im2col: one per output position, K over kernel taps and the group's input channels), one
matrix per group ([G, K, K]; a depthwise Conv's are 9 × 9).

Memory is bounded by a budget, not by the model: the weights are taken in graph order in chunks whose accumulators
fit it (each K×K matrix kept as its packed upper triangle, numerics.symmetric, and unpacked for the weight that asks),
one pass over the calibration data per chunk, and only the chunk in use is held. Within the budget (the usual case)
that is one pass and every matrix stays for the sensitivity and fallback probes that quantize again; beyond it a
later request for an earlier chunk's matrix runs its pass again."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable

import numpy as np
import onnx_ir as ir

from onnxq.calibration.channels import values_per_batch
from onnxq.calibration.moment_sums import MomentSum, RunningMomentSum, StoredMoments
from onnxq.data.specs import Batch
from onnxq.errors import CalibrationDataError
from onnxq.io.memory import page_out
from onnxq.io.irquery import attribute
from onnxq.numerics.gram import gram
from onnxq.numerics.im2col import ConvGeometry, im2col_groups
from onnxq.numerics.order_free_sum import BYTES_PER_ELEMENT
from onnxq.numerics.symmetric import unpacked

__all__ = ["WeightKey", "WeightMoments", "weight_key", "conv_geometry", "BUDGET_BYTES"]

logger = logging.getLogger(__name__)

# Accumulators held at once, 18 bytes a summed element (numerics.order_free_sum): 1 GiB is 7 packed triangles of
# K = 4096, or a 576-wide language model's 30 layers (0.9 GB, 0.2 GB of float32 means after).
BUDGET_BYTES = 1 << 30
# Each batch's XᵀX is made in float32 (BLAS's blocked sums, on one thread: numerics.gram), as GPTQ's reference code
# does, and the batches' products are added order-free (calibration.moment_sums: shards merge bit for bit) — a
# Conv's, which no summary stores, with BLAS's threads and in place (RunningMomentSum); the
# means are float32 (float64 held SmolLM2's 0.8 GB of matrices through calibration and the rewrite, the 4-bit run's
# peak). GPTQ takes each matrix in float64 as it uses it. The diagonals (activation-aware clipping) stay float64: K
# values each.
_MATRIX_DTYPE = np.float32

# A sample's im2col rows past what its XᵀX needs: a video ResNet's 3×3×3 Convs have 25088 rows of K = 1728 a clip
# (75 G multiply-adds each; 171 s of mc3_18's 628 s run). Past _SAMPLE_PRODUCT_MACS a sample, a seeded subset of
# rows spread over the whole map is summed, never fewer than _MIN_SAMPLE_ROWS; image CNNs at 224 px never reach
# it (ResNet-50: 1.0 G at most).
_SAMPLE_PRODUCT_MACS = 1 << 32
_MIN_SAMPLE_ROWS = 4096

# (weight initializer name, read transposed): the matrix's K axis is its rows, or its columns for Gemm transB.
WeightKey = tuple[str, bool]


def weight_key(node: ir.Node) -> WeightKey:
    trans_b = node.attributes.get("transB")
    return node.inputs[1].name or "", node.op_type == "Gemm" and trans_b is not None and trans_b.value == 1


def conv_geometry(node: ir.Node, weight_shape: tuple[int, ...]) -> ConvGeometry:
    n = len(weight_shape) - 2
    return ConvGeometry(tuple(weight_shape[2:]), tuple(attribute(node, "strides", (1,) * n)),
                        tuple(attribute(node, "dilations", (1,) * n)), tuple(attribute(node, "pads", ())),
                        int(attribute(node, "group", 1)), str(attribute(node, "auto_pad", "NOTSET")))


_PRODUCTS = ("MatMul", "Gemm", "Conv")


def _weighted(node: ir.Node) -> bool:
    return node.op_type in _PRODUCTS and len(node.inputs) > 1 and node.inputs[1] is not None


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
        self._convs: dict[WeightKey, ConvGeometry] = {}  # Conv weights: their im2col geometry
        self._widths = self._find_widths()  # K of each weight
        self._chunks = self._plan(self.budget)
        self._held: dict[WeightKey, np.ndarray] = {}
        self.passes = 0  # over the data
        # Nodes whose weight's inputs no batch made (a branch never taken): rounded to nearest, said in the report.
        self.unseen_nodes: set[str] = set()
        self.most_held = 0  # matrices held at once, at most
        self.from_summary = False  # the means came from a calibration summary: no pass over data

    @classmethod
    def from_stored(cls, model: ir.Model, readers: dict[WeightKey, list[str]], stored: StoredMoments) -> WeightMoments:
        """The means of a calibration summary's sums, for the weights `readers` names (each read by the same
        activations as when they were summed, else the summary does not describe them)."""
        for key, activations in readers.items():
            index = stored.weights.get(key)
            if index is None or stored.readers[index] != tuple(activations):
                raise CalibrationDataError(
                    f"the calibration cache holds no second moments of weight {key[0]!r} as this run reads it — "
                    "recalibrate with this config (onnxq calibrate --weights …), or pass --calib DATA too")
        moments = cls(model, readers, _no_data, stored.full)
        means = stored.means()
        moments._held = {key: means[key] for key in readers if key in means}
        moments.from_summary, moments.most_held = True, len(moments._held)
        moments.unseen_nodes = {n.name or "" for n in model.graph.all_nodes()
                                if _weighted(n) and weight_key(n) in set(readers) - set(moments._held)}
        return moments

    @property
    def chunks(self) -> int:
        return len(self._chunks)

    def has(self, key: WeightKey) -> bool:
        """Whether get(key) gives a matrix, known without unpacking one (a graph built again from the run's memo of
        quantized weights asks only this)."""
        return self._held_sum(key) is not None

    def get(self, key: WeightKey) -> np.ndarray | None:
        """The weight's matrix (or diagonal); None for a weight no plan reads with data."""
        held = self._held_sum(key)
        if held is None or not self.full:
            return held
        matrix = unpacked(held)
        page_out(held)  # a spilled triangle: the next weight that shares it reads it back from the page cache
        return matrix

    def _held_sum(self, key: WeightKey) -> np.ndarray | None:
        """The weight's packed triangle (or diagonal), its chunk's pass run first where it is not held."""
        if key not in self.readers:
            return None
        if key not in self._held and not self.from_summary:
            self._held = self._collect(next(c for c in self._chunks if key in c.keys))
            self.most_held = max(self.most_held, len(self._held))
        return self._held.get(key)  # None too for a weight whose input no batch made (an If branch never taken)

    def prefetch(self) -> None:
        """Run the first pass now (it also feeds the samples held back for verification)."""
        if self._chunks:
            self.get(self._chunks[0].keys[0])

    def spill(self, stored: Callable[[np.ndarray], np.ndarray]) -> None:
        """The matrices held moved to the run's spill file (io.SpillFile.stored_array), read back memory-mapped — by
        the rewrite one at a time, then only by a fallback probe; held, they sat beside the rewrite's weights and
        every later session (SmolLM2's 4-bit run: 1 GB through verification and sensitivity). Each shared matrix is
        written once."""
        moved: dict[int, np.ndarray] = {}
        for key, matrix in self._held.items():
            if id(matrix) not in moved:
                moved[id(matrix)] = stored(matrix)
            self._held[key] = moved[id(matrix)]

    def _plan(self, budget: int) -> list[_Chunk]:
        widths = self._widths
        chunks, keys, held, shared = [], [], 0, set()
        for key in self.readers:
            groups = self._convs[key].group if key in self._convs else 1
            k = widths[key]  # a packed triangle of K(K+1)/2 sums, or a diagonal's K
            own = groups * (k * (k + 1) // 2 if self.full else k) * BYTES_PER_ELEMENT
            if key in self._convs:  # summed in place (RunningMomentSum): float32 triangles, float64 diagonals
                own = groups * (k * (k + 1) // 2 * np.dtype(_MATRIX_DTYPE).itemsize if self.full else k * 8)
            size = 0 if self._shared(key) in shared else own  # a matrix the chunk already makes costs nothing
            if keys and held + size > budget:
                chunks.append(keys)
                keys, held, shared, size = [], 0, set(), own
            keys.append(key)
            shared.add(self._shared(key))
            held += size
        if keys:
            chunks.append(keys)
        if len(chunks) > 1:
            logger.info("second moments: %d weights in %d passes over the data (budget %d MiB)", len(self.readers),
                        len(chunks), budget >> 20)
        return [_Chunk(tuple(c), tuple(dict.fromkeys(a for k in c for a in self.readers[k]))) for c in chunks]

    def _find_widths(self) -> dict[WeightKey, int]:
        """K of each weight: a matrix's rows, or its columns when read transposed; a Conv's kernel taps times its
        group's input channels (an initializer's or a Constant's shape). 1 where no node reads it."""
        widths = dict.fromkeys(self.readers, 1)
        for node in self.model.graph.all_nodes():  # a body's weight too
            key = weight_key(node) if _weighted(node) else None
            tensor = ir.convenience.get_const_tensor(node.inputs[1]) if key in widths else None
            if tensor is None:
                continue
            shape = tuple(int(d) for d in tensor.shape)
            if node.op_type == "Conv" and len(shape) > 2:
                self._convs[key] = conv_geometry(node, shape)
                widths[key] = int(np.prod(shape[1:]))
            elif len(shape) == 2:
                widths[key] = shape[1 if key[1] else 0]
        return widths

    def _shared(self, key: WeightKey) -> tuple:
        """What a weight's matrix depends on: the activations its nodes read and how (its width; a Conv's im2col
        geometry). Weights alike share one matrix: a decoder's q, k and v read one input, gate and up another (SmolLM2:
        1.05 GB of float64 matrices for 0.8 GB distinct)."""
        return tuple(self.readers[key]), self._widths[key], self._convs.get(key)

    def _collect(self, chunk: _Chunk) -> dict[WeightKey, np.ndarray]:
        self._held = {}  # the previous chunk's matrices go before this one's are made
        sums = self._sums(chunk)
        held = {}
        for owner in list(sums):  # each sum made its mean, then dropped: one sum's bins and one mean at a time
            mean = sums.pop(owner).mean()
            held.update({key: mean for key in chunk.keys if self._owner(chunk, key) == owner and mean is not None})
        unseen = set(chunk.keys) - set(held)
        self.unseen_nodes |= {n.name or "" for n in self.model.graph.all_nodes()
                              if _weighted(n) and weight_key(n) in unseen}
        return held

    def stored(self) -> StoredMoments:
        """Every weight's sum (a pass over the data per chunk), for the calibration summary."""
        weights, readers, sums = {}, [], []
        for chunk in self._chunks:
            made = self._sums(chunk, mergeable=True)
            index = {}
            for key in chunk.keys:
                owner = self._owner(chunk, key)
                if owner not in index:
                    index[owner] = len(sums)
                    readers.append(tuple(self.readers[owner]))
                    sums.append(made.get(owner, MomentSum(self.full)))
                weights[key] = index[owner]
        return StoredMoments(self.full, weights, readers, sums)

    def _owner(self, chunk: _Chunk, key: WeightKey) -> WeightKey:
        """The weight whose matrix `key` shares: the first in the chunk alike (calibration.moments._shared)."""
        return next(k for k in chunk.keys if self._shared(k) == self._shared(key))

    def _sums(self, chunk: _Chunk, mergeable: bool = False) -> dict[WeightKey, MomentSum | RunningMomentSum]:
        """One pass over the data: each distinct matrix of the chunk summed, by its first weight — order-free
        (MomentSum: a summary's, merged bit for bit), or in place for a Conv's, which no summary stores."""
        self.passes += 1
        owners = {self._shared(key): key for key in reversed(chunk.keys)}  # each matrix made for its first weight
        sums: dict[WeightKey, MomentSum] = {}
        batches = 0
        for arrays in values_per_batch(self.model, list(chunk.activations), self.batches()):
            batches += 1
            for key in owners.values():
                # Rows of K (the weight's width): a body's value comes out flattened (calibration.bodies), and one
                # a run did not make (a branch not taken) comes out empty: no rows.
                parts = [p for p in (np.asarray(arrays[a], np.float32) for a in self.readers[key]) if p.size]
                if not parts:
                    continue
                squares, count = self._squares(key, parts)
                if not np.all(np.isfinite(squares)):
                    raise CalibrationDataError(f"the model computes NaN or inf for an input of weight {key[0]!r} on a "
                                               "calibration batch — check those inputs")
                kind = RunningMomentSum if key in self._convs and not mergeable else MomentSum
                sums.setdefault(key, kind(self.full)).observe(squares, count)
        if not batches:
            raise CalibrationDataError("calibration data holds no samples — pass at least one sample per input")
        return sums

    def _squares(self, key: WeightKey, parts: list[np.ndarray]) -> tuple[np.ndarray, int]:
        """XᵀX (or its diagonal) of one batch's rows, and how many rows. A Conv's im2col rows are made one sample
        at a time (a page's rows × K would not fit); [G, K, K] for a grouped Conv, [K, K] otherwise."""
        geometry = self._convs.get(key)
        if geometry is None:
            # Rows of K (the weight's width): a body's value comes out flattened (calibration.bodies).
            flat = np.concatenate([p.reshape(-1, self._widths[key]) for p in parts])
            squares = (gram(flat) if self.full  # float32 rows: _MATRIX_DTYPE
                       else np.einsum("ij,ij->j", flat, flat, dtype=np.float64))
            return squares, flat.shape[0]
        total, count = 0.0, 0
        for part in parts:
            for sample in part.reshape(-1, *part.shape[-(len(geometry.kernel) + 1):]):
                rows = im2col_groups(sample[None], geometry)  # [rows, G, K]
                if self.full:  # one BLAS product per group (einsum would not use BLAS here: 7x slower)
                    rows = _spread_subset(rows, seed=count)
                    by_group = rows.transpose(1, 0, 2).astype(_MATRIX_DTYPE, copy=False)
                    total = total + np.matmul(by_group.transpose(0, 2, 1), by_group)  # BLAS's threads: not merged
                else:
                    total = total + np.einsum("rgk,rgk->gk", rows, rows, dtype=np.float64)
                count += rows.shape[0]
        return (total[0] if geometry.group == 1 else total), count


def _no_data() -> Iterable[Batch]:
    raise AssertionError("second moments from a calibration summary read no data")


def _spread_subset(rows: np.ndarray, seed: int) -> np.ndarray:
    """rows [R, G, K], or as many of them as their products' budget allows, in order (seeded: runs agree)."""
    count, groups, k = rows.shape
    keep = max(_SAMPLE_PRODUCT_MACS // (groups * k * k), _MIN_SAMPLE_ROWS)
    if count <= keep:
        return rows
    return rows[np.sort(np.random.default_rng(seed).choice(count, keep, replace=False))]
