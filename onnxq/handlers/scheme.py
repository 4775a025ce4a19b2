"""How one input of a planned node is quantized, as data: integer type, symmetry, granularity, and where its scale
comes from (a constant weight's own values, calibrated ranges, or the run itself). passes.forms.registry.plan_tensors
derives them from a plan, its rewrite form and the config; calibration collects what the calibrated ones read."""

from __future__ import annotations

import dataclasses
from typing import Literal

__all__ = ["PerTensor", "PerAxis", "PerBlock", "PerToken", "Granularity", "Scheme", "TensorQuant", "Source"]


@dataclasses.dataclass(frozen=True)
class PerTensor:
    """One scale (and zero point) for the whole tensor."""


@dataclasses.dataclass(frozen=True)
class PerAxis:
    """One scale per index along `axis` (a weight's output channels)."""

    axis: int


@dataclasses.dataclass(frozen=True)
class PerBlock:
    """One scale per block of `size` consecutive values along `axis` (4-bit weights: along K)."""

    axis: int
    size: int


@dataclasses.dataclass(frozen=True)
class PerToken:
    """One scale per row (token), computed at run time."""


Granularity = PerTensor | PerAxis | PerBlock | PerToken
Source = Literal["constant", "calibrated", "runtime"]


@dataclasses.dataclass(frozen=True)
class Scheme:
    dtype: str  # int8, uint8, int4, uint4
    symmetric: bool
    granularity: Granularity
    source: Source


@dataclasses.dataclass(frozen=True)
class TensorQuant:
    """Input `input` of a planned node, quantized by `scheme`; `pair_limit_axis`: the weight's K axis when its K
    pairs are limited for a saturating target (numerics.pairs)."""

    input: int
    scheme: Scheme
    pair_limit_axis: int | None = None
