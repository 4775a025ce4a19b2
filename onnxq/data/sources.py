"""From what the user gives (a path of any kind the readers know, arrays under other names) to a source the
pipeline reads: quantize(), calibrate(), verify() and `python -m onnxq data` resolve their data here, alike."""

from __future__ import annotations

import os
from pathlib import Path

from onnxq.data.dataset import declare_data_files
from onnxq.data.specs import DataSource
from onnxq.config import DataConfig
from onnxq.data.names import mapped_source
from onnxq.data.reader import ReadData, SourceModel
from onnxq.data.registry import reader_for
from onnxq.errors import CalibrationDataError
from onnxq.io import RunFiles, regular_file

__all__ = ["resolve_source", "declare_source", "described"]


def resolve_source(source: DataSource | None, model: SourceModel, config: DataConfig, what: str,
                   beside_calibration: bool = True) -> DataSource | None:
    """The source as the pipeline reads it: text, images or one .npy opened by their reader (registry), arrays
    renamed by data.input_map; an .npz whose arrays all name inputs, a folder of them and any other source as given.
    what: "calibration" or "verification" (the data's name in the lines that refuse it); beside_calibration: the
    verification data of a run that calibrates too, which the calibration's input map serves only where it has the
    arrays the map names (verify() has no calibration data: its map is its own)."""
    if source is None:
        return None
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.exists() and not path.is_dir():  # a FIFO is refused before any reader opens it (it would block)
            regular_file(path, f"{what} data", CalibrationDataError)
        reader = reader_for(path, what)
        if reader is not None:
            return reader.open(path, model, config, what)
    input_map, inherited = config.map_for(what)
    return mapped_source(source, list(model.specs), input_map, what, inherited and beside_calibration)


def declare_source(files: RunFiles, given: DataSource | None, resolved: DataSource | None, what: str) -> None:
    """Record what the data reads as inputs of the run (no output may overwrite them): a reader's files and folders,
    else the path as data.dataset reads it. what: "the calibration data" / "the verification data"."""
    if not isinstance(resolved, ReadData):
        declare_data_files(files, given, what)
        return
    for folder in resolved.opened.folders:
        files.add_data_folder(folder, what)
    for file in resolved.opened.files:
        files.add_input(file, f"{what} file")


def described(resolved: DataSource | None) -> str | None:
    """One line saying how a reader made the inputs (for the run's notes); None for arrays read as they are."""
    return resolved.opened.description if isinstance(resolved, ReadData) else None
