"""An .npz written a batch at a time: each input's samples go to a temporary file beside the target as they come,
then each becomes one .npy member of the archive — memory holds one batch, however many samples there are."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from onnxq.data.specs import Batch, sample_axis
from onnxq.errors import CalibrationDataError

__all__ = ["write_npz", "Written"]


@dataclasses.dataclass(frozen=True)
class Written:
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclasses.dataclass
class _Part:
    path: Path
    file: BinaryIO
    dtype: np.dtype
    row: tuple[int, ...]
    rows: int = 0


def write_npz(target: Path, batches: Iterable[Batch]) -> dict[str, Written]:
    """Write the batches' samples (axis 0; an input held constant: its one value) to target; each input's shape."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".onnxq-npz-") as folder:
        parts: dict[str, _Part] = {}
        constants: dict[str, np.ndarray] = {}
        try:
            for batch in batches:
                for name, array in batch.items():
                    _append(parts, constants, Path(folder), name, np.asarray(array), sample_axis(batch, name))
        finally:
            for part in parts.values():
                part.file.close()
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            written = {}
            for name, part in parts.items():
                written[name] = Written((part.rows, *part.row), part.dtype)
                with open(part.path, "rb") as data:
                    _member(archive, name, written[name], data)
            for name, value in constants.items():
                written[name] = Written(value.shape, value.dtype)
                _member(archive, name, written[name], None, value)
    return written


def _append(parts: dict[str, _Part], constants: dict[str, np.ndarray], folder: Path, name: str, array: np.ndarray,
            axis: int | None) -> None:
    if axis is None:
        constants.setdefault(name, array)
        return
    if axis != 0:
        raise CalibrationDataError(f"input {name!r} holds its samples on axis {axis}; an .npz written here holds "
                                   "them on axis 0 — save the arrays with numpy.savez yourself")
    part = parts.get(name)
    if part is None:
        path = folder / f"{len(parts)}.bin"
        part = parts[name] = _Part(path, open(path, "wb"), array.dtype, array.shape[1:])
    if array.shape[1:] != part.row or array.dtype != part.dtype:
        raise CalibrationDataError(f"input {name!r}: a batch of {array.dtype} {array.shape[1:]} samples after "
                                   f"{part.dtype} {part.row} ones — one .npz array holds samples of one shape")
    part.file.write(np.ascontiguousarray(array).tobytes())
    part.rows += array.shape[0]


def _member(archive: zipfile.ZipFile, name: str, written: Written, data: BinaryIO | None,
            value: np.ndarray | None = None) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(written.dtype), "fortran_order": False, "shape": written.shape}
    with archive.open(f"{name}.npy", "w", force_zip64=True) as out:
        np.lib.format.write_array_header_2_0(out, header)
        if data is not None:
            shutil.copyfileobj(data, out, 1 << 20)
        else:
            out.write(np.ascontiguousarray(value).tobytes())
