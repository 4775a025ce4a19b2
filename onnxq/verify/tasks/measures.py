"""How much of the float model's answer a quantized output keeps, per kind of output (verify.tasks.rules picks the
kind from what the output is): class scores keep their top-1 class, per-step class scores their decoded sequence,
binary maps their frames, masks their area (IoU). Each measure takes one batch's two outputs (samples on axis 0)
and returns (kept, total), summed over batches: the agreement is kept / total.

A registry, kind → measure: a new kind of output is one function and one entry."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxq.verify.tasks.detection_heads import kept_head_detections, kept_packed_detections
from onnxq.verify.tasks.types import OutputTask

__all__ = ["MEASURES", "measure_task", "next_token_nll"]

def _decisions(values: np.ndarray, task: OutputTask) -> np.ndarray:
    """The decision at every position: the class (argmax over the class axis), or on/off at the threshold."""
    if task.class_axis is None or values.ndim < 2:
        return values > task.threshold
    return np.argmax(values, axis=task.class_axis)


def _kept_decisions(ref: np.ndarray, got: np.ndarray, task: OutputTask) -> tuple[int, int]:
    a, b = _decisions(ref, task), _decisions(got, task)
    return int(np.count_nonzero(a == b)), int(a.size)


def _decoded(steps: np.ndarray, blank: int | None) -> list[tuple[int, ...]]:
    """Each sample's per-step classes [samples, steps] as CTC's greedy decoding reads them: repeats collapsed, the
    blank dropped."""
    changed = np.ones(steps.shape, bool)
    changed[:, 1:] = steps[:, 1:] != steps[:, :-1]
    keep = changed if blank is None else changed & (steps != blank)
    return [tuple(row[k].tolist()) for row, k in zip(steps, keep)]


def _kept_sequences(ref: np.ndarray, got: np.ndarray, task: OutputTask) -> tuple[int, int]:
    samples = ref.shape[0] if ref.ndim else 1
    a = _decisions(ref, task).reshape(samples, -1)
    b = _decisions(got, task).reshape(samples, -1)
    kept = sum(x == y for x, y in zip(_decoded(a, task.blank), _decoded(b, task.blank)))
    return int(kept), samples


def _kept_decoded(ref: np.ndarray, got: np.ndarray, task: OutputTask) -> tuple[int, int]:
    """An autoregressive decoder's per-step class scores [samples, steps, classes] (a Loop's scan output): each
    sample's tokens (argmax per step) up to its first end token, kept where both models read the same. The end token
    is the class every sample holds at the float model's last step (the loop stops once every sample has ended);
    without one, the whole sequences are compared. Steps one model ran past the other's are zeros
    (verify.metrics pads them), never read past the end."""
    samples = ref.shape[0] if ref.ndim else 1
    a = np.argmax(ref, axis=-1).reshape(samples, -1)
    b = np.argmax(got, axis=-1).reshape(samples, -1)
    ran = np.flatnonzero(ref.reshape(samples, a.shape[1], -1).any(axis=(0, 2)))
    last = a[:, ran[-1]] if ran.size else a[:, -1]
    end = int(last[0]) if last.size and np.all(last == last[0]) else None
    kept = sum(_to_end(x, end) == _to_end(y, end) for x, y in zip(a, b))
    return int(kept), samples


def _to_end(tokens: np.ndarray, end: int | None) -> tuple[int, ...]:
    found = np.flatnonzero(tokens == end) if end is not None else np.zeros(0, np.int64)
    return tuple(tokens[:found[0] + 1].tolist() if found.size else tokens.tolist())


def _mask_overlap(ref: np.ndarray, got: np.ndarray, task: OutputTask) -> tuple[int, int]:
    """(intersection, union) of the two masks at the threshold, over the batch: IoU over the data set, so a sample
    whose mask is nearly empty weighs by its area, not as much as a full one."""
    a, b = ref > task.threshold, got > task.threshold
    return int(np.count_nonzero(a & b)), int(np.count_nonzero(a | b))


def _kept_labels(ref: np.ndarray, got: np.ndarray, task: OutputTask) -> tuple[int, int]:
    return int(np.count_nonzero(ref == got)), int(ref.size)


def _kept_detections(ref: np.ndarray, got: np.ndarray, task: OutputTask) -> tuple[int, int]:
    """A detection set's scores, rows matched (verify.tasks.detection_sets: a detection one model lacks faces a score of
    0): (kept, counted) of the detections either model is confident of (score >= threshold), kept where both are
    — what an application that shows detections above the threshold sees: the same object, its label, shown by
    both. Without scores (a set of boxes alone) every row counts, kept where both boxes are there."""
    if ref.ndim == 1:
        both = (ref >= task.threshold) & (got >= task.threshold)
        counted = (ref >= task.threshold) | (got >= task.threshold)
    else:
        rows = len(ref)
        both = ref.reshape(rows, -1).any(axis=1) & got.reshape(rows, -1).any(axis=1)
        counted = np.ones(rows, bool)
    return int(np.count_nonzero(both & counted)), int(np.count_nonzero(counted))


MEASURES: dict[str, Callable[[np.ndarray, np.ndarray, OutputTask], tuple[int, int]]] = {
    "top1": _kept_decisions,
    "sequence": _kept_sequences,
    "decoded": _kept_decoded,
    "frames": _kept_decisions,
    "iou": _mask_overlap,
    "labels": _kept_labels,
    "detections": _kept_detections,
    "head-detections": kept_head_detections,  # a raw head [samples, 4 + C, anchors]: decoded, then as detections
    "packed-detections": kept_packed_detections,  # rows [samples, K, 6] of box, score, class
    # Top-1 agreement at every position (reported); the perplexity ratio, which gates, is MetricsAccumulator's.
    "next-token": _kept_decisions,
}


def measure_task(ref: np.ndarray, got: np.ndarray, task: OutputTask, sample_axis: int = 0) -> tuple[int, int]:
    """(kept, total) for one batch's float and quantized outputs, whose samples lie on sample_axis."""
    if ref.ndim > 1 and sample_axis:
        ref, got = np.moveaxis(ref, sample_axis, 0), np.moveaxis(got, sample_axis, 0)
    return MEASURES[task.kind](ref, got, task)


