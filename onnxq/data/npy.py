"""One .npy array: the samples of a model's one input (ModelOpt's and the API's single array), memory-mapped so
that only the batch being fed is read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from onnxq.config import DataConfig
from onnxq.data.reader import SourceModel
from onnxq.errors import CalibrationDataError, one_line
from onnxq.io import regular_file

__all__ = ["claims_npy", "open_npy"]


def claims_npy(path: Path) -> bool:
    return path.suffix.lower() == ".npy" and not path.is_dir()


def open_npy(path: Path, model: SourceModel, config: DataConfig, what: str) -> dict[str, np.ndarray]:
    regular_file(path, f"{what} data", CalibrationDataError)
    if len(model.specs) != 1:
        raise CalibrationDataError(f"{what} file {one_line(path)} is one array but the model has {len(model.specs)} "
                                   f"inputs ({model.listed()}) — put one <input name>.npy per input in a folder and "
                                   "pass the folder, or save them together with numpy.savez")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, MemoryError) as e:
        raise CalibrationDataError(f"{what} file {one_line(path)} is not a readable .npy array ({one_line(e)}) — "
                                   "save it with numpy.save") from None
    return {model.specs[0].name: array}
