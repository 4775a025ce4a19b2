"""The calibration data as every pass over it sees it: read, validated against the model's inputs, cut into
batches the model takes, less the samples held back for verification — defined once per run. The first pass
collects the held-back samples; every later one skips the same samples by the same arithmetic."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from onnxq.data.batching import Holdout, fixed_batch_size
from onnxq.data.dataset import validated_batches
from onnxq.data.holdout import HOLD_MAX_BYTES, MIN_HELD, HoldoutPlan, known_samples, plan_holdout
from onnxq.data.specs import Batch, DataSource, InputSpec, readable
from onnxq.errors import ConfigError

__all__ = ["DataStream", "check_reusable"]


class DataStream:
    """source: the calibration data (None: there is none). holdout: where the held-back samples go (None: nothing
    is held back — verification has data of its own, or is off)."""

    def __init__(self, source: DataSource | None, specs: list[InputSpec], batch_size: int, max_samples: int | None,
                 holdout: Holdout | None) -> None:
        self.source, self.specs = source, specs
        self.batch_size, self.max_samples = batch_size, max_samples
        self.holdout = holdout
        self._passes = 0
        self.made: dict[str, str] = {}  # inputs the data leaves out, made (data.completion): name → how
        self.plan: HoldoutPlan | None = None  # how many samples are held back, and why (a run's stream)

    @classmethod
    def for_run(cls, source: DataSource | None, specs: list[InputSpec], config, holds_back: bool,
                for_shares: bool = True) -> DataStream:
        """The stream of a quantize() run (config: a QuantConfig): samples held back when holds_back, as many as
        data.holdout plans for the data's size (for_shares: an output may be judged by a task share)."""
        verify, limit = config.verify, config.calibration.max_samples
        total = known_samples(source, specs) if holds_back and for_shares else None
        plan = plan_holdout(total if limit is None or total is None else min(total, limit), verify.holdout_every,
                            verify.max_samples, for_shares)
        holdout = Holdout(plan.every, plan.most, fixed_batch_size(specs), HOLD_MAX_BYTES if plan.chosen else None,
                          MIN_HELD) if holds_back else None
        stream = cls(source, specs, config.calibration.batch_size, limit, holdout)
        stream.plan = plan if holds_back else None
        return stream

    def batches(self) -> Iterator[Batch]:
        """One pass over the data, less the held-back samples."""
        stream = validated_batches(self.source, self.specs, self.batch_size, self.max_samples, made=self.made)
        if self.holdout is not None:
            split = self.holdout if self._passes == 0 else self.holdout.renewed()
            stream = split.split(stream)
        self._passes += 1
        return stream


def check_reusable(calibration: DataSource | None, what: str) -> None:
    """Calibration data a step must read more than once: a one-shot iterator cannot be."""
    if calibration is None:
        raise ConfigError(f"{what} needs calibration data: its scales come from activation statistics — pass "
                          "--calib DATA")
    source = readable(calibration)
    if not (callable(source) or isinstance(source, (str, os.PathLike, Mapping))) and iter(source) is source:
        raise ConfigError(f"{what} reads the calibration data twice (statistics, then ranges) and a one-shot "
                          "iterator can be read once — pass a list, a dict, a path, or a callable returning the "
                          "batches")
