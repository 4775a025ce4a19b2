"""Float-vs-quantized error metrics, accumulated batch by batch."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from onnxq.config.checks import TOPK_MAX
from onnxq.errors import UnsupportedModelError
from onnxq.verify.tasks.measures import measure_task, next_token_nll
from onnxq.verify.tasks.types import OutputTask

__all__ = ["OutputMetrics", "MetricsAccumulator", "Operand", "SampleAxes", "finite_or_none", "operand", "sample_axis"]


def finite_or_none(x: float) -> float | None:
    """JSON has no NaN or infinity: such a figure is written as null."""
    return float(x) if math.isfinite(x) else None


@dataclasses.dataclass(frozen=True)
class OutputMetrics:
    samples: int
    max_abs_error: float
    mean_abs_error: float
    cosine_mean: float  # mean over samples of the per-sample cosine similarity
    cosine_min: float
    sqnr_db: float  # 10·log10(Σ ref² / Σ (ref − quant)²); inf when identical
    # NaN / ±inf values in the quantized outputs and in the float reference: any makes the figures above meaningless.
    nonfinite: int = 0
    reference_nonfinite: int = 0
    # Task level: the share of decisions (argmax over the last axis: a class, a token, a CTC frame) the quantized
    # output makes as the float one does; 1.0 when the output holds no decision (a scalar).
    argmax_agreement: float = 1.0
    decisions: int = 0
    # Entry k - 1: the share of decisions whose float answer (argmax) is among the quantized output's k highest
    # classes (ties in its favour), k = 1 … TOPK_MAX: a top-5 classifier or a beam search needs no more.
    topk_agreement: tuple[float, ...] = (1.0,) * TOPK_MAX
    # The output's task metric (verify.tasks.rules: chosen by what the output is), None for a numeric output: the
    # share of the float model's task answer kept (IoU for a mask) over `task_units` decisions (pixels of the union).
    task: str | None = None
    task_agreement: float = 1.0
    task_units: int = 0
    # A language model's next-token logits (task next-token) on data that holds its tokens: the perplexity of the
    # float and the quantized model over `scored_tokens` next tokens; None otherwise.
    perplexity_reference: float | None = None
    perplexity: float | None = None
    scored_tokens: int = 0

    @property
    def perplexity_ratio(self) -> float | None:
        """Quantized perplexity / float perplexity on the same tokens (None: not measured)."""
        if self.perplexity is None or self.perplexity_reference is None:
            return None
        return self.perplexity / self.perplexity_reference

    def top(self, k: int) -> float:
        """The top-k agreement (1 ≤ k ≤ TOPK_MAX)."""
        return self.topk_agreement[k - 1]

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-ready: inf (identical outputs' SQNR) and NaN as null."""
        figures = {**dataclasses.asdict(self), "perplexity_ratio": self.perplexity_ratio}
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in figures.items()}

    @property
    def finite(self) -> bool:
        return not self.nonfinite and not self.reference_nonfinite and not any(
            math.isnan(v) for v in (self.max_abs_error, self.mean_abs_error, self.cosine_mean, self.sqnr_db))


