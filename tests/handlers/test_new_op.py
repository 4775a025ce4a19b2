"""A new op is one planner function and its registration (handlers.registry.register): the rewrite forms, the
calibration, the verification and the report take it as they take MatMul. Shown for real with Einsum: a grouped
product of an activation and a constant [groups, K, N] weight ("bgk,gkn->bgn", which the preparation that makes
matrix-product Einsums MatMuls leaves alone: its weight has a batch index), registered by this test only."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model, weight

import onnxq
from onnxq import QuantConfig
from onnxq.handlers import NodePlan, Skip, WeightSpec, register
from onnxq.handlers.plan import constant_float
from onnxq.handlers.registry import unregister


@pytest.fixture
def einsum_planner():
    @register("Einsum")
    def plan_einsum(node, ctx):
        if node.attributes["equation"].as_string().replace(" ", "") != "bgk,gkn->bgn":
            return Skip(node, "only the equation bgk,gkn->bgn (a grouped product) is planned")
        if constant_float(node.inputs[1]) is None:
            return Skip(node, "the second operand is not a float32 constant")
        return NodePlan(node, activations=(0,), weights=(WeightSpec(1, 2 if ctx.per_channel else None),))

    yield
    unregister("Einsum")


def _einsum_model(rng):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 2, 16])
    h = tape.op("Einsum", [x, weight(tape, rng, "w0", (2, 16, 32))], attributes={"equation": "bgk,gkn->bgn"},
                name="einsum0")
    y = tape.op("Einsum", [h, weight(tape, rng, "w1", (2, 8, 32))], attributes={"equation": "bgk,gnk->bgn"},
                name="einsum1")
    h.name, y.name = "h", "y"
    return to_model(tape, [x], [y], opset=17)


def test_a_registered_op_is_quantized_calibrated_and_verified(rng, einsum_planner):
    data = {"x": rng.normal(0, 1, (200, 2, 16)).astype(np.float32)}
    config = QuantConfig(op_types=("MatMul", "Gemm", "Gather", "Einsum"))
    result = onnxq.quantize(_einsum_model(rng), data, config=config)
    report = result.report
    assert [e.name for e in report.quantized] == ["einsum0"]
    assert [(e.name, e.detail) for e in report.left_float] == [
        ("einsum1", "only the equation bgk,gkn->bgn (a grouped product) is planned")]
    assert set(report.ranges) == {"x"}  # calibration observed what the qdq form reads
    producers = {v.producer().op_type for n in result.model.graph if n.name == "einsum0" for v in n.inputs}
    assert producers == {"DequantizeLinear"}
    stored = {v.name: v.const_value.dtype for v in result.model.graph.initializers.values()}
    assert stored["w0_quantized"] == ir.DataType.INT8
    assert report.verification.passed
    assert report.verification.outputs[0].metrics.cosine_mean >= 0.999  # 8-bit, one layer, seeded data
    # Placement reads the op types from the registry: ORT has no integer Einsum, so it says the node ran in float.
    placement = report.verification.cpu.placement
    assert placement.float_fallbacks == ["einsum0"] and placement.integer == []
