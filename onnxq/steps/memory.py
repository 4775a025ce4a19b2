"""The run's peak resident memory after each step (the process's high-water mark, so a step's figure is the peak
up to its end): which step sets the peak, against the float model's size — what decides whether a model can be
quantized on a given machine (a 7B model's 28 GB on a 64 GB machine, say)."""

from __future__ import annotations

import dataclasses
import html
import sys

__all__ = ["MemoryUse", "peak_rss_bytes"]

_RATIO_FROM = 64_000_000
_SPEED_STEP = "check_speed"  # steps.check_speed: the speed line


def peak_rss_bytes() -> int | None:
    """This process's peak resident set size so far; None where the OS does not say (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux


@dataclasses.dataclass(frozen=True)
class MemoryUse:
    key = "memory"
    peak_after: dict[str, int]  # step → the process's peak RSS in bytes when it ended (monotone)
    float_bytes: int

    @property
    def peak(self) -> int:
        return max(self.peak_after.values(), default=0)

    @property
    def peak_step(self) -> str | None:
        """The first step at whose end the peak had been reached."""
        return next((step for step, rss in self.peak_after.items() if rss == self.peak), None)

    @property
    def peak_before_speed(self) -> int | None:
        """The peak at the end of the step before the speed line, when the speed line set the run's peak: what the
        quantization itself took (ORT's deployed float session alone holds its packed copy of the float weights:
        SmolLM2's 540 MB file, 785 MiB in a process that does nothing else)."""
        steps = list(self.peak_after)
        if self.peak_step != _SPEED_STEP or steps.index(_SPEED_STEP) == 0:
            return None
        return self.peak_after[steps[steps.index(_SPEED_STEP) - 1]]

    @property
    def detail(self) -> bool:
        """Summary lines only with -v (report.Section): under _RATIO_FROM of weights the peak is the interpreter's
        and ORT's own, nothing the model asks of a machine."""
        return self.float_bytes < _RATIO_FROM

    def text(self) -> list[str]:
        if not self.peak_after:
            return []
        line = f"memory:      peak RSS {self.peak / 1e6:.0f} MB{self._ratio(self.peak)}, reached in {self.peak_step}"
        before = self.peak_before_speed
        if before is not None:
            share = f" ({before / self.float_bytes:.2f}x)" if self.float_bytes >= _RATIO_FROM else ""
            line += (f" (ORT's float and quantized sessions timed as deployed); {before / 1e6:.0f} MB{share} before "
                     "it (--no-speed)")
        return [line]

    def _ratio(self, peak: int) -> str:
        # Under ~64 MB of weights the peak is the interpreter's and ORT's own (about 150 MB): no ratio to speak of.
        # Two decimals: a bar such as 1.5x is met or missed in the second one (SmolLM2's 1.455x).
        return f", {peak / self.float_bytes:.2f}x the float model's {self.float_bytes / 1e6:.0f} MB" \
            if self.float_bytes >= _RATIO_FROM else ""

    def html(self) -> str:
        return "".join(f"<p>{html.escape(line)}</p>" for line in self.text())

    def to_dict(self) -> dict:
        return {"peak_bytes": self.peak, "peak_step": self.peak_step, "float_bytes": self.float_bytes,
                "peak_after": dict(self.peak_after)}