class Operand:
    """An output with what a comparison reads of it alone, each computed once: a verification compares the float
    reference with several models' outputs (each provider, the exact quantization) and a deployed output with the
    reference and the exact one. A logits batch of a language model is 50 M values: each pass counts. float32 values
    stay float32 (their sums are float64, a chunk at a time: _row_dots); float16 values are made float32, exactly
    (as float64, a float16 decoder's batch of logits was 403 MB a copy, two at once: SmolLM2's float16 export, 8
    windows); any other type is made float64 (an int64 is not exact in float32)."""

    def __init__(self, array: np.ndarray, sample_axis: int = 0) -> None:
        values = np.asarray(array)
        if values.dtype == np.float16:
            values = values.astype(np.float32)  # exact
        self.values = values if values.dtype == np.float32 else values.astype(np.float64)
        self.sample_axis = sample_axis
        # For a language model's logits: the batch's tokens [samples, sequence] and attention mask (or None), so
        # that the next token each position predicts can be scored (set by the verification, which has the batch).
        self.tokens: tuple[np.ndarray, np.ndarray | None] | None = None
        self._nll: tuple[float, int] | None = None
        self._nonfinite: int | None = None
        self._norms: np.ndarray | None = None
        self._energy: float | None = None
        self._argmax: np.ndarray | None = None

    @property
    def rows(self) -> np.ndarray:
        """One row per sample: a scalar or 1-D output is one sample; otherwise sample_axis holds them."""
        v = self.values
        if v.ndim <= 1:
            return v.reshape(1, -1)
        samples = v.shape[self.sample_axis]
        if not v.size:  # an empty output (a cache of no past tokens): rows of nothing, which agree
            return np.zeros((samples, 0), v.dtype)
        return np.moveaxis(v, self.sample_axis, 0).reshape(samples, -1)

    @property
    def nonfinite(self) -> int:
        if self._nonfinite is None:
            self._nonfinite = int(np.count_nonzero(~np.isfinite(self.values)))
        return self._nonfinite

    @property
    def norms(self) -> np.ndarray:
        if self._norms is None:
            rows = self.rows
            self._norms = np.sqrt(_row_dots(rows, rows))  # no squared copy of a batch of logits
        return self._norms

    @property
    def argmax(self) -> np.ndarray:
        """The decision of each row: argmax over the last axis (one decision for a vector, none for a scalar)."""
        if self._argmax is None:
            v = self.values
            self._argmax = np.argmax(v, axis=-1).reshape(-1) if v.ndim >= 1 and v.size else np.zeros(0, np.int64)
        return self._argmax

    def next_token_nll(self, logits: np.ndarray | None = None) -> tuple[float, int]:
        """(Σ −log p, count) of this batch's next tokens under these logits (or the given ones: another model's on
        the same batch); this operand's own are computed once, for every comparison it is the reference of."""
        if logits is not None:
            return next_token_nll(logits, *self.tokens)
        if self._nll is None:
            self._nll = next_token_nll(self.values, *self.tokens)
        return self._nll

    @property
    def energy(self) -> float:
        """Σ x²."""
        if self._energy is None:
            self._energy = _sum_of_squares(self.values)
        return self._energy


def _rows_padded(ref: Operand, got: Operand, open_lengths: bool = False) -> tuple[Operand, Operand]:
    """Two outputs whose lengths the data chooses and that differ — rows on the first axis (a NonZero's, a TopK's of
    a computed k, an NMS's outside a detection set: verify.tasks.detection_sets), and with open_lengths steps on another
    (a decoder Loop's iterations): the shorter padded with zeros along each such axis, so what one model lacks
    counts as missing. Any other difference of shape is two different models."""
    a, b = ref.values, got.values
    axis = ref.sample_axis
    others_differ = a.ndim == b.ndim and a.shape[1:] != b.shape[1:]
    if a.ndim == 0 or a.ndim != b.ndim or (axis or others_differ) and not open_lengths \
            or axis and a.shape[axis] != b.shape[axis]:
        raise UnsupportedModelError(f"an output has shape {a.shape} in the float model but {b.shape} in the "
                                    "quantized one — pass the float model and its own quantized form")
    shape = tuple(max(m, n) for m, n in zip(a.shape, b.shape))
    padded = [np.pad(x, [(0, n - m) for m, n in zip(x.shape, shape)]) for x in (a, b)]
    return Operand(padded[0], axis), Operand(padded[1], axis)


def operand(array: np.ndarray | Operand, sample_axis: int = 0) -> Operand:
    return array if isinstance(array, Operand) else Operand(array, sample_axis)


def sample_axis(array: np.ndarray, samples: int) -> int:
    """Where an output holds its batch's samples: axis 0 when its length is the sample count, else the first axis
    that has that length (a recurrent state [layers, batch, hidden], a time-major [time, batch, classes]), else 0.
    Decided on a batch's outputs, before any per-sample figure (a model's dims are often unnamed)."""
    shape = np.shape(array)
    if len(shape) <= 1 or shape[0] == samples:
        return 0
    return next((i for i, n in enumerate(shape) if n == samples), 0)


