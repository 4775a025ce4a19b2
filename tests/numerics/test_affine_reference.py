"""quantize/dequantize bit-exact against onnx.reference's QuantizeLinear / DequantizeLinear."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnxq.numerics import QParams, choose_qparams, dequantize, quantize


def _reference(op: str, x: np.ndarray, qp: QParams) -> np.ndarray:
    attrs = {} if qp.axis is None else {"axis": qp.axis}
    x_type = TensorProto.FLOAT if op == "QuantizeLinear" else helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node(op, ["x", "s", "z"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, None)],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                              [onnx.numpy_helper.from_array(qp.scale, "s"),
                               onnx.numpy_helper.from_array(qp.zero_point, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def _ort_quantize(x: np.ndarray, qp: QParams) -> np.ndarray:
    import onnxruntime as ort

    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, None)],
                              [onnx.numpy_helper.from_array(qp.scale, "s"),
                               onnx.numpy_helper.from_array(qp.zero_point, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("dtype,symmetric", [(np.int8, True), (np.int8, False), (np.uint8, False), (np.uint8, True)])
def test_per_tensor_bit_exact(dtype, symmetric, rng):
    x = (rng.normal(0, 2, (64, 33)) * rng.choice([1, 10], (64, 33))).astype(np.float32)
    qp = choose_qparams(-3.0, 2.5, dtype, symmetric)  # narrower than x: exercises saturation
    q = quantize(x, qp)
    np.testing.assert_array_equal(q, _reference("QuantizeLinear", x, qp))
    np.testing.assert_array_equal(dequantize(q, qp), _reference("DequantizeLinear", q, qp))


def test_round_half_to_even_exactly_as_onnx():
    qp = QParams(np.array(1.0, np.float32), np.array(0, np.int8))
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, -128.5, 1e10, -1e10], np.float32)
    q = quantize(x, qp)
    assert q.tolist() == [0, 2, 2, 0, -2, -2, 126, 127, -128, 127, -128]
    # onnx.reference casts to int32 before saturating, so ±1e10 wrap there (a reference bug; the spec and ORT
    # saturate): compare it on the in-range values, and the huge ones against ORT.
    np.testing.assert_array_equal(q[:-2], _reference("QuantizeLinear", x[:-2], qp))
    np.testing.assert_array_equal(q[-2:], _ort_quantize(x[-2:], qp))


@pytest.mark.parametrize("axis", [0, 1])
def test_per_axis_bit_exact(axis, rng):
    w = rng.normal(0, 1, (48, 40)).astype(np.float32)
    reduce = 1 - axis
    qp = choose_qparams(w.min(axis=reduce), w.max(axis=reduce), np.int8, symmetric=True, axis=axis)
    q = quantize(w, qp)
    np.testing.assert_array_equal(q, _reference("QuantizeLinear", w, qp))
    np.testing.assert_array_equal(dequantize(q, qp), _reference("DequantizeLinear", q, qp))
    # Per channel, the largest magnitude maps to ±127.
    assert np.all(np.abs(q.astype(np.int32)).max(axis=reduce) == 127)


@pytest.mark.parametrize("axis,shape", [(None, (64, 33)), (0, (64, 33)), (1, (64, 33)), (-1, (64, 33)),
                                        (0, (20, 3, 5)), (1, (20, 3, 5)), (None, (1, 7))],
                         ids=["tensor", "axis0", "axis1", "axis-1", "conv-axis0", "conv-axis1", "one-row"])
def test_a_large_array_is_quantized_a_piece_at_a_time_bit_exact(axis, shape, rng, monkeypatch):
    """quantize takes a large array a piece of its first axis at a time (here 5 rows' bytes a piece), each piece
    with its own rows' scales along axis 0 or all of them along others: bit-exact with onnx.reference, and
    after_piece called once per piece."""
    import onnxq.numerics.affine as affine

    x = (rng.normal(0, 2, shape) * rng.choice([1, 10], shape)).astype(np.float32)
    monkeypatch.setattr(affine, "_PIECE_BYTES", 5 * x[:1].nbytes)
    channels = 1 if axis is None else shape[axis]
    low, high = -rng.uniform(1, 4, channels).astype(np.float32), rng.uniform(1, 4, channels).astype(np.float32)
    qp = (choose_qparams(float(low[0]), float(high[0]), np.int8, False) if axis is None
          else choose_qparams(low, high, np.uint8, False, axis=axis))
    calls = []
    got = quantize(x, qp, lambda: calls.append(1))
    np.testing.assert_array_equal(got, _reference("QuantizeLinear", x, qp))
    assert len(calls) == -(-shape[0] // 5)
