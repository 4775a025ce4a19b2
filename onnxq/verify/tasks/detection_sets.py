"""A detector's detections as a set: outputs whose rows are detections (boxes [K, 4], their scores and labels [K]),
K chosen by the data (NonMaxSuppression, a score threshold: torchvision's detection models, detectors exported with
their NMS). Quantization moves near-equal scores past each other and a marginal box across the threshold: the
quantized model returns the same objects in another order, or one more or one fewer. Compared row by row they
looked wrong (a random-init Faster R-CNN's same boxes in another order: cosine 0.87), and a different K raised
"pass the float model and its own quantized form".

So the rows of a set are matched before any comparison: each float detection, in the float model's order, with the
quantized detection of the same label whose box overlaps it most (IoU >= 0.5); the rows of every output of the set
are then laid out alike — matched pairs, the float detections unmatched beside a row of zeros, then the quantized
ones unmatched beside zeros — so every figure compares the same detection, and a missing one counts as missing.
The set's scores output is gated on the detections kept (verify.tasks.measures "detections"); its other outputs
are judged through it (reported)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from onnxq.verify.tasks.boxes import matched_rows
from onnxq.verify.metrics import Operand
from onnxq.verify.tasks.types import DetectionSet, OutputFacts, OutputTask

__all__ = ["DetectionSet", "aligned_outputs", "aligned_pairs", "sets_of", "with_detection_sets"]

def aligned_outputs(names: Sequence[str], expected: Sequence[np.ndarray | Operand],
                    got: Sequence[np.ndarray | Operand], sets: Sequence[DetectionSet]) -> tuple[list, list]:
    """The two models' outputs with each detection set's rows laid out alike (module doc); the other outputs as
    they are."""
    expected, got = list(expected), list(got)
    index = {name: i for i, name in enumerate(names)}
    for found in sets:
        if not all(m in index for m in found.members):
            continue
        arrays = {m: (_values(expected[index[m]]), _values(got[index[m]])) for m in found.members}
        labels = arrays.get(found.labels) if found.labels else None
        ref_rows, got_rows = matched_rows(*arrays[found.boxes], *(labels or (None, None)))
        for member, (ref, out) in arrays.items():
            laid = _laid_out(ref, out, ref_rows, got_rows)
            expected[index[member]] = _operand(laid[0], expected[index[member]])
            got[index[member]] = _operand(laid[1], got[index[member]])
    return expected, got


def aligned_pairs(names: Sequence[str], expected: Sequence, got: Sequence,
                  sets: Sequence[DetectionSet]) -> list[tuple[str, np.ndarray | Operand, np.ndarray | Operand]]:
    """(name, expected, got) of every output, detection sets' rows matched (aligned_outputs)."""
    if sets:
        expected, got = aligned_outputs(names, expected, got, sets)
    return list(zip(names, expected, got))


def _laid_out(ref: np.ndarray, got: np.ndarray, ref_rows: np.ndarray,
              got_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lone_ref = np.setdiff1d(np.arange(len(ref)), ref_rows)
    lone_got = np.setdiff1d(np.arange(len(got)), got_rows)
    width = ref.shape[1:] if len(ref) or not len(got) else got.shape[1:]
    dtype = np.result_type(ref.dtype, got.dtype)
    zeros = lambda n: np.zeros((n, *width), dtype)  # noqa: E731
    ref_out = np.concatenate([ref[ref_rows], ref[lone_ref], zeros(len(lone_got))]).astype(dtype, copy=False)
    got_out = np.concatenate([got[got_rows], zeros(len(lone_ref)), got[lone_got]]).astype(dtype, copy=False)
    return ref_out, got_out


def _values(x: np.ndarray | Operand) -> np.ndarray:
    return x.values if isinstance(x, Operand) else np.asarray(x)


def _operand(values: np.ndarray, like: np.ndarray | Operand) -> Operand:
    return Operand(values, like.sample_axis if isinstance(like, Operand) else 0)


def sets_of(tasks: Mapping[str, OutputTask | None]) -> list[DetectionSet]:
    """The detection sets the tasks name (each once)."""
    return list(dict.fromkeys(t.detections for t in tasks.values() if t is not None and t.detections is not None))


def with_detection_sets(chosen: dict[str, OutputTask], facts: Sequence[OutputFacts], free: set[str],
                        gated: bool) -> dict[str, OutputTask]:
    """The tasks with each detection set's: boxes [K, 4] (float) whose K the data chooses, and the outputs of the
    same K rows the data chooses — of those left to the rules (`free`). The set's scores (a float [K]; else its
    boxes) get "detections" when `gated` (the rules judge the task: real data, no task metric of the user's); the
    rest, and all of them otherwise, "detection-part": their rows are still matched before any comparison."""
    for boxes in facts:
        if not (boxes.open_rows and boxes.name in free and boxes.rank == 2 and boxes.values.shape[-1] == 4
                and boxes.values.dtype.kind == "f") or chosen[boxes.name].detections is not None:
            continue
        members = [f for f in facts if f.open_rows and f.name in free and f.rows == boxes.rows and f.rank >= 1
                   and chosen[f.name].detections is None]
        labels = next((f.name for f in members if f.integer and f.rank == 1), None)
        scores = next((f.name for f in members if f.values.dtype.kind == "f" and f.rank == 1), boxes.name)
        found = DetectionSet(boxes.name, labels, tuple(f.name for f in members))
        for f in members:
            kind = "detections" if gated and f.name == scores else "detection-part"
            why = (f"a detector's detections ({len(members)} outputs of rows the data chooses, boxes {boxes.name}"
                   f"{f', labels {labels}' if labels else ''}): rows matched by box and label before comparing")
            chosen[f.name] = OutputTask(kind, why, None, 0.5, detections=found)
    return chosen