class SampleAxes:
    """Each output's samples axis, decided on the first batch it is seen in (a last, smaller batch can make
    another axis look like the samples')."""

    def __init__(self) -> None:
        self.axes: dict[str, int] = {}

    def of(self, name: str, array: np.ndarray, samples: int) -> int:
        return self.axes.setdefault(name, sample_axis(array, samples))


class MetricsAccumulator:
    """One output's figures over the batches; with a task (verify.tasks.rules), its task agreement too."""

    def __init__(self, task: OutputTask | None = None, open_lengths: bool = False) -> None:
        """open_lengths: the output has axes past the first whose length the data decides (a decoder Loop's steps):
        lengths that differ there are padded, not refused."""
        self.task = task
        self.open_lengths = open_lengths
        self.task_kept = 0
        self.task_total = 0
        self.samples = 0
        self.count = 0
        self.max_abs = 0.0
        self.sum_abs = 0.0
        self.signal = 0.0
        self.noise = 0.0
        self.cosine_sum = 0.0
        self.cosine_min = 1.0
        self.nonfinite = 0
        self.reference_nonfinite = 0
        self.decisions = 0
        self.agreeing = 0
        self.ranks = np.zeros(TOPK_MAX, np.int64)  # decisions whose float answer has quantized rank r < TOPK_MAX
        self.nll = [0.0, 0.0]  # next-token: Σ −log p of the data's next tokens, float and quantized
        self.scored = 0

    def add(self, reference: np.ndarray | Operand, quantized: np.ndarray | Operand) -> None:
        """An array beside an Operand takes its samples axis (axis 0 when both are arrays)."""
        axis = next((x.sample_axis for x in (reference, quantized) if isinstance(x, Operand)), 0)
        with np.errstate(invalid="ignore", over="ignore"):  # NaN / inf are counted, and fail the check
            self._add(operand(reference, axis), operand(quantized, axis))

    def _add(self, ref: Operand, got: Operand) -> None:
        if ref.values.shape != got.values.shape:
            ref, got = _rows_padded(ref, got, self.open_lengths)
        self.nonfinite += got.nonfinite
        self.reference_nonfinite += ref.nonfinite
        largest, absolute, squares = _difference_sums(ref.values, got.values)
        if largest is not None:
            self.max_abs = largest if math.isnan(largest) else max(self.max_abs, largest)
        self.sum_abs += absolute
        self.count += ref.values.size
        self.signal += ref.energy
        self.noise += squares
        cos = _cosine_rows(ref, got)
        self.cosine_sum += float(cos.sum())
        self.cosine_min = min(self.cosine_min, float(cos.min())) if cos.size else self.cosine_min
        self.samples += len(cos)
        kept = ref.argmax == got.argmax
        self.decisions += ref.argmax.size
        self.agreeing += int(np.count_nonzero(kept))
        self.ranks[0] += int(np.count_nonzero(kept))
        if not kept.all():  # only a changed answer has a rank to find: a healthy model costs no pass over its rows
            changed = np.flatnonzero(~kept)
            ranks = _ranks(got.values.reshape(ref.argmax.size, -1)[changed], ref.argmax[changed])
            self.ranks += np.bincount(ranks[ranks < TOPK_MAX], minlength=TOPK_MAX)
        if self.task is not None:
            kept_now, total = measure_task(ref.values, got.values, self.task, ref.sample_axis)
            self.task_kept += kept_now
            self.task_total += total
        if self.task is not None and self.task.kind == "next-token" and ref.tokens is not None \
                and ref.values.ndim == 3 and ref.sample_axis == 0:
            (reference, count), (quantized, _) = ref.next_token_nll(), ref.next_token_nll(got.values)
            self.nll[0] += reference
            self.nll[1] += quantized
            self.scored += count

    def result(self) -> OutputMetrics:
        sqnr = math.inf if self.noise == 0 else 10 * math.log10(max(self.signal, 1e-300) / self.noise)
        return OutputMetrics(
            samples=self.samples,
            max_abs_error=self.max_abs,
            mean_abs_error=self.sum_abs / max(self.count, 1),
            cosine_mean=self.cosine_sum / self.samples if self.samples else 1.0,  # nothing compared differs
            cosine_min=self.cosine_min,
            sqnr_db=sqnr,
            nonfinite=self.nonfinite,
            reference_nonfinite=self.reference_nonfinite,
            argmax_agreement=self.agreeing / self.decisions if self.decisions else 1.0,
            decisions=self.decisions,
            topk_agreement=tuple(float(v) for v in np.cumsum(self.ranks) / self.decisions) if self.decisions
            else (1.0,) * TOPK_MAX,
            task=None if self.task is None else self.task.kind,
            task_agreement=self.task_kept / self.task_total if self.task_total else 1.0,
            task_units=self.task_total,
            # exp of a mean NLL past 700 overflows a float (a broken model's): held at e^700, a ratio still made.
            perplexity_reference=math.exp(min(self.nll[0] / self.scored, 700.0)) if self.scored else None,
            perplexity=math.exp(min(self.nll[1] / self.scored, 700.0)) if self.scored else None,
            scored_tokens=self.scored,
        )


