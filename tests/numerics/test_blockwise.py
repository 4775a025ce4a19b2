"""Block-wise 4-bit (and 8-bit) weights: packing and scales bit-exact against numpy, ONNX's reference
DequantizeLinear (block_size) and ONNX Runtime's MatMulNBits / GatherBlockQuantized kernels."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxq.numerics.blockwise as blockwise
from onnxq.numerics.blockwise import (dequantize_blockwise, pack_codes, pack_nibbles,
                                      quantize_blockwise, unpack_nibbles)
from onnxq.numerics.gptq import gptq_blockwise


def _model(nodes, inputs, inits, opset=21):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   helper.make_opsetid("com.microsoft", 1)], ir_version=10)


def test_nibbles_pack_low_first_and_round_trip(rng):
    codes = np.array([[1, 2, 15, 0, 7]], np.uint8)
    packed = pack_nibbles(codes)
    assert packed.tolist() == [[0x21, 0x0F, 0x07]]  # first code in the low nibble; odd count padded with 0
    many = rng.integers(0, 16, (3, 4, 32)).astype(np.uint8)
    assert np.array_equal(unpack_nibbles(pack_nibbles(many), 32), many)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_unclipped_codes_are_round_to_nearest_and_the_extreme_is_exact(rng, symmetric, bits):
    w = rng.normal(0, 1, (96, 5)).astype(np.float32)
    q = quantize_blockwise(w, 32, symmetric, clip_ratios=(1.0,), bits=bits)
    top, middle = (1 << bits) - 1, 1 << (bits - 1)
    assert q.codes.shape == (5, 3, 32) and q.codes.max() <= top
    scale = np.repeat(q.scales, 32, axis=1).T  # [K, N]
    zero_point = middle if symmetric else np.repeat(q.zero_points, 32, axis=1).T.astype(np.float32)
    codes = np.clip(np.rint(w / scale) + zero_point, 0, top)
    assert np.array_equal(dequantize_blockwise(q), ((codes - zero_point) * scale).astype(np.float32))
    inside = (codes > 0) & (codes < top)
    assert np.all(np.abs(dequantize_blockwise(q) - w)[inside] <= np.abs(scale[inside]) / 2 * (1 + 1e-6))
    if symmetric:  # each block's largest |w| lands on code 0: (0 - 8) * (m / -8) = m, m / -8 on float16's grid
        blocks = w.T.reshape(5, 3, 32)
        extreme = np.take_along_axis(blocks, np.abs(blocks).argmax(-1)[..., None], -1)[..., 0]
        assert np.array_equal(q.scales, blockwise.on_half_grid(extreme / np.float32(-middle)))
        assert np.all(q.codes.reshape(5, 3, 32).min(axis=-1)[extreme > 0] == 0)
        assert np.allclose(q.scales * -middle, extreme, rtol=2.0 ** -11, atol=0)


def test_scales_lie_on_float16s_grid_where_float16_holds_them(rng):
    """Normal float16 magnitudes are rounded to its grid (so float16 stores them exactly); a scale below its normal
    range or beyond its largest value is left as float32 computed it, and the weight is not half-exact."""
    raw = np.array([0.1, -3.3e-3, 7.1e-5, 1e-7, -2e-9, 7e4, 65504.0, 1.0], np.float32)
    grid = blockwise.on_half_grid(raw)
    normal = np.array([True, True, True, False, False, False, True, True])
    assert np.array_equal(grid[normal], raw[normal].astype(np.float16).astype(np.float32))
    assert np.array_equal(grid[~normal], raw[~normal])
    assert np.all(np.abs(grid - raw) <= np.abs(raw) * 2.0 ** -11)
    assert blockwise.half_exact(grid[normal]) and not blockwise.half_exact(grid)
    for symmetric in (True, False):
        q = quantize_blockwise(rng.normal(0, 0.02, (64, 8)).astype(np.float32), 32, symmetric)
        assert blockwise.half_exact(q.scales)


def test_clip_search_never_worse_than_no_clip_and_importance_is_what_it_minimises(rng):
    w = rng.standard_t(3, (256, 64)).astype(np.float32)  # heavy tails: clipping pays
    importance = rng.uniform(0.01, 10, 256).astype(np.float32)

    def block_error(q, weights=None):
        d = (dequantize_blockwise(q) - w) ** 2
        return (d * (1 if weights is None else weights[:, None])).reshape(8, 32, 64).sum(axis=1)

    plain = quantize_blockwise(w, 32, True, clip_ratios=(1.0,))
    searched = quantize_blockwise(w, 32, True)
    weighted = quantize_blockwise(w, 32, True, importance)
    assert np.all(block_error(searched) <= block_error(plain) * (1 + 1e-6))
    assert block_error(searched).sum() < 0.97 * block_error(plain).sum()  # measured 0.944 with this seed
    assert np.all(block_error(weighted, importance) <= block_error(searched, importance) * (1 + 1e-6))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric,k", [(True, 96), (False, 96), (True, 100), (False, 100)])
def test_dequantize_linear_block_size_reference_is_bit_exact(rng, symmetric, k, bits):
    """The same codes and scales as ONNX's int4 / uint4 (int8 / uint8) DequantizeLinear (opset 21, block_size) give
    the same floats, bit for bit, including a last block shorter than block_size."""
    w = rng.normal(0, 0.05, (k, 24)).astype(np.float32)
    q = quantize_blockwise(w, 32, symmetric, bits=bits)
    codes = q.codes.reshape(q.n, -1)[:, :k].T  # [K, N]
    signed, unsigned = (ml_dtypes.int4, ml_dtypes.uint4) if bits == 4 else (np.int8, np.uint8)
    if symmetric:
        data = [(codes.astype(np.int16) - (1 << (bits - 1))).astype(signed), q.scales.T.copy()]
    else:
        data = [codes.astype(unsigned), q.scales.T.copy(), q.zero_points.T.astype(unsigned)]
    names = ["x", "s", "z"][:len(data)]
    node = helper.make_node("DequantizeLinear", names, ["y"], axis=0, block_size=32)
    inits = [numpy_helper.from_array(a, n) for a, n in zip(data, names)]
    y = ReferenceEvaluator(_model([node], [], inits)).run(None, {})[0]
    assert y.dtype == np.float32 and np.array_equal(y, dequantize_blockwise(q))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_matmulnbits_kernel_matches_the_numpy_reference(rng, symmetric, bits):
    k, n = 100, 24  # K not a multiple of the block: the last block is padded
    w = rng.normal(0, 1, (k, n)).astype(np.float32)
    q = quantize_blockwise(w, 32, symmetric, bits=bits)
    assert q.codes.max() <= (1 << bits) - 1 and (bits == 4 or q.codes.max() > 15)
    inits = [numpy_helper.from_array(pack_codes(q.codes, bits), "b"),
             numpy_helper.from_array(q.scales.reshape(-1), "s")]
    if not symmetric:
        inits.append(numpy_helper.from_array(pack_codes(q.zero_points, bits).reshape(-1), "z"))
    node = helper.make_node("MatMulNBits", ["a", *[t.name for t in inits]], ["y"], domain="com.microsoft", K=k, N=n,
                            bits=bits, block_size=32)
    model = _model([node], [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["M", k])], inits)
    a = rng.normal(0, 1, (7, k)).astype(np.float32)
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    expected = a.astype(np.float64) @ dequantize_blockwise(q).astype(np.float64)
    # float32 accumulation over K = 100 in another order: within 1e-6 of the output's magnitude
    assert np.abs(y - expected).max() <= 1e-6 * np.abs(expected).max() * k


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_gather_block_quantized_rows_are_bit_exact(rng, symmetric, bits):
    table = rng.normal(0, 1, (50, 48)).astype(np.float32)
    q = quantize_blockwise(table.T, 32, symmetric, bits=bits)  # blocks along each row
    inits = [numpy_helper.from_array(pack_codes(q.codes.reshape(50, -1)[:, :48], bits), "d"),
             numpy_helper.from_array(q.scales, "s")]
    if not symmetric:
        inits.append(numpy_helper.from_array(pack_codes(q.zero_points, bits), "z"))
    names = ["d", "i", *[t.name for t in inits[1:]]]
    node = helper.make_node("GatherBlockQuantized", names, ["y"], domain="com.microsoft", gather_axis=0,
                            quantize_axis=1, block_size=32, bits=bits)
    model = _model([node], [helper.make_tensor_value_info("i", TensorProto.INT64, ["B", "S"])], inits)
    idx = rng.integers(0, 50, (3, 7))
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"i": idx})[0]
    assert np.array_equal(y, dequantize_blockwise(q).T[idx])


def test_gptq_with_uncorrelated_channels_is_the_clip_search_itself(rng):
    """H diagonal: no error to spread, so GPTQ's codes and scales are the activation-weighted clip search's."""
    w = rng.normal(0, 1, (100, 16)).astype(np.float32)
    h = np.diag(rng.uniform(0.5, 2.0, 100))
    for symmetric in (True, False):
        for bits in (4, 8):
            g = gptq_blockwise(w, h, 32, symmetric, bits=bits)
            q = quantize_blockwise(w, 32, symmetric, np.diag(h), bits=bits)
            assert g.bits == q.bits == bits
            assert np.array_equal(g.codes, q.codes) and np.array_equal(g.scales, q.scales)


def test_gptq_halves_the_output_error_of_round_to_nearest_on_correlated_activations(rng):
    k, n, rows = 256, 64, 2048
    mixing = rng.normal(0, 0.3, (k, k)) + np.eye(k)
    x = (rng.normal(0, 1, (rows, k)) @ mixing * np.where(rng.random(k) < 0.05, 8, 1)).astype(np.float32)
    w = rng.normal(0, 0.05, (k, n)).astype(np.float32)
    h = x.T.astype(np.float64) @ x / rows

    def output_error(q):
        return np.linalg.norm(x @ dequantize_blockwise(q) - x @ w) / np.linalg.norm(x @ w)

    rtn = output_error(quantize_blockwise(w, 32, True, clip_ratios=(1.0,)))
    gptq = output_error(gptq_blockwise(w, h, 32, True))
    act_order = output_error(gptq_blockwise(w, h, 32, True, act_order=True))
    assert gptq < 0.6 * rtn  # measured 0.045 vs 0.088 with this seed
    assert act_order < 0.95 * gptq  # measured 0.0405


@pytest.mark.parametrize("symmetric,act_order,bits", [(True, False, 4), (False, True, 4), (False, False, 8)])
def test_weights_quantized_a_slice_of_output_channels_at_a_time_are_the_same(rng, monkeypatch, symmetric, act_order,
                                                                            bits):
    """Every output channel is quantized on its own (the clip search per block, GPTQ's error along its row), so
    slices of them (numerics.blockwise.by_rows, what bounds the temporaries of SmolLM2's 49152-row table) give the
    whole weight's result: the clip search exactly; GPTQ up to the BLAS product that spreads a lazy batch's errors,
    whose summation order could differ with the slice's height (equal here; at most 1 code in 1,000 allowed)."""
    k, n = 96, 50
    x = rng.standard_normal((400, k)) * rng.uniform(0.1, 3.0, k)
    x[:, 3] = 0.0  # a channel never active
    moments = x.T @ x / len(x)
    weight = rng.standard_normal((k, n)).astype(np.float32)
    whole = [quantize_blockwise(weight, 32, symmetric, np.diag(moments), bits=bits),
             gptq_blockwise(weight, moments, 32, symmetric, act_order=act_order, bits=bits)]
    monkeypatch.setattr(blockwise, "_ROW_SLICE_BYTES", 8 * k * 7)  # 7 rows a slice: 8 slices, the last of 1 row
    sliced = [quantize_blockwise(weight, 32, symmetric, np.diag(moments), bits=bits),
              gptq_blockwise(weight, moments, 32, symmetric, act_order=act_order, bits=bits)]
    for i, (a, b) in enumerate(zip(whole, sliced)):
        assert b.codes.shape == a.codes.shape and b.k == a.k and b.bits == a.bits
        if i == 0:
            np.testing.assert_array_equal(b.codes, a.codes)
            np.testing.assert_array_equal(b.scales, a.scales)
        else:
            assert np.mean(b.codes != a.codes) <= 1e-3
            np.testing.assert_allclose(b.scales, a.scales, rtol=1e-6)
        assert (a.zero_points is None) == (b.zero_points is None) == symmetric


def test_gptq_on_an_indefinite_hessian_is_the_clip_search_itself(rng):
    """H left indefinite past the damping's reach (float32 accumulation): no error is spread, as for a diagonal H."""
    h = np.eye(64)
    h[0, 1] = h[1, 0] = 5.0  # eigenvalues 6 and -4: past even 100x the damping
    w = rng.normal(0, 1, (64, 8)).astype(np.float32)
    g = gptq_blockwise(w, h, 32, True)
    q = quantize_blockwise(w, 32, True, np.diag(h))
    assert np.array_equal(g.codes, q.codes) and np.array_equal(g.scales, q.scales)


def test_gptq_keeps_the_weights_whose_activations_underflowed(rng):
    """Activations of 1e-24 square to 0 in float32: an XᵀX of zeros says nothing, and GPTQ zeroed every weight as
    if its input were always 0 (a random-init MobileNetV2's classifier: cosine 0.0). Inputs that are 0 beside
    others that are not still have their weights zeroed."""
    w = rng.normal(0, 1, (64, 8)).astype(np.float32)
    g = gptq_blockwise(w, np.zeros((64, 64), np.float32), 32, True)
    np.testing.assert_array_equal(g.codes, quantize_blockwise(w, 32, True).codes)
    h = np.diag(np.r_[np.zeros(32), np.ones(32)]).astype(np.float32)
    assert (dequantize_blockwise(gptq_blockwise(w, h, 32, True))[:32] == 0).all()
