"""What the model's inputs are, and what a batch of data is."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Union

import numpy as np
import onnx_ir as ir

__all__ = ["Batch", "DataSource", "InputSpec", "input_specs"]

Batch = dict[str, np.ndarray]
# A path to an .npz file, a folder of .npz files (each a shard) or of .npy files (one per input, named after it,
# memory-mapped); a mapping of arrays (first axis = samples); an iterable of such mappings, each one batch; or a
# callable returning any of these (called once per pass over the data).
DataSource = Union[str, Path, Mapping[str, np.ndarray], Iterable[Mapping[str, np.ndarray]], Callable[[], Any]]


@dataclasses.dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple[int | str | None, ...] | None  # None: unknown rank; str/None entries: dynamic

    def describe(self) -> str:
        dims = "?" if self.shape is None else ", ".join(str(d) if d is not None else "?" for d in self.shape)
        return f"{self.dtype} [{dims}]"


def input_specs(model: ir.Model) -> list[InputSpec]:
    """The inputs a user must feed (initializers that are also inputs have defaults and are left out)."""
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
    return specs
