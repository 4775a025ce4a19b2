"""Pair-limited int8 weights: no K pair can saturate AVX2's U8S8 kernel, at the least weight error."""

import numpy as np
from conftest import matmul_integer_session

from onnxq.numerics import choose_qparams, quantize
from onnxq.numerics.pairs import limit_pair_sums, pair_sum_violations, quantize_pair_limited


def test_limit_moves_only_violating_pairs_onto_the_limit(rng):
    real = np.clip(rng.normal(0, 60, (9, 40)), -127, 127)  # K = 9: the last row has no partner
    q = np.rint(real).astype(np.int8)
    limited = limit_pair_sums(q, real, k_axis=0)
    bad = pair_sum_violations(q, 0)
    assert bad.sum() > 10 and not pair_sum_violations(limited, 0).any()
    even, odd = limited[0:8:2].astype(int), limited[1:8:2].astype(int)
    np.testing.assert_array_equal(np.abs(even + odd)[bad], 128)  # on the line, not below it
    changed = np.zeros_like(q, dtype=bool)
    changed[0:8:2], changed[1:8:2] = bad, bad
    np.testing.assert_array_equal(limited[~changed], q[~changed])
    np.testing.assert_array_equal(limited[8], q[8])
    # Same result along the other axis.
    np.testing.assert_array_equal(limit_pair_sums(q.T.copy(), real.T, k_axis=1).T, limited)


def test_quantize_pair_limited_beats_both_reduce_range_and_plain_limiting(rng):
    w = rng.normal(0, 1, (64, 32)).astype(np.float32)
    qp = choose_qparams(w.min(0), w.max(0), np.int8, symmetric=True, axis=1)
    q, chosen = quantize_pair_limited(w, qp, k_axis=0)
    assert not pair_sum_violations(q, 0).any()
    assert np.all(chosen.scale >= qp.scale) and np.all(chosen.scale <= 2 * qp.scale * (1 + 1e-6))
    err = ((q * chosen.scale - w) ** 2).sum(0)
    seven_bit = quantize(w, type(qp)(qp.scale * 2, qp.zero_point, 1))
    plain = limit_pair_sums(quantize(w, qp), w / qp.scale, 0)
    assert np.all(err <= ((seven_bit * qp.scale * 2 - w) ** 2).sum(0) * (1 + 1e-6))
    assert np.all(err <= ((plain * qp.scale - w) ** 2).sum(0) * (1 + 1e-6))


def test_pair_limited_weights_are_exact_in_ort_on_adversarial_activations(rng):
    """The proof on ORT's real kernel: activations at 0/255 against the largest same-sign pairs. On AVX2 the
    unlimited weights saturate (checked in tests/verify/test_emulate.py); the limited ones are exact on any CPU."""
    w = rng.normal(0, 1, (1001, 64)).astype(np.float32)
    qp = choose_qparams(w.min(0), w.max(0), np.int8, symmetric=True, axis=1)
    q, _ = quantize_pair_limited(w, qp, k_axis=0)
    a = np.where(q[:, :1].T >= 0, 255, 0).astype(np.uint8).repeat(8, axis=0)  # pushes column 0 to its maximum
    a[4:] = rng.choice([0, 255], size=(4, 1001)).astype(np.uint8)
    for rows in (a[:1], a):  # M = 1 takes MLAS's GEMV path
        got = matmul_integer_session(q).run(None, {"a": rows})[0]
        np.testing.assert_array_equal(got, rows.astype(np.int64) @ q.astype(np.int64))


def test_a_large_weight_is_limited_a_few_channels_at_a_time_with_the_same_result(rng, monkeypatch):
    """Each channel's widening is its own choice: quantized in slices of channels (VGG-19's fc6 whole took 1.3 GB of
    temporaries), the codes and scales are those of the whole, for channels on either axis."""
    import onnxq.numerics.pairs as pairs

    w = (rng.standard_normal((64, 48)) * rng.gamma(0.3, 1, (1, 48))).astype(np.float32)  # heavy channels: limited
    for axis, k_axis in ((1, 0), (0, 1)):
        weight = w if axis == 1 else np.ascontiguousarray(w.T)
        qp = choose_qparams(-np.abs(weight).max(axis=k_axis), np.abs(weight).max(axis=k_axis), np.int8, True, axis)
        whole_q, whole = quantize_pair_limited(weight, qp, k_axis)
        monkeypatch.setattr(pairs, "_CHUNK_VALUES", 64 * 5)  # 5 channels a slice, the last one shorter
        sliced_q, sliced = quantize_pair_limited(weight, qp, k_axis)
        monkeypatch.undo()
        assert not pair_sum_violations(whole_q, k_axis).any()
        assert np.array_equal(sliced_q, whole_q) and np.array_equal(sliced.scale, whole.scale)
        assert sliced.axis == axis and not np.all(whole.scale == qp.scale)  # some channel was widened
