"""What a reader is given (the model's inputs, as a reader needs them) and what it gives back: data opened, read
again batch by batch on every pass over it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import onnx_ir as ir

from onnxq.data.batching import fixed_batch_size
from onnxq.data.specs import Batch, DataSource, InputSpec, input_specs
from onnxq.config import CalibrationConfig, DataConfig

__all__ = ["SourceModel", "Opened", "ReadData", "Reader", "source_model"]


@dataclasses.dataclass(frozen=True)
class SourceModel:
    """The model as a reader sees it: its inputs, whether it is a decoder language model (text as token windows),
    the folder of its file (a tokenizer.json found there), and the samples a batch holds."""

    specs: tuple[InputSpec, ...]
    decoder: bool
    folder: Path | None
    batch_size: int

    def spec(self, name: str) -> InputSpec | None:
        return next((s for s in self.specs if s.name == name), None)

    def listed(self) -> str:
        """The model's inputs for an error line."""
        shown = ", ".join(f"{s.name} ({s.describe()})" for s in self.specs[:6])
        return shown + (", …" if len(self.specs) > 6 else "")


def source_model(model: ir.Model, layout: CalibrationConfig, decoder: bool, path: str | os.PathLike | None) -> \
        SourceModel:
    """The SourceModel of an onnx_ir model (decoder: onnxq's language-model recognition said so; path: its file)."""
    specs = input_specs(model, layout.sample_axes, layout.constant_inputs, layout.unbatched_inputs)
    folder = Path(path).absolute().parent if path is not None else None
    return SourceModel(tuple(specs), decoder, folder, fixed_batch_size(specs) or layout.batch_size)


@dataclasses.dataclass(frozen=True)
class Opened:
    """Data a reader opened. batches(size, same_shape) reads it again from the start, `size` samples a batch (one
    batch in memory at a time); same_shape pads every batch alike (one shape for an .npz) where batches may differ
    (sentences padded per batch)."""

    kind: str
    samples: int
    batches: Callable[[int, bool], Iterator[Batch]]
    description: str  # one line: what was read and how it became the inputs
    made: Mapping[str, str] = dataclasses.field(default_factory=dict)  # input → how the reader made it
    files: tuple[Path, ...] = ()  # what it reads: inputs of the run, never overwritten
    folders: tuple[Path, ...] = ()  # folders read as data: no output of the run lands there


@dataclasses.dataclass(frozen=True)
class ReadData:
    """Opened data as a calibration / verification source: a callable that each pass calls for its batches."""

    opened: Opened
    batch_size: int
    same_shape: bool = False

    def __call__(self) -> Iterator[Batch]:
        return self.opened.batches(self.batch_size, self.same_shape)


@dataclasses.dataclass(frozen=True)
class Reader:
    """One kind of data the user has. claims(path): the path is of its kind (a suffix, a folder of such files, a
    pattern); open(path, model, config, what): the data as a source the pipeline reads ("calibration" /
    "verification" data), or one line (CalibrationDataError) saying why it cannot feed the model."""

    kind: str
    accepts: str  # what it reads, for the line that refuses a path no reader claims
    claims: Callable[[Path], bool]
    open: Callable[[Path, SourceModel, DataConfig, str], DataSource]
