"""The readers of the data a user has, by kind, tried in order: the first that claims a path reads it. A new kind
of data is one entry here (and its test); a path none claims is an .npz or a folder of .npz / .npy, read as
data.dataset reads them."""

from __future__ import annotations

import zipfile
from pathlib import Path

from onnxq.data.images import IMAGE_SUFFIXES, claims_images, open_images
from onnxq.data.npy import claims_npy, open_npy
from onnxq.data.reader import Reader
from onnxq.data.text import claims_text, open_text
from onnxq.errors import CalibrationDataError, one_line

__all__ = ["READERS", "reader_for"]

READERS: dict[str, Reader] = {
    "npy": Reader("npy", ".npy (one array: a one-input model's samples)", claims_npy, open_npy),
    "text": Reader("text", ".txt (a sample a line), .jsonl, a folder of .txt (with --tokenizer)", claims_text,
                   open_text),
    "images": Reader("images", f"images ({', '.join(IMAGE_SUFFIXES[:4])}, …: a file, a folder or a pattern)",
                     claims_images, open_images),
}


def reader_for(path: Path, what: str) -> Reader | None:
    """The reader that claims the path; None for what data.dataset reads (an .npz, a folder of .npz / .npy, a
    path that does not exist: it says so); one line for a folder or a file that nothing reads."""
    for reader in READERS.values():
        if reader.claims(path):
            return reader
    if path.is_dir() and not any(path.glob("*.np[yz]")):
        raise CalibrationDataError(f"{what} folder {one_line(path)} holds no data onnxq reads — {_accepted()}")
    if path.is_file() and path.suffix.lower() != ".npz" and not zipfile.is_zipfile(path):
        kind = path.suffix or "files without a suffix"
        raise CalibrationDataError(f"{what} data {one_line(path)}: onnxq does not read {kind} — {_accepted()}")
    return None


def _accepted() -> str:
    return "give .npz (arrays keyed by input name), a folder of .npz or <input>.npy, " + ", ".join(
        reader.accepts for reader in READERS.values())
