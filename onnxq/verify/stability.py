"""How far the float model keeps its own answers when its inputs move by one least-significant step of the data:
where the float model does not hold its decisions that finely, no quantized model can be held to them.

The step of an input is its data's own resolution: the smallest gap between its distinct values (1/255 for an image
read from 8 bits, 1/32768 for 16-bit audio; for continuous data a gap of float32's rounding, which moves nothing).
Each float input is moved by uniform noise of up to one step either way (one least-significant step of input noise:
the data could as well have been recorded one level up or down) and the float model's task answer is compared
with its own: each output's task agreement is held to its bar, or, where the float model is less stable than
that, to the agreement it keeps with itself. Integer inputs (ids, masks) and inputs fed whole with every batch are
left alone, and so is data on fewer than COARSE_LEVELS levels over its range (counts, categories, scikit-learn's
17-level digits): one level there is another input, not a rounding of the same one — the float MLP of those digits
keeps 0.41 of its answers under it, which would make 0.41 the gate's bar. Seeded: the same data gives the same figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from onnxq.data.batching import samples_in
from onnxq.data.specs import Batch, LaidOutBatch
from onnxq.verify.tasks.detection_sets import aligned_pairs, sets_of
from onnxq.verify.metrics import Operand, SampleAxes
from onnxq.verify.tasks.types import OutputTask, TASK_BARS
from onnxq.verify.tasks.rules import accumulator

__all__ = ["input_steps", "noisy_batch", "float_stability"]

_SEED = 20261124
_VALUES = 1 << 20  # distinct values read per input: enough to find its resolution
COARSE_LEVELS = 32  # fewer levels than this over the data's range: not a measurement's rounding (5 bits)


def input_steps(batches: Iterable[Batch]) -> dict[str, float]:
    """Each float input's resolution: the smallest gap between its distinct finite values over the batches (0 for
    an input with one value, or with fewer than COARSE_LEVELS such gaps over its range)."""
    values: dict[str, list[np.ndarray]] = {}
    for batch in batches:
        axes = getattr(batch, "axes", {})
        for name, array in batch.items():
            array = np.asarray(array)
            if array.dtype.kind != "f" or not array.size or (name in axes and axes[name] is None):
                continue
            seen = values.setdefault(name, [])
            if sum(v.size for v in seen) < _VALUES:
                flat = array.reshape(-1)
                seen.append(np.unique(flat[np.isfinite(flat)][:_VALUES]))
    steps = {}
    for name, parts in values.items():
        distinct = np.unique(np.concatenate(parts)).astype(np.float64)
        step = float(np.diff(distinct).min()) if distinct.size > 1 else 0.0
        steps[name] = step if step and (distinct[-1] - distinct[0]) / step >= COARSE_LEVELS else 0.0
    return steps


def noisy_batch(batch: Batch, steps: Mapping[str, float], rng: np.random.Generator) -> Batch:
    """The batch with each stepped input moved by uniform noise of up to one step either way (its type and layout
    kept)."""
    noisy = {}
    for name, array in batch.items():
        step = steps.get(name, 0.0)
        if step > 0:
            array = np.asarray(array)
            array = (array + rng.uniform(-step, step, array.shape)).astype(array.dtype)
        noisy[name] = array
    return LaidOutBatch(noisy, batch.axes) if isinstance(batch, LaidOutBatch) else noisy


def float_stability(reference, tasks: Mapping[str, OutputTask]) -> dict[str, float]:
    """Per output with a task metric, the share of the float model's task answer it keeps on its own inputs
    rounded to their int8 step (reference: verify.reference.Reference, whose session and outputs are reused)."""
    measured = {n: t for n, t in tasks.items() if t.kind in TASK_BARS}  # the kinds whose bar it can lower
    if not measured:
        return {}
    steps = input_steps(b for b, _ in reference)
    if not any(steps.values()):
        return {}  # no input with a rounding step: nothing to move, the bars stay
    rng = np.random.default_rng(_SEED)
    names = reference.names
    accumulators = {n: accumulator(measured[n]) for n in measured}
    axes = SampleAxes()
    for batch, outputs in reference:
        noisy = reference.session.run(names, noisy_batch(batch, steps, rng))
        samples = samples_in(batch)
        expected = [Operand(e, axes.of(n, e, samples)) for n, e in zip(names, outputs)]
        for name, e, got in aligned_pairs(names, expected, noisy, sets_of(tasks)):
            if name in accumulators:
                accumulators[name].add(e, got)
    return {n: a.result().task_agreement for n, a in accumulators.items()}
