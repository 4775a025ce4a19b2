"""How far the quantized model may differ between two providers when each is within tolerance of the float model.

Every provider's quantized outputs are compared with one reference (the float model on the CPU, no graph
optimizations), so the float model's own difference between providers (TF32, fused kernels) is inside each
provider's figure, and the bound between two providers follows from the tolerance alone, by the triangle
inequality on the same reference:

- cosine: per sample, the chord between unit vectors (√(2(1 − cos))) obeys the triangle inequality; over samples,
  Minkowski's inequality on the root mean square chord gives 1 − cos_AB ≤ (√(1 − cos_A) + √(1 − cos_B))², for the
  means over samples. Both at the default 0.98: agreement ≥ 0.92;
- max abs error: |a − b| ≤ |a − f| + |f − b|, so the sum of the two bounds;
- argmax agreement: two providers that each keep a share s of float's decisions share at least s_A + s_B − 1.

A correct model therefore always meets the bound; a quantized model that runs differently on one provider (a
kernel that saturates there, a scale rounded the other way in every sample) fails that provider's own gate and this
one. The quantized model's agreement between providers is not held to anything tighter by default: a rounding flip
of a run-time scale moves each provider's outputs as far from the other as from float (MiniLM on an H100:
CPU vs CUDA cosine 0.9886 where each was 0.9927 from float). SQNR and top-k agreement have no bound of this kind
here (the agreement's SQNR is measured against the CPU's quantized output, not float's power): reported, not gated.
`verify.provider_agreement` set by the user replaces the derived bound.
"""

from __future__ import annotations

import math

from onnxq.config import Tolerance

__all__ = ["implied_agreement"]


def implied_agreement(a: Tolerance, b: Tolerance) -> Tolerance:
    """The tolerance two models' outputs meet against each other when each meets its own against the same
    reference (a bar that either tolerance lacks bounds nothing)."""
    cosine = None
    if a.min_cosine is not None and b.min_cosine is not None:
        gap = (math.sqrt(max(0.0, 1.0 - a.min_cosine)) + math.sqrt(max(0.0, 1.0 - b.min_cosine))) ** 2
        cosine = max(-1.0, round(1.0 - gap, 9))  # 0.92, not 0.9199999999999999, in a report
    max_abs = None if a.max_abs_error is None or b.max_abs_error is None else a.max_abs_error + b.max_abs_error
    argmax = None
    if a.min_argmax_agreement is not None and b.min_argmax_agreement is not None:
        argmax = max(0.0, round(a.min_argmax_agreement + b.min_argmax_agreement - 1.0, 9))
    return Tolerance(min_cosine=cosine, min_sqnr_db=None, max_abs_error=max_abs, min_argmax_agreement=argmax,
                     min_topk_agreement=None, topk=a.topk)
