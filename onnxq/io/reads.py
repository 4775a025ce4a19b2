"""Every file onnxq reads is checked to be a regular file before it is opened: a FIFO would block the read forever,
a device (/dev/zero) would never end, a folder gives a confusing error deep inside a parser."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

from onnxq.errors import OnnxqError, one_line

__all__ = ["regular_file", "file_kind", "Snapshot"]

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a stat mode says the path is, in words ("a regular file", "a folder", "a named pipe (FIFO)", …)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def regular_file(path: str | os.PathLike, what: str, error: type[OnnxqError] = OnnxqError) -> Path:
    """The path, when it names a regular file (symlinks followed); else `error`, naming what it is instead."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise error(f"{what} not found: {one_line(path)} — check the path") from None
    except OSError as e:  # a loop of symlinks, a name too long, no permission on a folder
        raise error(f"{what} {one_line(path)} cannot be opened ({e.strerror or e}) — check the path") from None
    if not stat.S_ISREG(mode):
        raise error(f"{what} {one_line(path)} is {file_kind(mode)}, not a regular file — pass the file itself")
    return path


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A file's identity, size and modification time: a change between two snapshots means another program wrote,
    truncated or replaced the file."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> Snapshot | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
