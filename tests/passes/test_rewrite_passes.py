"""Structure of the rewritten graphs (static QDQ, dynamic, Gather) and their numbers on real ORT sessions."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import node_named, to_model, weight

from onnxq import QuantConfig
from onnxq.handlers import plan_model
from onnxq.numerics import choose_qparams
from onnxq.passes import InsertDynamicPass, InsertQdqPass
from onnxq.io.model_sessions import make_session


def _two_matmuls_sharing(rng):
    """x feeds two MatMuls that share one weight, and a Gemm with bias; checks sharing and naming."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 8])
    w = weight(tape, rng, "w", (8, 8))
    # A name the builder would otherwise pick: it must choose another, not overwrite this initializer.
    tape.initializer(ir.tensor(np.ones(3, np.float32), name="w_quantized"))
    a = tape.op("MatMul", [x, w], name="mm_a")
    b = tape.op("MatMul", [x, w], name="mm_b")
    s = tape.op("Add", [a, b], name="add")
    s.name = "add_output"
    gw, gb = weight(tape, rng, "gw", (4, 8)), weight(tape, rng, "gb", (4,))
    y = tape.op("Gemm", [s, gw, gb], {"transB": 1}, name="gemm")
    keep = tape.op("Mul", [tape.initializers[1], tape.initializers[1]], name="keep")  # uses w_quantized
    return to_model(tape, [x], [y, keep])


def _static(model, ranges, config=QuantConfig()):
    plans, _ = plan_model(model.graph, config, "static")
    InsertQdqPass(plans, ranges, config)(model)
    return model


def _run(model, feed):
    return make_session(model, optimize=False).run(None, feed)


def test_static_structure_shares_activation_and_weight_quantization(rng):
    model = _two_matmuls_sharing(rng)
    reference = model.clone()
    ranges = {"x": (-3.0, 3.0), "add_output": (-20.0, 20.0)}
    _static(model, ranges)
    ops = [n.op_type for n in model.graph]
    assert ops.count("QuantizeLinear") == 2  # one for x (shared by both MatMuls), one for the Gemm input
    mm_a, mm_b = node_named(model, "mm_a"), node_named(model, "mm_b")
    assert mm_a.inputs[0] is mm_b.inputs[0] and mm_a.inputs[0].producer().op_type == "DequantizeLinear"
    assert mm_a.inputs[1] is mm_b.inputs[1]  # the shared weight is quantized once
    weight_dq = mm_a.inputs[1].producer()
    quantized = weight_dq.inputs[0]
    assert quantized.const_value.dtype == ir.DataType.INT8 and quantized.name != "w_quantized"
    assert weight_dq.attributes["axis"].value == 1
    assert "w" not in model.graph.initializers  # no float copy kept
    assert model.graph.initializers["w_quantized"].const_value.numpy().tolist() == [1.0, 1.0, 1.0]

    x = rng.normal(0, 1, (16, 8)).astype(np.float32)
    expected, got = _run(reference, {"x": x})[0], _run(model, {"x": x})[0]
    assert np.abs(expected - got).max() <= 0.05 * np.abs(expected).max()


def test_gemm_bias_is_int32_with_product_scale(rng):
    model = _two_matmuls_sharing(rng)
    ranges = {"x": (-3.0, 3.0), "add_output": (-20.0, 20.0)}
    original_bias = model.graph.initializers["gb"].const_value.numpy().copy()
    original_weight = model.graph.initializers["gw"].const_value.numpy().copy()
    # Full-range weights (no pair limit, which may widen a channel's scale): s_w is exactly max|w| / 127.
    _static(model, ranges, QuantConfig(target="x86-vnni"))
    gemm = node_named(model, "gemm")
    bias_dq = gemm.inputs[2].producer()
    q_bias, bias_scale = (bias_dq.inputs[i].const_value.numpy() for i in (0, 1))
    assert q_bias.dtype == np.int32 and bias_dq.attributes["axis"].value == 0
    s_x = choose_qparams(-20.0, 20.0, np.uint8, symmetric=False).scale
    s_w = np.abs(original_weight).max(axis=1) / 127  # transB: output features on axis 0
    np.testing.assert_allclose(bias_scale, s_x * s_w, rtol=1e-6)
    np.testing.assert_allclose(q_bias * bias_scale, original_bias, atol=float(bias_scale.max()) / 2 + 1e-7)


