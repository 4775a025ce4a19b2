import math

import numpy as np
import pytest

from onnxq.config import Tolerance
from onnxq.verify.check import failures_for
from onnxq.verify.metrics import MetricsAccumulator


def test_metrics_match_direct_formulas_across_batches(rng):
    ref = rng.normal(0, 1, (10, 3, 4))
    got = ref + rng.normal(0, 0.1, ref.shape)
    acc = MetricsAccumulator()
    acc.add(ref[:4], got[:4])
    acc.add(ref[4:], got[4:])
    m = acc.result()
    flat_r, flat_g = ref.reshape(10, -1), got.reshape(10, -1)
    cos = (flat_r * flat_g).sum(1) / np.linalg.norm(flat_r, axis=1) / np.linalg.norm(flat_g, axis=1)
    assert m.samples == 10
    assert m.cosine_mean == pytest.approx(cos.mean(), rel=1e-12)
    assert m.cosine_min == pytest.approx(cos.min(), rel=1e-12)
    assert m.max_abs_error == pytest.approx(np.abs(ref - got).max())
    assert m.mean_abs_error == pytest.approx(np.abs(ref - got).mean())
    assert m.sqnr_db == pytest.approx(10 * math.log10((ref**2).sum() / ((ref - got) ** 2).sum()))


def test_identical_and_zero_outputs():
    acc = MetricsAccumulator()
    acc.add(np.zeros((2, 3)), np.zeros((2, 3)))
    m = acc.result()
    assert m.cosine_mean == 1.0 and math.isinf(m.sqnr_db) and m.to_dict()["sqnr_db"] is None


@pytest.mark.parametrize("shape", [(0, 4, 0, 16), (2, 4, 0, 16)])
def test_empty_outputs_compare_as_equal(shape):
    """A cache of no past tokens (an Optimum merged decoder's cross-attention present.* from its cached branch): no
    value differs. It ended the run in a reshape error, or read cosine 0.0 and failed the gate."""
    acc = MetricsAccumulator()
    acc.add(np.zeros(shape, np.float32), np.zeros(shape, np.float32))
    m = acc.result()
    assert m.cosine_mean == 1.0 and m.cosine_min == 1.0 and failures_for(m, Tolerance(min_cosine=0.98)) == ()


def test_tolerance_failures_name_the_metric():
    acc = MetricsAccumulator()
    acc.add(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]))
    failures = failures_for(acc.result(), Tolerance(min_cosine=0.98, min_sqnr_db=10.0, max_abs_error=0.5))
    assert failures == ("cosine 0.0000 < 0.98", "SQNR -3.0 dB < 10.0 dB", "max abs error 1 > 0.5")


def test_nan_or_inf_anywhere_fails_whatever_the_tolerance():
    no_bars = Tolerance(min_cosine=None)
    quantized = MetricsAccumulator()
    quantized.add(np.ones((2, 3)), np.array([[1.0, np.nan, 1.0], [1.0, 1.0, np.inf]]))
    m = quantized.result()
    assert m.nonfinite == 2 and not m.finite
    assert failures_for(m, no_bars) == ("2 NaN/inf value(s) in the quantized outputs",)
    assert m.to_dict()["cosine_mean"] is None  # JSON has no NaN: null
    reference = MetricsAccumulator()
    reference.add(np.array([[np.nan, 1.0]]), np.array([[0.0, 1.0]]))
    (failure,) = failures_for(reference.result(), no_bars)
    assert failure.startswith("the float model itself gives 1 NaN/inf value(s)")


def test_a_nan_max_abs_error_is_not_hidden_by_an_earlier_batch():
    acc = MetricsAccumulator()
    acc.add(np.ones((1, 2)), np.ones((1, 2)) * 1.5)
    acc.add(np.ones((1, 2)), np.array([[np.nan, 1.0]]))
    assert math.isnan(acc.result().max_abs_error)


def test_float32_outputs_are_compared_in_chunks_with_float64_sums(rng, monkeypatch):
    """A decoder's logits stay float32 (three float64 copies of a window's were a third of SmolLM2's verification
    peak): the figures over chunks of columns, summed in float64, are those of the whole output made float64."""
    from onnxq.verify import metrics as metrics_module

    ref = rng.normal(0, 3, (3, 5, 1000)).astype(np.float32)
    got = (ref + rng.normal(0, 0.05, ref.shape)).astype(np.float32)
    got[1, 2, 7] = np.nan
    whole, chunked = MetricsAccumulator(), MetricsAccumulator()
    whole.add(ref.astype(np.float64), got.astype(np.float64))
    monkeypatch.setattr(metrics_module, "_CHUNK", 777)  # not a divisor of a row: the last chunk is short
    chunked.add(ref, got)
    assert metrics_module.Operand(ref).values.dtype == np.float32  # no float64 copy of the output
    a, b = whole.result(), chunked.result()
    assert math.isnan(b.max_abs_error) and b.nonfinite == 1
    got[1, 2, 7] = ref[1, 2, 7]
    _assert_figures_of_float64(ref, got)


def _assert_figures_of_float64(ref: np.ndarray, got: np.ndarray) -> None:
    """The figures of ref and got as they are equal those of both made float64 whole (to 1e-12 for sums)."""
    whole, given = MetricsAccumulator(), MetricsAccumulator()
    whole.add(ref.astype(np.float64), got.astype(np.float64))
    given.add(ref, got)
    a, b = whole.result(), given.result()
    for field in ("cosine_mean", "cosine_min", "mean_abs_error", "sqnr_db", "max_abs_error"):
        assert getattr(b, field) == pytest.approx(getattr(a, field), rel=1e-12), field
    assert (b.samples, b.argmax_agreement, b.topk_agreement) == (a.samples, a.argmax_agreement, a.topk_agreement)
    assert b.max_abs_error > 0  # the outputs differ: the comparison is not vacuous


def test_float16_outputs_are_compared_as_float32_with_the_figures_of_float64(rng):
    """A float16 model's outputs (a float16 decoder's logits) are made float32, exactly, not float64 (half the
    bytes): every figure is that of the outputs made float64 whole."""
    from onnxq.verify import metrics as metrics_module

    ref = rng.normal(0, 3, (3, 5, 1000)).astype(np.float16)
    got = (ref + rng.normal(0, 0.05, ref.shape)).astype(np.float16)
    assert metrics_module.Operand(ref).values.dtype == np.float32
    _assert_figures_of_float64(ref, got)
