"""Where each input holds its samples, read off the data's lengths when the model's shapes do not say it (unnamed
dimensions): a voice-activity detector (silero-vad) takes `input` [batch, 512] and `state` [2, batch, 128] with no
names, and its data holds 64 samples of `input` beside a `state` of [2, 64, 128] — the only axis of `state` whose
length is the others' count is axis 1. Inferred only when one count fits every input, each on exactly one axis
that the model leaves free; otherwise the data is refused with the --sample-axis hint."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from onnxq.data.dataset import data_files
from onnxq.data.npz import open_npz
from onnxq.data.specs import DataSource, InputSpec, input_specs, with_layout
from onnxq.data.unbatched import inferred_unbatched
from onnxq.errors import CalibrationDataError

__all__ = ["data_headers", "data_shapes", "inferred_sample_axes", "inferred_constants", "new_layout", "InferredLayout", "read_layout"]


def data_headers(source: DataSource | None, sole: str | None = None) -> dict[str, tuple[tuple[int, ...], np.dtype]] | None:
    """Each array's (shape, dtype), without reading the data: from an .npz's (or a folder's first shard's) headers, a
    folder's .npy headers, a mapping's arrays, or one array given for `sole` (a model's one input); None for batches
    given one by one (their own layout), a callable, or data that cannot be read (refused where it is read)."""
    if isinstance(source, Mapping):
        return {k: (tuple(np.shape(v)), v.dtype if hasattr(v, "dtype") else np.asarray(v).dtype)
                for k, v in source.items()}
    if isinstance(source, np.ndarray):
        return None if sole is None else {sole: (source.shape, source.dtype)}
    if not isinstance(source, (str, Path)):
        return None
    path = Path(source)
    try:
        if path.is_dir():
            shards, arrays = data_files(path, "data")
            if arrays:
                return {f.stem: (a.shape, a.dtype) for f in arrays
                        for a in [np.load(f, mmap_mode="r", allow_pickle=False)]}
            path = shards[0]
        members = open_npz(path, "data")
    except (CalibrationDataError, OSError, ValueError):  # refused where it is read, with its own message
        return None
    headers = {k: (tuple(m.shape), m.dtype) for k, m in members.items()}
    for member in members.values():
        member.close()
    return headers


def data_shapes(source: DataSource | None, sole: str | None = None) -> dict[str, tuple[int, ...]] | None:
    """Each array's shape, without reading the data (data_headers)."""
    headers = data_headers(source, sole)
    return None if headers is None else {k: shape for k, (shape, _) in headers.items()}


@dataclasses.dataclass(frozen=True)
class InferredLayout:
    """What the data's shapes say of the inputs the user's layout leaves open."""

    once: tuple[str, ...] = ()  # given once: held constant
    axes: dict[str, int] = dataclasses.field(default_factory=dict)  # samples off axis 0
    unbatched: tuple[str, ...] = ()  # no batch axis: samples stacked on the data's own first axis, one per run

    def __bool__(self) -> bool:
        return bool(self.once or self.axes or self.unbatched)

    def applied(self, layout: Any) -> Any:
        """The calibration config (config.CalibrationConfig) with this layout added to the user's."""
        return dataclasses.replace(layout, sample_axes={**layout.sample_axes, **self.axes},
                                   constant_inputs=(*layout.constant_inputs, *self.once),
                                   unbatched_inputs=(*layout.unbatched_inputs, *self.unbatched))


def read_layout(model: Any, layout: Any, sources: tuple[DataSource | None, ...]) -> tuple[Any, InferredLayout]:
    """(the calibration config (config.CalibrationConfig) with the layout the data's shapes say for the model's
    (onnx_ir) inputs the user's leaves open, what was read): as quantize, calibrate and verify read it alike."""
    specs = input_specs(model, layout.sample_axes, layout.constant_inputs, layout.unbatched_inputs)
    inferred = new_layout(specs, sources, layout.sample_axes, layout.constant_inputs)
    return inferred.applied(layout), inferred


def new_layout(specs: list[InputSpec], sources: tuple[DataSource | None, ...], sample_axes: Mapping[str, int],
               constant_inputs: tuple[str, ...]) -> InferredLayout:
    """The layout the first readable source's shapes imply for inputs the user's leaves open — its shapes read once:
    a model without a batch axis (data.unbatched), else the inputs given once and then the sample axes, read
    with those inputs held constant. Specs the user made unbatched already have no samples axis to infer."""
    sole = specs[0].name if len(specs) == 1 else None
    shapes = next((s for s in (data_shapes(source, sole) for source in sources) if s is not None), None)
    if shapes is None:
        return InferredLayout()
    said = sample_axes or any(s.unbatched for s in specs)
    unbatched = () if said else inferred_unbatched(specs, shapes)
    if unbatched:
        return InferredLayout(unbatched=unbatched)
    once = tuple(n for n in inferred_constants(specs, shapes) if n not in sample_axes and n not in constant_inputs)
    constants = (*constant_inputs, *once)
    axes = inferred_sample_axes(with_layout(specs, sample_axes, constants) if once else specs, shapes)
    return InferredLayout(once, {name: axis for name, axis in axes.items() if name not in sample_axes
                                 and name not in constants})


def inferred_constants(specs: list[InputSpec], shapes: Mapping[str, tuple[int, ...]]) -> tuple[str, ...]:
    """Inputs given once: the inputs whose sample count differs from the float inputs' largest (every input's when
    none is float), each one's data exactly the shape the model fixes for it (every dimension a number: no samples
    axis to read) — a Slice's starts [2], a Reshape's shape [3], TopK's k [1] beside 240 samples of the input they
    shape, or beside one batch of a model that fixes it. () when the counts agree, or another input is off."""
    placed = [s for s in specs if s.sample_axis is not None and s.name in shapes]
    counts = {s.name: shapes[s.name][s.sample_axis] if len(shapes[s.name]) > s.sample_axis else 0 for s in placed}
    sampled = [s for s in placed if s.dtype.kind == "f"] or placed
    if len(set(counts.values())) <= 1 or not sampled:
        return ()
    most = max(counts[s.name] for s in sampled)
    off = [s for s in placed if counts[s.name] != most]
    given_once = [s for s in off if s.shape is not None and all(isinstance(d, int) for d in s.shape)
                  and tuple(s.shape) == tuple(shapes[s.name])]
    return tuple(s.name for s in off) if len(given_once) == len(off) else ()


def inferred_sample_axes(specs: list[InputSpec], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """{input: axis} for the inputs whose samples lie off the axis their spec gives, when exactly one sample count
    fits every input; {} when the counts agree already or no single count fits."""
    placed = [s for s in specs if s.sample_axis is not None and s.name in shapes]
    counts = {len(shapes[s.name]) > s.sample_axis and shapes[s.name][s.sample_axis] for s in placed}
    if len(counts) <= 1:
        return {}
    fitting = [fit for n in sorted({d for s in placed for d in shapes[s.name]}) if (fit := _fit(placed, shapes, n))
               is not None]
    return fitting[0] if len(fitting) == 1 else {}


def _fit(specs: list[InputSpec], shapes: Mapping[str, tuple[int, ...]], count: int) -> dict[str, int] | None:
    """The axes that give every input `count` samples (only the moved ones), or None when one input has no such
    axis free, or more than one."""
    moved = {}
    for spec in specs:
        shape = shapes[spec.name]
        if len(shape) > spec.sample_axis and shape[spec.sample_axis] == count:
            continue
        free = [i for i, n in enumerate(shape) if n == count and _free(spec, i)]
        if len(free) != 1:
            return None
        moved[spec.name] = free[0]
    return moved


def _free(spec: InputSpec, axis: int) -> bool:
    """The model leaves this dimension open (unnamed or named, not a fixed length)."""
    return spec.shape is None or axis >= len(spec.shape) or not isinstance(spec.shape[axis], int)
