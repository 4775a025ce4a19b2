"""What a count of agreeing decisions can show: the Wilson score interval of a share, and the count that would
show a bar.

A task bar is a claim about the share of decisions the quantized model keeps on data like the verification data,
not on those few samples: none of 64 answers changed shows only that the share is at least 0.943 (95 %), not 0.99.
The Wilson interval (Wilson 1927; Agresti & Coull 1998) keeps its coverage near the nominal 95 % at shares close
to 1 and at small counts, where the normal approximation gives an upper bound past 1 and a zero-width interval for
no change at all. Pure numerics: no onnx, no onnxruntime."""

from __future__ import annotations

import dataclasses
import math

__all__ = ["Z_95", "ShareInterval", "wilson", "units_to_show"]

Z_95 = 1.959963984540054  # the normal quantile of 97.5 %: a two-sided 95 % interval
_MAX_UNITS = 10 ** 9  # past this a share "shows" nothing more a verification could hold


@dataclasses.dataclass(frozen=True)
class ShareInterval:
    """A share kept (kept of units) with its 95 % interval."""

    kept: int
    units: int
    low: float
    high: float

    @property
    def share(self) -> float:
        return self.kept / self.units if self.units else 1.0

    def to_dict(self) -> dict:
        return {"kept": self.kept, "units": self.units, "low": self.low, "high": self.high}


def wilson(kept: int, units: int, z: float = Z_95) -> ShareInterval:
    """The Wilson score interval of kept / units; (0, 1) when there are no units (nothing is known)."""
    if units <= 0:
        return ShareInterval(kept, 0, 0.0, 1.0)
    p, z2 = kept / units, z * z
    centre = (p + z2 / (2 * units)) / (1 + z2 / units)
    half = z * math.sqrt(p * (1 - p) / units + z2 / (4 * units * units)) / (1 + z2 / units)
    return ShareInterval(kept, units, max(0.0, centre - half), min(1.0, centre + half))


def units_to_show(share: float, bar: float, z: float = Z_95) -> int | None:
    """The fewest units at which a measured `share` has its interval's lower bound at or above `bar`; None when no
    count would (the share is at or below the bar). With no change at all (share 1) the lower bound is
    n / (n + z²), so a bar b needs n >= b z² / (1 - b): 381 for 0.99, 125 for 0.97."""
    if not share > bar:
        return None
    def shown(n: int) -> bool:
        return wilson(round(share * n), n, z).low >= bar

    high = 1
    while not shown(high):
        high *= 2
        if high > _MAX_UNITS:
            return None
    low = high // 2  # shown(low) is false (or low is 0)
    while high - low > 1:
        middle = (low + high) // 2
        if shown(middle):
            high = middle
        else:
            low = middle
    return high
