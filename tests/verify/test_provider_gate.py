"""The gate per provider: each provider's quantized outputs against the one float reference; the
agreement between providers held to the bound two in-tolerance providers always meet (verify.agreement).

No GPU is needed: verify.comparisons takes arrays, so the rules run here on outputs shaped like an H100 run's
(all-MiniLM-L6-v2 dynamic, CPU 0.9927 and CUDA 0.9926 from float, 0.9886 from each other), and on a
provider whose kernel saturates."""

import math

import numpy as np
import pytest

from onnxq.config import Tolerance, VerifyConfig
from onnxq.verify.agreement import implied_agreement
from onnxq.verify.comparisons import Comparisons
from onnxq.verify.metrics import MetricsAccumulator

CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    acc = MetricsAccumulator()
    acc.add(a, b)
    return acc.result().cosine_mean


def _noisy(rng, reference: np.ndarray, cosine: float) -> np.ndarray:
    """The reference plus independent Gaussian noise sized for about this mean cosine."""
    scale = np.linalg.norm(reference, axis=1, keepdims=True) / np.sqrt(reference.shape[1])
    return reference + rng.standard_normal(reference.shape) * scale * math.tan(math.acos(cosine))


def test_the_bound_is_what_the_default_tolerance_implies():
    assert implied_agreement(Tolerance(), Tolerance()).min_cosine == pytest.approx(0.92, abs=1e-12)
    both = implied_agreement(Tolerance(max_abs_error=0.1, min_argmax_agreement=0.99),
                             Tolerance(max_abs_error=0.2, min_argmax_agreement=0.98))
    assert both.max_abs_error == pytest.approx(0.3) and both.min_argmax_agreement == pytest.approx(0.97)
    # A bar either tolerance lacks bounds nothing; SQNR and top-k are reported, never gated here.
    loose = implied_agreement(Tolerance(min_cosine=None, min_sqnr_db=30.0), Tolerance(min_sqnr_db=30.0))
    assert loose.min_cosine is None and loose.min_sqnr_db is None and loose.min_topk_agreement is None


@pytest.mark.parametrize("errors", ["independent", "opposite", "same"])
def test_every_pair_within_tolerance_meets_the_bound(rng, errors):
    """Per sample chords obey the triangle inequality and Minkowski's carries it to the means: whatever the
    errors' relation, the agreement's cosine stays above the bound implied by the two measured cosines; errors
    in opposite directions come close to it (the bound is tight, not a guess)."""
    reference = rng.standard_normal((64, 384))
    for level in (0.999, 0.99, 0.98, 0.9, 0.5):
        error = _noisy(rng, reference, level) - reference
        other = {"independent": _noisy(rng, reference, level) - reference, "opposite": -error,
                 "same": error}[errors]
        a, b = reference + error, reference + other
        bound = implied_agreement(Tolerance(min_cosine=_cosine(reference, a)),
                                  Tolerance(min_cosine=_cosine(reference, b))).min_cosine
        agreement = _cosine(a, b)
        assert agreement >= bound - 1e-12
        if errors == "opposite" and level >= 0.9:  # the worst case: within 6 % of the gap the bound allows
            assert (1 - agreement) >= 0.94 * (1 - bound)


def _h100_like(rng, samples: int = 500) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A float sentence embedding and two quantized runs at the H100 run's distances: independent rounding on each
    provider (a run-time scale rounded one way on the CPU, the other on CUDA)."""
    reference = rng.standard_normal((samples, 384))
    return reference, _noisy(rng, reference, 0.9927), _noisy(rng, reference, 0.9926)


def _compare(reference, cpu, cuda, cuda_float=None, config=VerifyConfig()):
    comparisons = Comparisons(["sentence_embedding"], [CPU, CUDA])
    comparisons.add([reference], {CPU: [cpu], CUDA: [cuda]},
                    {CUDA: [reference if cuda_float is None else cuda_float]})
    return comparisons.result(config)


def test_runs_at_the_h100_s_distances_pass_each_provider_and_the_agreement(rng):
    """A fixed bar (cosine 0.999 between providers) fails models within tolerance on both, MiniLM on an H100 in
    every int8-activation mode; the derived bar (0.92 for cosine 0.98) passes them."""
    reference, cpu, cuda = _h100_like(rng)
    found = _compare(reference, cpu, cuda)
    (cpu_check,), (cuda_check,) = found.outputs[CPU], found.outputs[CUDA]
    assert cpu_check.passed and cuda_check.passed
    assert cpu_check.metrics.cosine_mean == pytest.approx(0.9927, abs=0.002)
    (agreement,) = found.agreement[CUDA]
    assert agreement.metrics.cosine_mean == pytest.approx(0.9853, abs=0.003)  # as far apart as each from float
    assert agreement.passed and found.bounds["sentence_embedding"].min_cosine == pytest.approx(0.92)
    fixed_bar = _compare(reference, cpu, cuda, config=VerifyConfig(provider_agreement=Tolerance(min_cosine=0.999)))
    assert not fixed_bar.agreement[CUDA][0].passed


def test_a_provider_whose_kernel_saturates_fails_its_gate_and_the_agreement(rng):
    """A defect on one provider only (its products clipped, as an int16 pair sum saturates): that provider fails
    against float while the CPU passes; once the defect moves it further from the CPU than two in-tolerance
    providers can be, the agreement fails too and names it. A milder defect fails the provider's own gate only:
    the bound is what correct models meet, so it never fails one of them."""
    reference, cpu, _ = _h100_like(rng)
    for quantile, agreement_fails in ((0.8, False), (0.4, True)):
        limit = np.quantile(np.abs(reference), quantile)
        saturated = np.clip(_noisy(rng, reference, 0.9926), -limit, limit)
        found = _compare(reference, cpu, saturated)
        assert found.outputs[CPU][0].passed and not found.outputs[CUDA][0].passed
        (agreement,) = found.agreement[CUDA]
        assert agreement.passed != agreement_fails
    assert "cosine" in agreement.failures[0] and "< 0.92" in agreement.failures[0]


def test_the_float_models_own_drift_is_reported_not_gated(rng):
    """The float model on the other provider against the reference: TF32-sized noise is a figure, never a
    failure, and it is inside each provider's own comparison with float."""
    reference, cpu, cuda = _h100_like(rng)
    drift = _noisy(rng, reference, 0.999999)
    found = _compare(reference, cpu, cuda, cuda_float=drift)
    (float_check,) = found.float_drift[CUDA]
    assert float_check.passed and float_check.metrics.cosine_mean == pytest.approx(0.999999, abs=1e-6)
    assert CPU not in found.float_drift
