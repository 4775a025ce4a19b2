"""The types every module of verify.tasks shares: what one output is (OutputFacts), the task metric chosen for it
(OutputTask, with the detection set it belongs to), and the default bars and words of each kind. Held apart so that
the rules, the measures and the detection modules import one another's types, never one another."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

import numpy as np

__all__ = ["OutputFacts", "OutputTask", "DetectionSet", "TASK_BARS", "TASK_FLOOR", "TASK_WORDS", "PERPLEXITY_BAR",
           "GENERIC_NAMES"]

# An exporter's generic output name (tf2onnx's StatefulPartitionedCall:N) says nothing of what the output is.
GENERIC_NAMES = re.compile(r"^(Stateful)?PartitionedCall(_\d+)?(:\d+)?$")

# The share each kind must keep by default. A string of ~10 characters read off ~30 decision-carrying frames
# changes when any one of them moves: at the 99 % per-decision bar of the other kinds, about 3 % of such strings
# would change, so sequences are held to 0.97.
# Detections (verify.tasks.detection_sets): of the detections either model is confident of (score >= 0.5), the share both
# are — the same box (IoU >= 0.5), label and side of the threshold. 0.95, not 0.99: an image holds a handful of
# confident objects, and a score near the threshold crosses it with any change (the float model's own crossings
# under input rounding lower the bar further: verify.stability). A choice, not yet measured on a trained detector.
# A raw head decoded (verify.tasks.detection_heads) at ultralytics' 0.25: 0.90, as its marginal anchors (many near the
# threshold, where NMS picks among near-equal neighbours) cross with any change — also unmeasured on a trained YOLO.
# Packed detections (YOLOv10's end-to-end rows) likewise, at the same threshold.
# An autoregressive decoder's token sequence (a Loop's per-step class scores, read to its end token) is a string
# like CTC's: 0.97.
TASK_BARS = {"top1": 0.99, "sequence": 0.97, "frames": 0.99, "iou": 0.99, "labels": 0.99, "detections": 0.95,
             "head-detections": 0.90, "packed-detections": 0.90, "decoded": 0.97}
# The lowest a bar may fall to where the float model keeps less of its own answer under input noise
# (verify.stability): the lowest default bar (a raw head's). Below it a bar stops meaning "keeps the answers" — a
# detector's float model keeping 0.76 of its detections under noise would make 0.76 the bar, passing a file that
# loses a quarter of them; there the data cannot judge, and the verdict says so (not shown).
TASK_FLOOR = 0.90

TASK_WORDS = {"top1": "top-1 agreement", "sequence": "decoded-sequence agreement", "frames": "frames kept",
              "iou": "mask IoU", "labels": "labels kept", "numeric": "numeric bars only",
              "next-token": "next-token agreement and perplexity ratio",
              "state": "state, judged through the outputs it makes",
              "detections": "detections kept", "detection-part": "a detection set's rows, judged by its detections",
              "head-detections": "detections kept (the head decoded)",
              "packed-detections": "detections kept", "decoded": "decoded-sequence agreement (to the end token)"}
# A language model's next-token logits are gated on the perplexity ratio (quantized / float, on the verification
# data's own next tokens), not on their top-1 agreement: among near-equal candidates a changed next token is no
# wrong answer (SmolLM2-135M: a W8A8 model at 1.02x perplexity changes many). 1.15 passes good models
# (W8A8 1.03x, 4-bit 1.10x, with room for the noise of a few windows) and fails the 1.6x static model.
PERPLEXITY_BAR = 1.15


@dataclasses.dataclass(frozen=True)
class DetectionSet:
    """The outputs whose rows are one set of detections (verify.tasks.detection_sets): `boxes` [K, 4], `labels` [K]
    (integer, or None), and every member (boxes and labels included) with those K rows."""

    boxes: str
    labels: str | None
    members: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"boxes": self.boxes, "labels": self.labels, "members": list(self.members)}


@dataclasses.dataclass(frozen=True)
class OutputTask:
    """One output's task metric: what it measures and why it was chosen."""

    kind: str  # a key of MEASURES
    rule: str  # the rule that chose it, in words (or "set by the tolerance")
    class_axis: int | None = -1  # where the classes are (samples on axis 0); None: binary decisions at threshold
    threshold: float = 0.5  # frames / iou without a class axis: a value above it is "on"
    blank: int | None = None  # sequence: the class dropped after collapsing repeats (CTC's blank), if any
    # next-token: the model input holding the tokens (input_ids) whose next one each position predicts.
    labels: str | None = None
    detections: DetectionSet | None = None  # detections: the set whose rows are matched before any comparison
    # An axis past the first whose length the data decides (a Loop's steps, a size the graph leaves open under a
    # name no input has): where the two models' lengths differ, the shorter is padded, not refused (verify.metrics).
    open_lengths: bool = False

    @property
    def words(self) -> str:
        return TASK_WORDS[self.kind]

    def to_dict(self) -> dict:
        found = {"kind": self.kind, "measure": self.words, "rule": self.rule, "class_axis": self.class_axis,
                 "threshold": self.threshold, "blank": self.blank, "labels": self.labels}
        return found if self.detections is None else {**found, "detections": self.detections.to_dict()}



