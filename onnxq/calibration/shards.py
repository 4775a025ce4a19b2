"""Shards of calibration data: sources read in turn as one stream, each up to an optional number of samples, and
calibration.max_samples split over them in order — the first max_samples samples of the whole run, as one process
reading the shards one after another takes them, so that shard summaries merge into its summary."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from onnxq.data.axes import data_shapes
from onnxq.data.batching import samples_in
from onnxq.data.dataset import data_files, validated_batches
from onnxq.data.specs import Batch, DataSource, InputSpec
from onnxq.errors import ConfigError, one_line

__all__ = ["Shard", "as_shard", "shard_batches", "split_samples", "shard_samples"]


@dataclasses.dataclass(frozen=True)
class Shard:
    """A source of calibration data (a path, arrays, …) and how many of its first samples to read (None: all)."""

    source: DataSource
    samples: int | None = None


def as_shard(shard: Shard | DataSource) -> Shard:
    return shard if isinstance(shard, Shard) else Shard(shard)


def shard_batches(shards: Sequence[Shard], specs: list[InputSpec], batch_size: int,
                  max_samples: int | None) -> Iterator[Batch]:
    """The shards' batches one shard after another, as one process reads a folder of them: at most max_samples in
    all, and each shard at most its own samples."""
    remaining = max_samples
    for shard in shards:
        limit = shard.samples if remaining is None else (
            remaining if shard.samples is None else min(shard.samples, remaining))
        if limit is not None and limit <= 0:
            continue
        for batch in validated_batches(shard.source, specs, batch_size, limit):
            if remaining is not None:
                remaining -= samples_in(batch)
            yield batch


def shard_samples(source: DataSource, specs: list[InputSpec]) -> int | None:
    """The samples a shard holds, from its arrays' shapes (nothing read): an input's length on its samples axis (the
    data's first axis for an input without a batch axis). None where the shapes are not known beforehand."""
    if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):  # a folder of shards: their sum
        files, arrays = data_files(Path(source), "calibration")
        counts = [shard_samples(file, specs) for file in files]
        return None if arrays or None in counts else sum(counts)
    sole = specs[0].name if len(specs) == 1 else None
    shapes = data_shapes(source, sole)
    for spec in specs if shapes is not None else ():
        axis = 0 if spec.unbatched else spec.sample_axis
        shape = shapes.get(spec.name)
        if axis is not None and shape is not None and len(shape) > axis:
            return int(shape[axis])
    return None


def split_samples(shards: Sequence[Shard | DataSource], specs: list[InputSpec],
                  max_samples: int | None) -> list[Shard]:
    """The shards cut to the first max_samples samples of all of them, in order (shards past it dropped): each then
    calibrates alone, anywhere, and their summaries merge into the one of the whole run."""
    shards = [as_shard(s) for s in shards]
    if max_samples is None:
        return shards
    cut, remaining = [], max_samples
    for shard in shards:
        if remaining <= 0:
            break
        count = shard_samples(shard.source, specs)
        if count is None:
            where = one_line(shard.source) if isinstance(shard.source, (str, os.PathLike)) else "a shard"
            raise ConfigError(f"calibration.max_samples bounds the whole run, and the samples of {where} are not known "
                              "before reading it — give .npz shards or arrays, or cut the shards to size and leave "
                              "--calib-samples out")
        count = count if shard.samples is None else min(count, shard.samples)
        cut.append(Shard(shard.source, min(count, remaining)))
        remaining -= count
    return cut
