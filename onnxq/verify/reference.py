"""The float model's outputs on the verification inputs: computed once per run and shared by every check of it
(the first verification, every probe of recipe auto and the fallback).

Outputs are kept in memory up to a budget and spilled to a temporary folder beyond it (a language model's logits:
48 windows × 128 tokens × 49,152 classes are 1.2 GB), so that no search recomputes the float model per probe. A
search probes on the first batches (`head`) and confirms on all of them.
"""

from __future__ import annotations

import copy
import logging
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx_ir as ir

from onnxq.data.batching import Batches, pieces, samples_in, take
from onnxq.data.specs import Batch
from onnxq.config import VerifyConfig
from onnxq.errors import CalibrationDataError, one_line
from onnxq.io import model_size_bytes, page_out
from onnxq.verify.tasks.types import OutputTask, TASK_BARS
from onnxq.verify.stability import float_stability
from onnxq.verify.tasks.rules import choose_tasks, output_facts
from onnxq.io.model_sessions import ModelSource, make_session

__all__ = ["Reference", "OutputStore", "store_budget"]

logger = logging.getLogger(__name__)

# A verification batch's float outputs, at most (Reference._fitted): a larger batch is cut. Each comparison holds
# float64 copies of a batch's outputs and ORT's arenas keep a run's buffers: SmolLM2's verification peaked at
# 1.77 GB with 2 windows (62 MB of outputs) a batch, about 1.2 GB with 1 (the speed timing keeps 64 MB of them:
# steps.check_speed).
OUTPUT_BUDGET = 32 << 20
# Float outputs kept in memory up to this size; the rest go to a temporary folder. A model's own share is
# 1/MEMORY_SHARE of its float weights (at least MIN_MEMORY_BYTES): a language model's logits outweigh its weights
# (SmolLM2-135M: 1.2 GB of logits for 653 MB of weights), and kept whole they were a third of the run's peak. The
# verification holds two such stores at once (the float outputs, this CPU's deployed ones): with an eighth each
# (67 MB for SmolLM2) Optimum's export peaked at 875 MiB in its exact pass, 723 with 16 MB each (1.34x the file);
# a window's logits (25 MB) go to disk either way, and are read back memory-mapped.
MEMORY_BYTES = 1 << 30
MEMORY_SHARE = 32
MIN_MEMORY_BYTES = 16 << 20


