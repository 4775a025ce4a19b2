"""Arrays of an .npz read lazily, a batch of samples at a time: `--calib-samples 16` reads 16 samples, and a small
compressed file whose arrays inflate to gigabytes costs one batch of memory, not the whole array. Headers are read
without numpy.load, so a Python-object array is refused before anything is unpickled."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from onnxq.errors import CalibrationDataError, one_line

__all__ = ["NpzMember", "open_npz", "npy_header"]

# An array stored in Fortran order has no contiguous samples: it is read whole, up to this size.
_WHOLE_READ_LIMIT = 2 * 2**30


def npy_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of an .npy stream, which is left at the start of the data."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(f)
    return np.lib.format._read_array_header(f, version)  # 3.0: utf-8 field names; no public reader


class NpzMember:
    """One array of an .npz: its shape and dtype from the header, and rows [start:stop] read on demand. Reading
    forward from where the last read ended costs only the rows read (and, compressed, decompressing them)."""

    def __init__(self, path: Path, member: str, what: str) -> None:
        self.path, self.member, self.what = path, member, what
        self.key = member.removesuffix(".npy")
        self._archive: zipfile.ZipFile | None = None
        self._stream = None
        self._position = 0
        self._whole: np.ndarray | None = None
        with zipfile.ZipFile(path) as archive, archive.open(member) as f:
            self.shape, self.fortran_order, self.dtype = npy_header(f)
            self._data_start = f.tell()
        if self.dtype.hasobject:
            raise CalibrationDataError(f"{what} file {one_line(path)} holds a Python-object array {self.key!r}; onnxq "
                                       "never unpickles data — save numeric arrays")
        self.ndim = len(self.shape)
        self._row_bytes = int(np.prod(self.shape[1:], dtype=object)) * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        array = self._read_all() if self.ndim == 0 else self[0:len(self)]
        return array if dtype is None else array.astype(dtype)

    def __getitem__(self, index: slice) -> np.ndarray:
        if not isinstance(index, slice) or self.ndim == 0:
            raise TypeError("NpzMember takes a slice of samples")
        start, stop, _ = index.indices(len(self))
        rows = max(stop - start, 0)
        if self.fortran_order and self.ndim > 1:
            return self._read_all()[start:start + rows]
        data = self._read(self._data_start + start * self._row_bytes, rows * self._row_bytes)
        return np.frombuffer(data, self.dtype).reshape((rows, *self.shape[1:]))

    def close(self) -> None:
        for handle in (self._stream, self._archive):
            if handle is not None:
                handle.close()
        self._stream = self._archive = None

    def _read(self, offset: int, size: int) -> bytearray:
        if self._stream is None or offset < self._position:  # first read, or back to the start for a new pass
            self.close()
            self._archive = zipfile.ZipFile(self.path)
            self._stream = self._archive.open(self.member)
            self._position = 0
        if offset > self._position:
            self._stream.seek(offset)
        buffer = bytearray(size)
        got = self._stream.readinto(buffer) if size else 0
        while 0 < got < size:  # a compressed stream may return less than asked
            more = self._stream.readinto(memoryview(buffer)[got:])
            if not more:
                break
            got += more
        self._position = offset + got
        if got != size:
            raise CalibrationDataError(f"{self.what} file {one_line(self.path)}: array {self.key!r} is truncated (its "
                                       f"header says shape {self.shape}) — save it again with numpy.savez")
        return buffer

    def _read_all(self) -> np.ndarray:
        if self._whole is None:
            size = int(np.prod(self.shape, dtype=object)) * self.dtype.itemsize
            if size > _WHOLE_READ_LIMIT:
                raise CalibrationDataError(
                    f"{self.what} file {one_line(self.path)}: array {self.key!r} ({size / 2**30:.1f} GiB) is stored in "
                    "Fortran order, so it cannot be read a batch at a time — save numpy.ascontiguousarray(it)")
            data = self._read(self._data_start, size)
            order = "F" if self.fortran_order else "C"
            self._whole = np.frombuffer(data, self.dtype).reshape(self.shape, order=order)
        return self._whole


def open_npz(path: Path, what: str) -> dict[str, NpzMember]:
    """The arrays of an .npz, by key, none of them read yet."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.namelist()
        arrays = {}
        for member in members:
            if not member.endswith(".npy"):
                raise CalibrationDataError(f"{what} file {one_line(path)} holds {member!r}, which is not a .npy array "
                                           "— save arrays with numpy.savez")
            array = NpzMember(path, member, what)
            arrays[array.key] = array
        return arrays
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, KeyError, SyntaxError, NotImplementedError):
        raise CalibrationDataError(
            f"{what} file {one_line(path)} is not a readable .npz archive — save arrays with numpy.savez") from None
