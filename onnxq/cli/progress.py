"""A one-line progress bar for calibration on stderr, and the sample count it is measured against."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

from onnxq.data.npz import open_npz

__all__ = ["ProgressBar", "count_samples"]


class ProgressBar:
    """A one-line progress bar on stderr (only when it is a terminal)."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.done = 0
        self.start = time.perf_counter()
        self.live = sys.stderr.isatty()

    def __call__(self, samples: int) -> None:
        self.done += samples
        if not self.live:
            return
        rate = self.done / max(time.perf_counter() - self.start, 1e-9)
        if self.total:
            filled = int(30 * min(self.done / self.total, 1.0))
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}"
        else:
            bar = f"{self.done}"
        sys.stderr.write(f"\rcalibrating {bar} samples, {rate:.1f} samples/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.live and self.done:
            sys.stderr.write("\n")


def count_samples(source: str | None, limit: int | None) -> int | None:
    """Samples in an .npz file or folder, from the array headers alone; None when unknown (the real reader reports
    what is wrong with a file)."""
    if source is None:
        return None
    path = Path(source)
    try:
        files = sorted(path.glob("*.npz")) if path.is_dir() else [path]
        total = 0
        for file in files:
            if not stat.S_ISREG(file.stat().st_mode):  # a FIFO would block the read
                return None
            first = next(iter(open_npz(file, "calibration").values()), None)
            total += len(first) if first is not None else 0
    except Exception:  # only a progress-bar nicety
        return None
    return min(total, limit) if limit else total
