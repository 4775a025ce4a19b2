"""What the model's inputs are, and what a batch of data is."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Union

import numpy as np
import onnx_ir as ir

from onnxq.data.head_sizes import cache_head_sizes
from onnxq.errors import ConfigError, one_line

__all__ = ["Batch", "LaidOutBatch", "DataSource", "InputSpec", "input_specs", "laid_out", "readable", "sample_axis",
           "with_layout"]

Batch = dict[str, np.ndarray]
# A path to an .npz file, a folder of .npz files (each a shard) or of .npy files (one per input, named after it,
# memory-mapped); a mapping of arrays (samples on axis 0, or as calibration.sample_axes says); an iterable of such
# mappings, each one batch; or a callable returning any of these (called once per pass over the data).
# Besides these: an object whose get_next() returns batches (ORT's CalibrationDataReader), and one array for a
# model of one input (data.dataset).
DataSource = Union[str, Path, Mapping[str, np.ndarray], Iterable[Mapping[str, np.ndarray]], Callable[[], Any],
                   np.ndarray]


def readable(source: Any) -> Any:
    """The source, or for a reader that only has get_next() (onnxruntime.quantization's CalibrationDataReader
    protocol; a subclass iterates already) the iterator of its batches until it returns None: read once."""
    if not isinstance(source, Iterable) and callable(getattr(source, "get_next", None)):
        return iter(source.get_next, None)
    return source


class LaidOutBatch(dict):
    """A batch whose inputs do not all hold their samples on axis 0: `axes` maps such an input to its samples'
    axis, or to None for an input held constant (fed whole with every batch: a sample rate, an initial state).
    ONNX Runtime reads it as the dict it is; plain dicts are batches with every input's samples on axis 0."""

    def __init__(self, arrays: Mapping[str, np.ndarray], axes: Mapping[str, int | None]) -> None:
        super().__init__(arrays)
        self.axes = dict(axes)


def laid_out(arrays: Mapping[str, np.ndarray], axes: Mapping[str, int | None]) -> Batch:
    """The arrays as a batch with these sample axes (entries of 0 and absent names: axis 0)."""
    axes = {k: a for k, a in axes.items() if a != 0 and k in arrays}
    return LaidOutBatch(arrays, axes) if axes else dict(arrays)


def sample_axis(batch: Mapping[str, np.ndarray], name: str) -> int | None:
    """Where input `name`'s samples lie in this batch (None: held constant)."""
    return getattr(batch, "axes", {}).get(name, 0)


@dataclasses.dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple[int | str | None, ...] | None  # None: unknown rank; str/None entries: dynamic
    # The axis holding the samples in this input's data; None: one value fed whole with every batch.
    sample_axis: int | None = 0
    # The model takes it without a batch axis: the data stacks its samples on a first axis of its own, and each
    # batch is one sample, fed whole (sample_axis None).
    unbatched: bool = False

    def describe(self) -> str:
        dims = "?" if self.shape is None else ", ".join(str(d) if d is not None else "?" for d in self.shape)
        return f"{self.dtype} [{dims}]"

    @property
    def batch_dim(self) -> int | str | None:
        """The model's dimension along the samples axis (None: unknown, or the input is held constant)."""
        if self.sample_axis is None or self.shape is None or self.sample_axis >= len(self.shape):
            return None
        return self.shape[self.sample_axis]


def input_specs(model: ir.Model, sample_axes: Mapping[str, int] | None = None,
                constant_inputs: Iterable[str] = (), unbatched_inputs: Iterable[str] = ()) -> list[InputSpec]:
    """The inputs a user must feed (initializers that are also inputs have defaults and are left out), with where
    their samples lie: as sample_axes, constant_inputs and unbatched_inputs say (calibration config), else axis 0,
    except a scalar input (held constant: it has no samples axis) and an input whose first dimension is fixed while
    a later one carries the name of the other inputs' first dimension (a recurrent state [2, batch, 128] beside an
    input [batch, time]: axis 1)."""
    specs = []
    for value in model.graph.inputs:
        if value.name in model.graph.initializers:
            continue
        dtype = value.dtype.numpy() if value.dtype is not None else np.dtype(np.float32)
        shape = None
        if value.shape is not None:
            shape = tuple(d if isinstance(d, int) else (d.value if isinstance(d, ir.SymbolicDim) else None)
                          for d in value.shape)
        specs.append(InputSpec(value.name, np.dtype(dtype), shape))
    specs = _with_head_sizes(specs, cache_head_sizes(model))
    batch_names = {s.shape[0] for s in specs if s.shape and isinstance(s.shape[0], str)}
    specs = [dataclasses.replace(s, sample_axis=_inferred_axis(s, batch_names)) for s in specs]
    return with_layout(specs, sample_axes or {}, constant_inputs, unbatched_inputs)