def next_token_nll(logits: np.ndarray, tokens: np.ndarray, mask: np.ndarray | None) -> tuple[float, int]:
    """(Σ −log p(token t+1 | ≤ t), tokens scored) for logits [samples, sequence, vocab] of the sequence's tokens
    [samples, sequence]; positions where the mask (its last `sequence` columns) is 0, at t or t+1, are not scored.
    A few positions at a time: a language model's logits are large, and their float64 log-softmax twice as large
    again (SmolLM2: 50 MB a copy for one window of 128 tokens, three copies at once)."""
    total, count = 0.0, 0
    steps = logits.shape[1]
    for i in range(logits.shape[0]):
        nll = _window_nll(logits[i], tokens[i])
        if mask is not None:
            seen = mask[i, -steps:].astype(bool)
            nll = nll[seen[:-1] & seen[1:]]
        total += float(nll.sum())
        count += int(nll.size)
    return total, count


# Positions whose log-softmax is computed at once. Each row's is its own, so the figures are the same bit for bit.
_NLL_ROWS = 16


def _window_nll(logits: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """−log p of each position's next token in one window: logits [sequence, vocab], tokens [sequence]."""
    rows, following = logits[:-1], tokens[1:len(logits)]
    return np.concatenate([_nll_rows(rows[start:start + _NLL_ROWS], following[start:start + _NLL_ROWS])
                           for start in range(0, len(rows), _NLL_ROWS)] or [np.zeros(0)])


def _nll_rows(logits: np.ndarray, next_tokens: np.ndarray) -> np.ndarray:
    """−log p of each row's next token, for logits [rows, vocab]."""
    scores = logits.astype(np.float64)
    top = scores.max(axis=-1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(scores - top).sum(axis=-1))
    return log_z - scores[np.arange(len(scores)), next_tokens]