def test_int32_bias_overflow_widens_the_weight_scale_until_the_codes_hold(rng):
    """Not left float: ORT's WeightBiasQuantization would quantize a float bias itself and wrap its codes
    (tests/passes/test_bias_scale.py runs both)."""
    model = _two_matmuls_sharing(rng)
    model.graph.initializers["gb"].const_value = ir.tensor(np.full(4, 1e9, np.float32), name="gb")
    config = QuantConfig()
    plans, _ = plan_model(model.graph, config, "static")
    result = InsertQdqPass(plans, {"x": (-1e-3, 1e-3), "add_output": (-1e-3, 1e-3)}, config)(model)
    assert "the weight's scale widened on 4 channel(s)" in result.notes["gemm"]
    bias_dq = node_named(model, "gemm").inputs[2].producer()
    codes = bias_dq.inputs[0].const_value.numpy()
    assert bias_dq.op_type == "DequantizeLinear" and codes.dtype == np.int32
    assert np.all(np.abs(codes.astype(np.int64)) < 2**31 - 1) and np.all(np.abs(codes) > 2**30)
    scale = bias_dq.inputs[1].const_value.numpy().astype(np.float64)
    np.testing.assert_allclose(codes * scale, 1e9, rtol=1e-6)  # the bias as it was, to float32's rounding


def test_dynamic_structure_and_numbers(rng):
    model = _two_matmuls_sharing(rng)
    reference = model.clone()
    plans, _ = plan_model(model.graph, QuantConfig(), "dynamic")
    InsertDynamicPass(plans, QuantConfig())(model)
    ops = [n.op_type for n in model.graph]
    assert ops.count("DynamicQuantizeLinear") == 2 and ops.count("MatMulInteger") == 3
    assert "MatMul" not in ops and "Gemm" not in ops
    assert [o.name for o in model.graph.outputs] == [o.name for o in reference.graph.outputs]
    x = rng.normal(0, 1, (16, 8)).astype(np.float32)
    expected, got = _run(reference, {"x": x})[0], _run(model, {"x": x})[0]
    assert np.abs(expected - got).max() <= 0.05 * np.abs(expected).max()


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_gather_table_becomes_int8_rows_scaled_after_gather(rng, mode):
    tape = ir.tape.Tape()
    ids = ir.val("ids", ir.DataType.INT64, ["batch", "seq"])
    table = weight(tape, rng, "table", (4096, 32))
    y = tape.op("Gather", [table, ids], {"axis": 0}, name="embed")
    y.name = "embedded"
    model = to_model(tape, [ids], [y])
    reference = model.clone()
    config = QuantConfig()
    plans, _ = plan_model(model.graph, config, mode)
    (InsertQdqPass(plans, {}, config) if mode == "static" else InsertDynamicPass(plans, config))(model)
    ops = [n.op_type for n in model.graph]
    assert ops == ["Gather", "Gather", "Unsqueeze", "Cast", "Mul"]
    assert "DequantizeLinear" not in ops  # a DQ of the whole table would run on every call
    assert model.graph.initializers["table_quantized"].const_value.dtype == ir.DataType.INT8
    assert "table" not in model.graph.initializers
    assert model.graph.outputs[0].name == "embedded"
    feed = {"ids": rng.integers(0, 4096, (3, 7))}
    expected, got = _run(reference, feed)[0], _run(model, feed)[0]
    row_max = np.abs(expected).max(axis=-1, keepdims=True)
    assert np.all(np.abs(expected - got) <= row_max / 127 / 2 * (1 + 1e-5))
