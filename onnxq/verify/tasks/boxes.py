"""Boxes, pure numpy: their overlap, a greedy match of two models' detections, and NMS — what a detection set
(verify.tasks.detection_sets) and a detector's raw head (verify.tasks.detection_heads) are compared by."""

from __future__ import annotations

import numpy as np

__all__ = ["MATCH_IOU", "box_iou", "corners", "from_centre_size", "matched_rows", "nms"]

MATCH_IOU = 0.5  # COCO's and VOC's loosest match: the same object


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of a [K, 4] with every box of b [M, 4], as corners (x1, y1, x2, y2) — or, where a's boxes are
    not corners (a second corner before the first), as centre and size (cx, cy, w, h), DETR's and YOLO's form."""
    a, b = corners(a.astype(np.float64), a), corners(b.astype(np.float64), a)
    low = np.maximum(a[:, None, :2], b[None, :, :2])
    high = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=-1)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=-1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=-1)
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def corners(boxes: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The boxes as corners: as they are where the reference's are corners, else read as centre and size."""
    return boxes if np.all(reference[:, 2:] >= reference[:, :2]) else from_centre_size(boxes)


def from_centre_size(boxes: np.ndarray) -> np.ndarray:
    """Boxes (cx, cy, w, h) as corners (x1, y1, x2, y2)."""
    centre, half = boxes[:, :2], np.abs(boxes[:, 2:]) / 2
    return np.concatenate([centre - half, centre + half], axis=1)


def matched_rows(ref_boxes: np.ndarray, got_boxes: np.ndarray, ref_labels: np.ndarray | None,
                 got_labels: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(float rows, quantized rows) of the matched pairs, greedily in the float model's order (its best first, as
    NMS orders them): each float detection takes the unmatched quantized one of its label that overlaps it most, at
    IoU >= MATCH_IOU."""
    iou = box_iou(ref_boxes, got_boxes) if len(ref_boxes) and len(got_boxes) else np.zeros((len(ref_boxes), 0))
    if ref_labels is not None and got_labels is not None and iou.size:
        iou = np.where(ref_labels.reshape(-1, 1) == got_labels.reshape(1, -1), iou, 0.0)
    taken = np.zeros(iou.shape[1], bool)
    pairs = []
    for i in range(iou.shape[0]):
        row = np.where(taken, -1.0, iou[i])
        j = int(np.argmax(row)) if row.size else -1
        if j >= 0 and row[j] >= MATCH_IOU:
            taken[j] = True
            pairs.append((i, j))
    found = np.array(pairs, np.int64).reshape(-1, 2)
    return found[:, 0], found[:, 1]


def nms(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray, iou_max: float, keep_max: int) -> np.ndarray:
    """The rows NMS keeps, best first: per label, a box overlapping a better one by more than iou_max goes (boxes as
    corners; at most keep_max kept, from the best 3,000 — a head's candidates above its threshold)."""
    order = np.argsort(-scores, kind="stable")[:3000]
    iou = box_iou(boxes[order], boxes[order]) if order.size else np.zeros((0, 0))
    same = labels[order][:, None] == labels[order][None, :]
    suppressed = np.zeros(order.size, bool)
    kept = []
    for i in range(order.size):
        if suppressed[i]:
            continue
        kept.append(i)
        if len(kept) == keep_max:
            break
        suppressed |= (iou[i] > iou_max) & same[i]
    return order[np.array(kept, np.int64)]
