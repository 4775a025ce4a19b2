"""com.microsoft Attention (ORT's transformer optimizer's fused Q/K/V) → DynamicQuantizeLinear + QAttention: int8
weights, a scale per column (192 of them), the input quantized at run time; the quantized model within cosine 0.999
of the float one on held-out inputs (measured 0.9999 on this random block), with and without calibration data, on
a saturating target too (its K pairs limited); an Attention QAttention cannot express stays float with why."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model

import onnxq
from onnxq.handlers import plan_model
from onnxq.io.model_sessions import make_session

HIDDEN, SEQ = 64, 16


def _block(rng, attributes=None, bias=True) -> ir.Model:
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", SEQ, HIDDEN])
    mask = ir.val("mask", ir.DataType.INT32, ["batch", SEQ])
    weight = tape.initializer(ir.tensor(rng.normal(0, 0.1, (HIDDEN, 3 * HIDDEN)).astype(np.float32), name="qkv"))
    inputs = [x, weight]
    inputs.append(tape.initializer(ir.tensor(rng.normal(0, 0.1, 3 * HIDDEN).astype(np.float32), name="qkv_bias"))
                  if bias else None)
    y = tape.op("Attention", [*inputs, mask], {"num_heads": 4, **(attributes or {})}, domain="com.microsoft",
                name="attention")
    y.name = "y"
    model = to_model(tape, [x, mask], [y])
    model.graph.opset_imports["com.microsoft"] = 1
    return model


def _feeds(seed, n):
    rng = np.random.default_rng(seed)
    mask = np.ones((n, SEQ), np.int32)
    mask[:, SEQ - 3:] = 0  # padded tokens, as a tokenizer's batch has
    return {"x": rng.normal(0, 1, (n, SEQ, HIDDEN)).astype(np.float32), "mask": mask}


@pytest.mark.parametrize("target, calibrated", [("portable", True), ("portable", False), ("x86-avx2", True)])
def test_attention_becomes_qattention_within_cosine(rng, tmp_path, target, calibrated):
    model = _block(rng)
    config = onnxq.QuantConfig(target=target, verify=onnxq.VerifyConfig(sensitivity_samples=0, measure_speed=False,
                                                                         check_kernels=False))
    result = onnxq.quantize(model, _feeds(1, 32) if calibrated else None, output=tmp_path / "q.onnx",
                            verify_data=_feeds(2, 16), config=config)
    assert [e.name for e in result.report.quantized] == ["attention"]
    quantized = ir.load(tmp_path / "q.onnx")
    ops = [n.op_type for n in quantized.graph]
    assert "Attention" not in ops and ops.count("QAttention") == 1 and "DynamicQuantizeLinear" in ops
    fused = next(n for n in quantized.graph if n.op_type == "QAttention")
    assert ir.convenience.get_const_tensor(fused.inputs[1]).dtype == ir.DataType.INT8
    assert ir.convenience.get_const_tensor(fused.inputs[4]).shape == (3 * HIDDEN,)  # a scale per column
    held = _feeds(3, 16)
    expected = make_session(model, optimize=False).run(None, held)[0]
    got = make_session(quantized, optimize=True).run(None, held)[0]
    cosine = float((expected * got).sum() / np.linalg.norm(expected) / np.linalg.norm(got))
    assert cosine >= 0.999, cosine


@pytest.mark.parametrize("attributes, bias, why", [
    ({"qkv_hidden_sizes": [64, 64, 64]}, True, "no attribute qkv_hidden_sizes"),
    (None, False, "no bias"),
])
def test_an_attention_qattention_cannot_express_stays_float_with_why(rng, attributes, bias, why):
    plans, skips = plan_model(_block(rng, attributes, bias).graph, onnxq.QuantConfig(), "dynamic")
    assert not plans and why in skips[0].reason
