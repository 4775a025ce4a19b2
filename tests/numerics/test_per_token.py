"""Per-token activations: the seed formula, and ORT's result bit-exact against a numpy reference."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model, weight

from onnxq import QuantConfig, VerifyConfig, quantize
from onnxq.numerics.per_token import per_token_quantize
from onnxq.io.model_sessions import make_session


def test_per_token_is_the_seed_formula(rng):
    x = rng.normal(0, 1, (3, 4, 16)).astype(np.float32)
    x[0, 1] = 0.0  # a row of zeros keeps q = 0
    x[2, 3, 5] = 40.0  # an outlier only coarsens its own row
    q, scale = per_token_quantize(x)
    for row, (q_row, s_row) in enumerate(zip(q.reshape(-1, 16), scale.reshape(-1))):
        amax = np.abs(x.reshape(-1, 16)[row]).max()
        expected_scale = np.float32(amax) / np.float32(127) if amax > 0 else np.finfo(np.float32).tiny
        assert s_row == np.float32(expected_scale)
        expected = np.clip(np.round(x.reshape(-1, 16)[row] / np.float32(expected_scale)), -127, 127)  # half even
        np.testing.assert_array_equal(q_row, expected.astype(np.int8))
    assert np.abs(q).max() == 127 and q[0, 1].tolist() == [0] * 16
    # Round half to even: 0.5 and 1.5 and 2.5 steps land on 0, 2, 2.
    q, s = per_token_quantize(np.array([[127.0, 0.5, 1.5, 2.5]], np.float32))
    assert s[0, 0] == 1.0 and q.tolist() == [[127, 0, 2, 2]]


def _model(rng, k=64, n=24, rank=3):
    tape = ir.tape.Tape()
    shape = ["batch", "tokens", k] if rank == 3 else ["rows", k]
    x = ir.val("x", ir.DataType.FLOAT, shape)
    y = tape.op("MatMul", [x, weight(tape, rng, "w", (k, n))], name="mm")
    y.name = "y"
    return to_model(tape, [x], [y])


@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("optimize", [False, True])
def test_ort_per_token_matmul_is_bit_exact_with_numpy(rng, rank, optimize):
    model = _model(rng, rank=rank)
    config = QuantConfig(mode="dynamic", activation_granularity="per-token", verify=VerifyConfig(enabled=False))
    quantized = quantize(model, config=config).model
    ops = [n.op_type for n in quantized.graph]
    assert "MatMulIntegerToFloat" in ops and "QuantizeLinear" in ops and "MatMul" not in ops
    x = rng.normal(0, 1, (2, 7, 64) if rank == 3 else (14, 64)).astype(np.float32)
    x[..., 3] *= 30.0  # an outlier channel
    x.reshape(-1, 64)[4] = 0.0  # a zero row
    got = make_session(quantized, optimize=optimize).run(None, {"x": x})[0]

    inits = quantized.graph.initializers
    w_q = next(v for n, v in inits.items() if n.startswith("w_quantized")).const_value.numpy()
    w_scale = next(v for n, v in inits.items() if n.startswith("w_scale")).const_value.numpy()
    q, row_scale = per_token_quantize(x.reshape(-1, 64))
    accumulated = q.astype(np.int32) @ w_q.astype(np.int32)  # pair-limited weights: no int16 saturation
    expected = (accumulated.astype(np.float32) * w_scale) * row_scale
    np.testing.assert_array_equal(got.reshape(-1, 24), expected)
    assert got.shape == x.shape[:-1] + (24,)
