"""Lines that say what a long run is doing. A step that runs past FIRST_S says so on the `onnxq.progress` logger,
then again every EVERY_S, and how long it took when it ends, so that a run of minutes never sits silent (with a
terminal or without: the lines are whole lines, for a CI log too). A step done within FIRST_S says nothing: a short
run prints only its summary, and a refused input's one line stays the first line a user sees."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Heartbeat", "FIRST_S", "EVERY_S", "PROGRESS_LOGGER"]

PROGRESS_LOGGER = "onnxq.progress"
FIRST_S = 5.0
EVERY_S = 30.0

logger = logging.getLogger(PROGRESS_LOGGER)


class Heartbeat:
    """with Heartbeat("calibrating"): … — lines from a thread of its own while the block runs (ONNX Runtime releases
    the GIL while it computes, so the lines come on time)."""

    def __init__(self, doing: str, first_s: float | None = None, every_s: float | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        self.doing = doing
        self.first_s = FIRST_S if first_s is None else first_s
        self.every_s = EVERY_S if every_s is None else every_s
        self.say = say or logger.info
        self._done = threading.Event()
        self._said = False
        self._start = 0.0
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        self._start = time.perf_counter()
        self._thread = threading.Thread(target=self._beat, name=f"onnxq {self.doing}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        if self._said and exc[0] is None:
            self.say(f"{self.doing}: done in {self._elapsed()}")

    def _elapsed(self) -> str:
        seconds = time.perf_counter() - self._start
        return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"

    def _beat(self) -> None:
        wait = self.first_s
        while not self._done.wait(wait):
            self.say(f"{self.doing}… ({self._elapsed()})")
            self._said, wait = True, self.every_s