@dataclasses.dataclass(frozen=True)
class OutputFacts:
    """What one output says it is; `values` is the float model's first batch, samples on axis 0."""

    name: str
    producer: str  # the op type that makes it, seen through _PASS_THROUGH ops ("" for a graph input, a constant)
    softmax_axis: int | None  # the producer's axis when it is a Softmax / LogSoftmax reached through Identity / Cast
    values: np.ndarray
    gathered_rows: frozenset[int]  # row counts of the 2-D tables the model gathers from (token embeddings)
    # Per row count, the integer model inputs that index a table of that many rows (input_ids for the vocabulary).
    token_inputs: Mapping[int, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # Widths that two or more of the graph's weighted products read (their K): a network's hidden widths.
    read_widths: frozenset[int] = frozenset()
    token_fed: bool = False  # computed from token ids: downstream of a table the model's integer input indexes
    # Rows the data chooses: the graph leaves the first axis open under a name no input has (NMS's detections, not
    # the batch), and the first batch's count of them (values holds at most FACT_SAMPLES).
    open_rows: bool = False
    rows: int = 0
    # An axis past the first whose length the data decides: a Loop's or Scan's stacked steps, or a size the graph
    # leaves open under a name no input has (verify.metrics pads such lengths where the two models differ).
    open_lengths: bool = False

    @property
    def said(self) -> str:
        """The name, where it says something of the output (not an exporter's generic name): "" otherwise."""
        return "" if GENERIC_NAMES.match(self.name) else self.name

    @property
    def rank(self) -> int:
        return self.values.ndim

    @property
    def integer(self) -> bool:
        return self.values.dtype.kind in "iub"

    @property
    def unit_range(self) -> bool:
        v = self.values
        return v.dtype.kind == "f" and v.size > 0 and bool(np.all(v >= 0) and np.all(v <= 1))

    @property
    def sums_to_one(self) -> bool:
        """Rows over the last axis are probabilities (or log-probabilities)."""
        v = self.values.astype(np.float64)
        if self.rank < 2 or v.shape[-1] < 2 or v.dtype.kind != "f" or not np.all(np.isfinite(v)):
            return False
        if self.unit_range:
            return bool(np.allclose(v.sum(-1), 1.0, atol=1e-3))
        return bool(np.all(v <= 0) and np.allclose(np.exp(v).sum(-1), 1.0, atol=1e-3))

    @property
    def spatial(self) -> bool:
        """Two or more axes past the samples (and a channel) longer than one: an image-like map."""
        return sum(n > 1 for n in self.values.shape[1:]) >= 2 and self.rank >= 3