def _ranks(rows: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Per row, how many classes score strictly higher than the given answer's class."""
    chosen = rows[np.arange(len(rows)), answers]
    return np.count_nonzero(rows > chosen[:, None], axis=1)


def _sum_of_squares(values: np.ndarray) -> float:
    """Σ x² in float64, without a squared copy of the array (a batch of a decoder's logits)."""
    flat = values.reshape(1, -1)
    return float(_row_dots(flat, flat)[0])


# Values of a float32 output made float64 at a time: three float64 copies of a decoder's logits (reference, deployed,
# exact; 50 MB each a window of SmolLM2) were a third of its verification's peak.
_CHUNK = 1 << 20


def _chunks(*arrays: np.ndarray):
    """The arrays' columns [rows, columns] in float64, _CHUNK values at a time; whole when all are float64 already
    (the sums then as they always were)."""
    if all(a.dtype == np.float64 for a in arrays):
        yield arrays
        return
    step = max(1, _CHUNK // max(arrays[0].shape[0], 1))
    for start in range(0, arrays[0].shape[1], step):
        yield tuple(a[:, start:start + step].astype(np.float64) for a in arrays)


def _row_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ a·b over each row of [rows, columns], in float64; a row's own squares (b is a) convert each chunk once."""
    total = np.zeros(a.shape[0])
    for chunk in _chunks(a) if b is a else _chunks(a, b):
        total += np.einsum("ij,ij->i", chunk[0], chunk[-1])
    return total


def _difference_sums(ref: np.ndarray, got: np.ndarray) -> tuple[float | None, float, float]:
    """(max |ref − got| (None for no values; NaN propagates), Σ |ref − got|, Σ (ref − got)²) in float64, with one
    temporary of a chunk's size (or of the output's, for float64 outputs)."""
    largest, absolute, squares = [], 0.0, 0.0
    for r, g in _chunks(np.reshape(ref, (1, -1)), np.reshape(got, (1, -1))):
        diff = np.subtract(r, g)
        np.abs(diff, out=diff)
        if diff.size:
            largest.append(diff.max())
        absolute += float(diff.sum())
        squares += float(np.dot(diff[0], diff[0]))
    return (float(np.max(largest)) if largest else None), absolute, squares


def _cosine_rows(a: Operand, b: Operand) -> np.ndarray:
    na, nb = a.norms, b.norms
    dot = _row_dots(a.rows, b.rows)
    both_zero = (na == 0) & (nb == 0)
    # Two all-zero rows agree perfectly; one zero row against a non-zero one does not.
    return np.where(both_zero, 1.0, dot / np.maximum(na * nb, 1e-300))
