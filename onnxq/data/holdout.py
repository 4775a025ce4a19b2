"""How many calibration samples a run holds back for verification when the user gives no verification data, and how
to say so.

A task bar is shown only by enough samples (numerics.interval): with no answer changed, the 0.99 bar of class scores
needs 381 — 64 held back could never show it. So by default every 10th sample is held back, but at least the
SHOWS_DEFAULT_BAR samples that the strictest default bar needs, and never more than HOLD_SHARE of the data
(calibration keeps the rest), nor, past the first MIN_HELD, more than HOLD_MAX_BYTES of held inputs (they are held
in memory). The data's size is read from its files' headers or its arrays; data given as an iterator has no size
known up front: every 10th, up to SHOWS_DEFAULT_BAR. A model no task share can judge (every output a representation
or numeric by its tolerance, a language model: verify.tasks.rules.may_hold_to_a_share) needs no such count: every
10th, at most MIN_HELD, and calibration keeps the rest. verify.max_samples set by the user keeps its meaning (every
holdout_every-th, at most that many)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from onnxq.data.npz import open_npz
from onnxq.data.specs import DataSource, InputSpec, readable
from onnxq.numerics.interval import units_to_show

__all__ = ["HoldoutPlan", "plan_holdout", "known_samples", "SHOWS_DEFAULT_BAR", "STRICTEST_DEFAULT_BAR",
           "HOLD_SHARE", "HOLD_MAX_BYTES", "MIN_HELD", "ordinal"]

STRICTEST_DEFAULT_BAR = 0.99  # verify.tasks.measures.TASK_BARS' highest (class scores, labels, frames, masks)
SHOWS_DEFAULT_BAR = units_to_show(1.0, STRICTEST_DEFAULT_BAR)  # 381 samples, none changed
HOLD_SHARE = 0.5
MIN_HELD = 64  # held whatever their size
HOLD_MAX_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class HoldoutPlan:
    every: int  # every every-th sample held back,
    most: int  # up to this many
    total: int | None  # the data's samples, where known up front
    chosen: bool  # by the default rule (not verify.max_samples)
    for_shares: bool = True  # sized for a task share's bar (False: numeric bars only)

    def words(self, held: int) -> str:
        """Why `held` samples were held back, for the run's note."""
        if not self.chosen:
            return f"every {self.every}th, at most verify.max_samples = {self.most}"
        if not self.for_shares:
            return f"every {ordinal(self.every)}, at most {self.most}: no output judged by a share of answers"
        need = f"{SHOWS_DEFAULT_BAR} that a {STRICTEST_DEFAULT_BAR:g} bar needs with no change"
        if held >= SHOWS_DEFAULT_BAR:
            return f"every {ordinal(self.every)}: at least the {need}"
        if self.total is not None and held >= math.floor(self.total * HOLD_SHARE):
            return (f"every {ordinal(self.every)}, capped at {HOLD_SHARE:.0%} of the {self.total} samples so that "
                    f"calibration keeps the rest: fewer than the {need} — pass --verify-data (or more data)")
        return (f"every {ordinal(self.every)}: fewer than the {need} (the data's size unknown up front, or its held "
                f"inputs past {HOLD_MAX_BYTES >> 20} MiB) — pass --verify-data (or more data)")


def plan_holdout(total: int | None, every: int, max_samples: int | None, for_shares: bool = True) -> HoldoutPlan:
    """The holdout for data of `total` samples (None: unknown) under the config's holdout_every and max_samples;
    for_shares: an output may be judged by a task share (else numeric bars only, which need no more than MIN_HELD)."""
    if max_samples is not None:
        return HoldoutPlan(every, max_samples, total, chosen=False)
    if not for_shares:
        return HoldoutPlan(every, MIN_HELD, total, chosen=True, for_shares=False)
    if total is None:
        return HoldoutPlan(every, SHOWS_DEFAULT_BAR, None, chosen=True)
    most = min(max(math.ceil(total / every), SHOWS_DEFAULT_BAR), math.floor(total * HOLD_SHARE))
    return HoldoutPlan(max(2, min(every, total // max(most, 1))), max(most, 1), total, chosen=True)


def known_samples(source: DataSource | None, specs: list[InputSpec]) -> int | None:
    """The samples in the data, from its files' array headers, its arrays' lengths, or one pass over what a callable
    makes (it is read again anyway); None where that is not known without using it up (an iterator, a reader), or
    for a folder of per-input .npy files or inputs laid out off axis 0."""
    batched = [s.name for s in specs if s.sample_axis == 0 and not s.unbatched]
    if source is None or not batched or len(batched) != len(specs):
        return None
    if callable(source) and not isinstance(source, Mapping):
        made = readable(source())
        return (known_samples(made, specs) if isinstance(made, (str, os.PathLike, Mapping))
                else _counted(made, batched[0]))
    if isinstance(source, (str, os.PathLike)):
        return _file_samples(Path(source), batched[0])
    if isinstance(source, np.ndarray):  # one array for a one-input model
        return int(source.shape[0]) if source.ndim and len(specs) == 1 else None
    if isinstance(source, Mapping) and batched[0] in source:
        array = np.asarray(source[batched[0]]) if not hasattr(source[batched[0]], "shape") else source[batched[0]]
        return int(array.shape[0]) if len(array.shape) else None
    return None


def _counted(batches: Iterable, name: str) -> int | None:
    total = 0
    for batch in batches:
        if not isinstance(batch, Mapping) or name not in batch or not len(np.shape(batch[name])):
            return None
        total += int(np.shape(batch[name])[0])
    return total


def _file_samples(path: Path, name: str) -> int | None:
    try:
        files = sorted(path.glob("*.npz")) if path.is_dir() else [path]
        if not files or path.suffix.lower() != ".npz" and not path.is_dir():
            return None
        total = 0
        for file in files:
            member = open_npz(file, "calibration").get(name)
            if member is None or not len(member.shape):
                return None
            total += int(member.shape[0])
        return total
    except Exception:  # noqa: BLE001 — unreadable here: the reader says what is wrong, the count stays unknown
        return None


def ordinal(n: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(n, f"{n}th")