class OutputStore:
    """Outputs batch by batch, in order: in memory up to `memory_bytes`, then as .npy files in a temporary folder
    (read back memory-mapped). A write that fails (a full disk) stops the storing: later batches are recomputed."""

    def __init__(self, memory_bytes: int, recomputable: bool = True) -> None:
        """recomputable False: outputs that cannot be recomputed (search.sensitivity's) — a write that fails keeps
        them in memory instead."""
        self.memory_bytes = memory_bytes
        self.recomputable = recomputable
        self._batches: list[tuple[bool, list]] = []  # (on disk, the arrays or their files), in order
        self._bytes = 0
        self._folder: tempfile.TemporaryDirectory | None = None
        self.stopped = False

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def spilled(self) -> int:
        """Batches kept on disk."""
        return sum(on_disk for on_disk, _ in self._batches)

    def __getitem__(self, index: int) -> list[np.ndarray]:
        on_disk, items = self._batches[index]
        return [np.load(path, mmap_mode="r") for path in items] if on_disk else items

    def append(self, outputs: list[np.ndarray]) -> None:
        if self.stopped:
            return
        size = sum(o.nbytes for o in outputs)
        if not self.spilled and self._bytes + size <= self.memory_bytes:
            self._batches.append((False, outputs))
            self._bytes += size
            return
        try:
            self._batches.append((True, self._write(outputs)))
        except OSError as e:
            if not self.recomputable:
                logger.warning("outputs kept in memory: the disk refused them (%s)", e)
                self._batches.append((False, outputs))
                return
            logger.warning("float reference outputs not kept on disk (%s): recomputed for each check", e)
            self.stopped = True

    def _write(self, outputs: list[np.ndarray]) -> list[Path]:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="onnxq-reference-")
        paths = []
        for j, output in enumerate(outputs):
            path = Path(self._folder.name) / f"{len(self)}_{j}.npy"
            np.save(path, np.ascontiguousarray(output))
            paths.append(path)
        return paths

    def close(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None
        self._batches = [entry for entry in self._batches if not entry[0]]


def store_budget(model: ir.Model | None) -> int:
    """Bytes of float outputs kept in memory for a model: 1/MEMORY_SHARE of its float weights, within
    [MIN_MEMORY_BYTES, MEMORY_BYTES]; MEMORY_BYTES when the model is not loaded here."""
    if model is None:
        return MEMORY_BYTES
    return int(min(MEMORY_BYTES, max(MIN_MEMORY_BYTES, model_size_bytes(model) // MEMORY_SHARE)))


class Reference:
    """The float model's outputs on the verification batches (CPU, no graph optimizations), computed once."""

    def __init__(self, float_model: ModelSource, batches: Batches | Sequence[Batch],
                 memory_bytes: int | None = None, graph: ir.Model | None = None, synthetic: bool = False) -> None:
        """graph: the float model loaded, when float_model is a path (what its outputs are: verify.tasks.rules).
        synthetic: the inputs are made up (no data given): no task metric is chosen on them.
        memory_bytes: outputs kept in memory (the rest spill to disk); None: store_budget of the model."""
        self.float_model = float_model
        self.synthetic = synthetic
        self.graph = float_model if isinstance(float_model, ir.Model) else graph
        self._session: object | None = make_session(float_model, optimize=False)
        self.names = [o.name for o in self.session.get_outputs()]
        self.batches = self._fitted(batches if isinstance(batches, Batches) else Batches.held(batches))
        self.store = OutputStore(store_budget(self.graph) if memory_bytes is None else memory_bytes)
        self.limit: int | None = None  # a head: only the first `limit` batches
        self._samples: int | None = None
        self._all_kept = False  # every batch's outputs in the store (prefetch)
        self._stability: dict[tuple, dict[str, float]] = {}  # shared with heads (copy.copy): keyed by limit

    @property
    def session(self):
        """The float model's session (no graph optimizations), made again if released."""
        if self._session is None:
            self._session = make_session(self.float_model, optimize=False)
        return self._session

    @session.setter
    def session(self, session) -> None:
        self._session = session

    def release_session(self) -> None:
        """Drop the session while every output is kept (prefetch): a large model's float session — its graph,
        a segmented session's parts — is not held beside the quantized sessions that follow (Optimum's
        SmolLM2 export: 7,400 nodes). A later run that needs it makes it again."""
        if self._all_kept and not self.store.stopped:
            self._session = None

    def _fitted(self, batches: Batches) -> Batches:
        """The batches cut so that each one's float outputs hold at most OUTPUT_BUDGET bytes: every comparison holds
        a few float64 copies of a batch's outputs (reference, each provider, the exact quantization), and a
        language model's logits are 25 MB a window of 128 tokens (SmolLM2: verification peaked at 8.0 GB with 8
        windows a batch, 4.1 GB with 2). Not for a model whose inputs fix the batch size."""
        first = batches.first()
        if first is None or any(isinstance(i.shape[0], int) and i.shape[0] > 1 for i in self.session.get_inputs()
                                if i.shape):
            return batches
        one = self.session.run(self.names, take(first, slice(0, 1)))
        size = max(1, OUTPUT_BUDGET // max(sum(np.asarray(o).nbytes for o in one), 1))
        if size >= samples_in(first):
            return batches
        logger.info("verification batches of %d sample(s): the outputs of one take %d bytes", size,
                    sum(np.asarray(o).nbytes for o in one))
        return Batches(lambda: (piece for b in batches for piece in pieces(b, size)))

    def __iter__(self) -> Iterator[tuple[Batch, list[np.ndarray]]]:
        samples = 0
        for i, batch in enumerate(self.batches):
            if self.limit is not None and i >= self.limit:
                break
            samples += samples_in(batch)
            if i < len(self.store):
                yield batch, self.store[i]
                continue
            outputs = self.session.run(self.names, batch)
            if self.synthetic:
                self._check_finite(outputs)
            if i == len(self.store):
                self.store.append(outputs)
            yield batch, outputs
        self._samples = samples

    def _check_finite(self, outputs: Sequence[np.ndarray]) -> None:
        """Made-up inputs (no data given) outside the model's domain — a Log's or a Sqrt's of N(0, 1) values — make
        the float model's own outputs NaN: the inputs are at fault, and nothing could be verified on them."""
        for name, output in zip(self.names, outputs):
            output = np.asarray(output)
            if output.dtype.kind == "f" and not np.all(np.isfinite(output)):
                raise CalibrationDataError(
                    f"the float model computes NaN or inf for {one_line(repr(name))} on the random inputs onnxq made "
                    "for want of data — pass real inputs: --verify-data DATA (or --calib DATA)")

    @property
    def samples(self) -> int:
        """Samples in the batches (counted by the last full pass; a pass without running the model if none)."""
        if self._samples is None:
            self._samples = sum(samples_in(b) for i, b in enumerate(self.batches)
                                if self.limit is None or i < self.limit)
        return self._samples

    @property
    def whole(self) -> bool:
        return self.limit is None

    def head(self, samples: int) -> Reference:
        """The same reference over its first batches holding at least `samples` samples (it shares the outputs
        computed); the whole when that takes every batch."""
        counts = [samples_in(b) for b in self.batches]
        taken = np.cumsum(counts)
        count = int(np.searchsorted(taken, samples)) + 1  # batches up to the one that reaches `samples`
        if count >= len(counts):
            return self
        view = copy.copy(self)
        view.limit, view._samples = count, int(taken[count - 1])
        return view

    def tasks(self, config: VerifyConfig) -> dict[str, OutputTask]:
        """Each output's task metric (verify.tasks.rules), from the graph and the first batch's outputs."""
        for batch, outputs in self:
            return choose_tasks(config, output_facts(self.graph, self.names, outputs, samples_in(batch)),
                                self.synthetic)
        return {}

    def stability(self, tasks: Mapping[str, OutputTask]) -> dict[str, float]:
        """The float model's own task agreement under input rounding (verify.stability), once per set of tasks."""
        key = (self.limit, tuple(sorted((n, t) for n, t in tasks.items() if t.kind in TASK_BARS)))
        if key not in self._stability:
            self._stability[key] = float_stability(self, tasks)
        return self._stability[key]

    def prefetch(self) -> None:
        """Compute the outputs now; when they are all kept, page the float weights out, so that the quantized
        sessions that follow are not resident beside them (they come back from the file if needed again)."""
        for _ in self:
            if self.store.stopped:
                return
        self._all_kept = self.whole
        if isinstance(self.float_model, ir.Model) and self.whole:
            page_out(self.float_model)
