"""A detector's raw head, as YOLO exports without their NMS hand it out: one output [samples, 4 + C, anchors] (or
[samples, anchors, 4 + C]) — per anchor a box (centre and size, in pixels) beside C class probabilities (a Sigmoid's,
in [0, 1]) — made by the Concat of the two. Its cosine is the boxes' (hundreds of pixels) and does not see the
class probabilities at all: a copy whose class logits fell by 1 kept cosine 1.0000 while it showed 0.81 of the
detections (tests/verify/test_detection_heads.py). So the head is also decoded as its users decode it, the same way
on both sides — each anchor's best class and score, the anchors at the threshold (0.25: ultralytics' default
confidence), NMS per class at IoU 0.7 (ultralytics' default), at most 300 — and the detections both models show are
counted as a detection set's are (verify.tasks.detection_sets). YOLOv5's objectness column reads as one more class: the
same on both sides.

Packed detections — [samples, K, 6] rows of (x1, y1, x2, y2, score, class), YOLOv10's and YOLO26's end-to-end
output — need no decoding: the rows at the threshold are matched the same way, whatever their order."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxq.verify.tasks.boxes import from_centre_size, matched_rows, nms
from onnxq.verify.tasks.types import OutputFacts, OutputTask

__all__ = ["HEAD_THRESHOLD", "head_task_kind", "kept_head_detections", "decoded", "packed_task_kind",
           "kept_packed_detections"]

HEAD_THRESHOLD = 0.25  # ultralytics' default confidence
_NMS_IOU = 0.7  # ultralytics' default
_MAX_DETECTIONS = 300  # ultralytics' default
_MIN_ANCHORS = 64  # a grid's worth: a [samples, 5 + C, few] output is no head
_PIXELS = 1.5  # box coordinates reach past this (pixels); probabilities stay in [0, 1]


def head_task_kind(f: OutputFacts) -> tuple[int, str] | None:
    """(the axis of the 4 + C channels, why) for an output that is a detector's raw head, else None."""
    if f.rank != 3 or f.values.dtype.kind != "f" or f.producer != "Concat" or not f.values.size:
        return None
    for axis in (1, 2):
        channels, anchors = f.values.shape[axis], f.values.shape[3 - axis]
        if not 5 <= channels < anchors or anchors < _MIN_ANCHORS:
            continue
        boxes, classes = np.split(f.values, [4], axis=axis)
        if np.all(np.isfinite(f.values)) and classes.min() >= 0 and classes.max() <= 1 \
                and np.abs(boxes).max() > _PIXELS:
            return axis, (f"a detector's raw head ({anchors} anchors of a box and {channels - 4} class probabilities, "
                          "the Concat of the two): decoded as its users decode it — best class, the threshold, NMS")
    return None


def decoded(values: np.ndarray, channel_axis: int, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """One sample's detections as its users decode the head: (boxes as corners, labels), best first."""
    per_anchor = np.moveaxis(values, channel_axis, -1).astype(np.float64)  # [anchors, 4 + C]
    classes = per_anchor[:, 4:]
    labels, scores = np.argmax(classes, axis=1), np.max(classes, axis=1)
    shown = scores >= threshold
    boxes = from_centre_size(per_anchor[shown, :4])
    keep = nms(boxes, scores[shown], labels[shown], _NMS_IOU, _MAX_DETECTIONS)
    return boxes[keep], labels[shown][keep]


def kept_head_detections(ref: np.ndarray, got: np.ndarray, task: OutputTask) -> tuple[int, int]:
    """(kept, counted) over the batch's samples (axis 0): the detections both models show — the same box (IoU >=
    0.5) and class — of those either does, each decoded at the task's threshold."""
    axis = task.class_axis - 1  # the channels' axis within a sample
    return _kept(ref, got, lambda sample: decoded(sample, axis, task.threshold))


def _kept(ref: np.ndarray, got: np.ndarray, detections: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> \
        tuple[int, int]:
    """(matched, the union's count) over the samples, each sample's (boxes, labels) as `detections` reads them."""
    kept = counted = 0
    for r, g in zip(ref, got):
        (ref_boxes, ref_labels), (got_boxes, got_labels) = detections(r), detections(g)
        matched = len(matched_rows(ref_boxes, got_boxes, ref_labels, got_labels)[0])
        kept += matched
        counted += len(ref_boxes) + len(got_boxes) - matched
    return kept, counted


def packed_task_kind(f: OutputFacts) -> str | None:
    """Why an output is a detector's packed detections, else None: [samples, K, 6] rows of (x1, y1, x2, y2, score,
    class) — what YOLOv10's and YOLO26's end-to-end heads and ultralytics' exports with nms=True hand out, K fixed
    (300), the rows past the detections zero or of tiny scores."""
    if f.rank != 3 or f.values.dtype.kind != "f" or f.values.shape[-1] != 6 or f.values.shape[1] < 2 \
            or not np.all(np.isfinite(f.values)):
        return None
    scores, classes = f.values[..., 4], f.values[..., 5]
    if scores.min() < 0 or scores.max() > 1 or classes.min() < 0 or not np.all(classes == np.round(classes)):
        return None
    return (f"a detector's packed detections ({f.values.shape[1]} rows of a box's corners, its score and class): "
            "the rows at the threshold matched by box and class")


def kept_packed_detections(ref: np.ndarray, got: np.ndarray, task: OutputTask) -> tuple[int, int]:
    """(kept, counted) over the batch's samples: of the rows either model shows (score >= threshold), those both show
    — the same box (IoU >= 0.5) and class — whatever their order."""
    def shown(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = rows[rows[:, 4] >= task.threshold].astype(np.float64)
        return rows[:, :4], rows[:, 5]

    return _kept(ref, got, shown)
