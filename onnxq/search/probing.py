"""Bisection over "how many of the ranked items to change": shared by the fallback and recipe auto."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["smallest_passing"]


def smallest_passing(failing: int, passing: int, passes: Callable[[int], bool]) -> int:
    """The smallest k in (failing, passing] for which passes(k) holds, given that passes(failing) does not and
    passes(passing) does, assuming more changes never hurt. About log2(passing - failing) probes."""
    while passing - failing > 1:
        middle = (failing + passing) // 2
        if passes(middle):
            passing = middle
        else:
            failing = middle
    return passing
