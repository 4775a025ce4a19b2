"""The verdicts a check can reach, in the words the report and the summary use, and how they combine.

A bar is met only where the data shows it: within tolerance when every output is shown within its bars, out of
tolerance when one is measured below a bar (the point estimate, the one case a search acts on), not shown when
neither — the data too small or too unstable to tell. A run adds two of its own: nothing quantized (every node kept
float, so the check compared the float model with itself) and not verified (verification off)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["WITHIN", "OUT", "NOT_SHOWN", "NOTHING_QUANTIZED", "NOT_VERIFIED", "VERDICTS", "verdict_of", "combined"]

WITHIN = "within tolerance"
OUT = "out of tolerance"
NOT_SHOWN = "not shown"
NOTHING_QUANTIZED = "nothing quantized"
NOT_VERIFIED = "not verified"
VERDICTS = (WITHIN, OUT, NOT_SHOWN, NOTHING_QUANTIZED, NOT_VERIFIED)


def verdict_of(failed: bool, passed: bool) -> str:
    """One check's verdict: failed (a bar measured below) wins over anything not shown."""
    return OUT if failed else WITHIN if passed else NOT_SHOWN


def combined(verdicts: Iterable[str]) -> str:
    """Several checks' verdict: out of tolerance if any is, else not shown if any is, else within tolerance."""
    found = set(verdicts)
    return OUT if OUT in found else NOT_SHOWN if NOT_SHOWN in found else WITHIN
