"""Batches as the model can take them, and the samples held back for verification.

A model whose inputs fix their first dimension (a batch of exactly B) takes data only in batches of B: streams are
re-cut to B samples (a remainder that makes no whole batch is left out, with a warning), whatever the calibration
batch size, the holdout's gaps or the shards' sizes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np

from onnxq.data.specs import Batch, InputSpec, laid_out, sample_axis
from onnxq.errors import CalibrationDataError

__all__ = ["samples_in", "take", "pieces", "SampleRuns", "concatenate", "fixed_batch_size", "exact_batches",
           "first_samples", "SampleCounter", "Holdout", "Batches"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def samples_in(batch: Batch) -> int:
    """The number of samples in a batch (along each input's samples axis; 1 when every input is held constant)."""
    for name, array in batch.items():
        axis = sample_axis(batch, name)
        if axis is not None and array.ndim > axis:
            return array.shape[axis]
    return 1


def take(batch: Batch, index: slice | np.ndarray) -> Batch:
    """The samples `index` (a slice or a boolean mask) selects, along each input's samples axis; inputs held
    constant are kept whole."""
    axes = getattr(batch, "axes", {})
    return laid_out({k: _along(v, axes.get(k, 0), index) for k, v in batch.items()}, axes)


def pieces(batch: Batch, size: int, start: int = 0) -> Iterator[Batch]:
    """The batch's samples from `start` on, `size` at a time (a batch cut to bound one run's outputs)."""
    for begin in range(start, samples_in(batch), size):
        yield take(batch, slice(begin, begin + size))


class SampleRuns:
    """Runs over a batch a piece of samples at a time, each run's outputs within `budget` bytes: the piece's size is
    measured once, on the first sample of the first batch (its own run), and kept for every later batch.
    aligned: that first run only measures, and every batch is cut from its start alike — the pieces are then the
    same wherever the batch comes in a stream (a shard's first batch is cut as in the whole run: sums of products
    over pieces merge exactly, calibration.moments)."""

    def __init__(self, budget: int, aligned: bool = False) -> None:
        self.budget, self.aligned = budget, aligned
        self.size: int | None = None  # samples a run takes, once measured

    def __call__(self, batch: Batch, run: Callable[[Batch], T], nbytes: Callable[[T], int]) -> Iterator[T]:
        """run(piece) for the batch's pieces, in order; nbytes(outputs) sizes a run's outputs."""
        start = 0
        if self.size is None:
            first = run(take(batch, slice(0, 1)))
            self.size = max(1, self.budget // max(nbytes(first), 1))
            if not self.aligned:
                yield first
                start = 1
            del first  # not held while the next pieces run
        for piece in pieces(batch, self.size, start):
            yield run(piece)


def _along(array: np.ndarray, axis: int | None, index: slice | np.ndarray) -> np.ndarray:
    if axis is None:
        return array
    return array[index] if axis == 0 else array[(slice(None),) * axis + (index,)]


def concatenate(batches: Sequence[Batch]) -> Batch:
    """One batch of the samples of all (inputs held constant: the first batch's value)."""
    first = batches[0]
    axes = getattr(first, "axes", {})
    return laid_out({k: v if axes.get(k, 0) is None else np.concatenate([b[k] for b in batches], axis=axes.get(k, 0))
                     for k, v in first.items()}, axes)


def fixed_batch_size(specs: list[InputSpec]) -> int | None:
    """The batch size the model's inputs fix (the same fixed dimension along the samples axis wherever one is
    fixed), else None."""
    fixed = {spec.batch_dim for spec in specs if isinstance(spec.batch_dim, int) and spec.batch_dim > 0}
    return fixed.pop() if len(fixed) == 1 else None


def exact_batches(batches: Iterable[Batch], size: int, what: str = "calibration") -> Iterator[Batch]:
    """The same samples, in order, in batches of exactly `size`."""
    pending: list[Batch] = []
    count = 0
    for batch in batches:
        n = samples_in(batch)
        if n == size and not pending:
            yield batch
            continue
        pending.append(batch)
        count += n
        while count >= size:
            merged = _concatenate(pending, size, what)
            yield take(merged, slice(0, size))
            count -= size
            pending = [take(merged, slice(size, None))] if count else []
    if count:
        logger.warning("%d %s sample(s) left out: not a whole batch of %d (the model's fixed batch size)", count,
                       what, size)


def _concatenate(pending: list[Batch], size: int, what: str) -> Batch:
    if len(pending) == 1:
        return pending[0]
    try:
        return concatenate(pending)
    except ValueError:
        raise CalibrationDataError(f"{what} samples of different shapes would have to share a batch of {size} (the "
                                   "model's fixed batch size) — give each shard a whole number of batches") from None


def first_samples(batches: Iterable[Batch], count: int, fixed: int | None) -> list[Batch]:
    """At most `count` samples from the start of the batches (at least one whole batch of a fixed size)."""
    if fixed is not None:
        count = max(fixed, count // fixed * fixed)
    out, taken = [], 0
    for batch in exact_batches(batches, fixed, "verification") if fixed else batches:
        if taken >= count:
            break
        batch = take(batch, slice(0, count - taken))
        out.append(batch)
        taken += samples_in(batch)
    return out


class Batches:
    """Batches that every pass reads again: a list held in memory (held-back samples, synthetic inputs), or a data
    source re-read each time (given verification data: one batch in memory at a time, however large the file)."""

    def __init__(self, read: Callable[[], Iterable[Batch]]) -> None:
        self._read = read
        self._first: Batch | None = None

    @classmethod
    def held(cls, batches: Sequence[Batch]) -> Batches:
        batches = list(batches)
        return cls(lambda: batches)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self._read())

    def first(self) -> Batch | None:
        """The first batch (read once, kept), or None when there is none."""
        if self._first is None:
            self._first = next(iter(self._read()), None)
        return self._first


class SampleCounter:
    """Counts the samples flowing through an iterable of batches."""

    def __init__(self, batches: Iterable[Batch]) -> None:
        self.batches = batches
        self.samples = 0

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.batches:
            self.samples += samples_in(batch)
            yield batch


class Holdout:
    """Splits a stream of batches by sample: every `every`-th sample (up to `max_samples`) is held back for
    verification, the rest pass through for calibration. Memory: at most `max_samples` held samples. With a fixed
    batch size B the unit is a whole batch of B: every `every`-th batch is held back (one batch at least, whatever
    `max_samples`) — holding back single samples would cut both parts into remainders the model cannot take (20
    samples of a batch-20 model left none to calibrate on)."""

    def __init__(self, every: int, max_samples: int, fixed: int | None = None, max_bytes: int | None = None,
                 min_held: int = 0) -> None:
        """max_bytes: past min_held samples, no more once the held inputs reach this many bytes."""
        self.every = every
        self.max_samples = max_samples
        self.fixed = fixed
        self.max_bytes, self.min_held = max_bytes, min_held
        self.held: list[Batch] = []
        self.held_count = 0
        self.held_bytes = 0
        self.seen = 0
        # Too few samples to hold any back: verification falls back to the first calibration batch.
        self.first: Batch | None = None

    def split(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        return self._split(batches) if self.fixed is None else self._split_whole(exact_batches(batches, self.fixed))

    def held_of(self, samples: int) -> int:
        """How many of a stream of `samples` samples the split holds back: its arithmetic, without the data."""
        if self.fixed is None:
            return min(samples // self.every, self.max_samples)
        eligible = samples // self.fixed // self.every
        return self.fixed * min(eligible, max(1, self.max_samples // self.fixed))

    def verification_batches(self) -> list[Batch]:
        """The held samples in batches the model takes."""
        return self.held

    def first_batches(self) -> list[Batch]:
        """The first calibration batch, as batches the model takes."""
        return [] if self.first is None else [self.first]

    def renewed(self) -> Holdout:
        """The same split for a later pass over the data (which skips the samples this one held)."""
        return Holdout(self.every, self.max_samples, self.fixed, self.max_bytes, self.min_held)

    def _room(self) -> int:
        """Samples that may still be held: up to max_samples, and past min_held within max_bytes."""
        room = self.max_samples - self.held_count
        if self.max_bytes is not None and self.held_count >= self.min_held and self.held_bytes >= self.max_bytes:
            return 0
        return room

    def _hold(self, batch: Batch) -> None:
        self.held.append(batch)
        self.held_count += samples_in(batch)
        self.held_bytes += sum(np.asarray(v).nbytes for v in batch.values())

    def _split_whole(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        for index, batch in enumerate(batches):
            n = samples_in(batch)
            self.seen += n
            room = self._room()
            if index % self.every == self.every - 1 and (room >= n or not self.held):
                self._hold(batch)
                continue
            if self.first is None:
                self.first = batch
            yield batch

    def _split(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        for batch in batches:
            n = samples_in(batch)
            index = np.arange(self.seen, self.seen + n)
            self.seen += n
            hold = (index % self.every == self.every - 1)
            room = self._room()
            if room <= 0:
                hold[:] = False
            elif hold.sum() > room:
                hold[np.flatnonzero(hold)[room:]] = False
            if hold.any():
                self._hold(take(batch, hold))
            if (~hold).any():
                kept = take(batch, ~hold) if hold.any() else batch
                if self.first is None:
                    self.first = kept
                yield kept