def with_layout(specs: list[InputSpec], sample_axes: Mapping[str, int], constant_inputs: Iterable[str],
                unbatched_inputs: Iterable[str] = ()) -> list[InputSpec]:
    """The specs with the user's layout (calibration.sample_axes, constant_inputs, unbatched_inputs) over the
    inferred one; a name that is no input, one named twice, or an axis past an input's rank, is refused with the
    inputs listed."""
    by_name = {s.name: s for s in specs}
    constant, unbatched = set(constant_inputs), set(unbatched_inputs)
    listed = ", ".join(f"{s.name} ({s.describe()})" for s in specs)
    for name in [*sample_axes, *constant, *unbatched]:
        if name not in by_name:
            raise ConfigError(f"calibration.sample_axes / constant_inputs / unbatched_inputs name "
                              f"{one_line(repr(name))}, which is not an input of the model; its inputs are: "
                              f"{one_line(listed)}")
    _check_one_layout_each(sample_axes, constant, unbatched)
    out = []
    for spec in specs:
        axis = None if spec.name in constant | unbatched else sample_axes.get(spec.name, spec.sample_axis)
        if axis is not None and spec.shape is not None and not 0 <= axis < len(spec.shape):
            rank = len(spec.shape)
            raise ConfigError(f"calibration.sample_axes gives input {one_line(repr(spec.name))} axis {axis}, but it "
                              f"has rank {rank} ({spec.describe()}) — give an axis in [0, {rank})")
        out.append(dataclasses.replace(spec, sample_axis=axis, unbatched=spec.name in unbatched))
    if unbatched:
        _check_unbatched_alone(out)
    return out


def _check_one_layout_each(sample_axes: Mapping[str, int], constant: set[str], unbatched: set[str]) -> None:
    """An input has its samples on an axis, is held constant, or has no batch axis: one of them."""
    named = {"sample_axes": set(sample_axes), "constant_inputs": constant, "unbatched_inputs": unbatched}
    for (first, these), (second, those) in itertools.combinations(named.items(), 2):
        both = sorted(these & those)
        if both:
            raise ConfigError(f"input {one_line(repr(both[0]))} is both in calibration.{first} and in {second} — an "
                              "input has samples on an axis, is held constant, or has no batch axis: one of them")


def _check_unbatched_alone(specs: list[InputSpec]) -> None:
    """A run of an unbatched input takes one sample: an input beside it that takes a batch could not be fed."""
    batched = [s.name for s in specs if s.sample_axis is not None]
    if batched:
        unbatched = next(s.name for s in specs if s.unbatched)
        raise ConfigError(f"input {one_line(repr(unbatched))} has no batch axis (one sample a run) but "
                          f"{one_line(repr(batched[0]))} takes its samples in batches — name every input that "
                          "carries samples in calibration.unbatched_inputs (--unbatched-input), or hold it constant")


def _with_head_sizes(specs: list[InputSpec], sizes: dict[str, int]) -> list[InputSpec]:
    """The cache inputs' last dimension (the head size, in the BNSH layout) where it is open."""
    out = []
    for spec in specs:
        size = sizes.get(spec.name)
        if size is not None and spec.shape and not isinstance(spec.shape[-1], int):
            spec = dataclasses.replace(spec, shape=(*spec.shape[:-1], size))
        out.append(spec)
    return out


def _inferred_axis(spec: InputSpec, batch_names: set[str]) -> int | None:
    if spec.shape is None or (spec.shape and not isinstance(spec.shape[0], int)):
        return 0
    if not spec.shape:
        return None
    named = [i for i, d in enumerate(spec.shape) if isinstance(d, str) and d in batch_names]
    return named[0] if len(named) == 1 else 0
