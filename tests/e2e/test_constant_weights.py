"""Weights that come from Constant nodes (as exporters often write them), or through Identity or a Cast to float32 of
an initializer, are quantized in every mode and format, with and without calibration data, and the result is
verified for real (`--weights int4` included)."""

import numpy as np
import onnx_ir as ir
import pytest

import onnxq

CONFIGS = {"static": {}, "dynamic": {"mode": "dynamic"}, "int4": {"weights": onnxq.QScheme("int4", True)},
           "uint4": {"weights": onnxq.QScheme("uint4", False)}, "weight-only int8": {"mode": "weight-only"},
           "qoperator": {"format": "qoperator"}, "per-token": {"activation_granularity": "per-token"}}


def _constant_weights(rng, source: str = "Constant") -> ir.Model:
    """MatMul and Gemm whose weights come from Constant nodes, or from Identity / Cast(to float) of initializers
    (the Cast's initializer stored float16)."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 64])

    def constant(name, shape):
        array = rng.normal(0, 1, shape).astype(np.float32)
        if source == "Constant":
            return tape.op("Constant", [], attributes={"value": ir.tensor(array, name=name)})
        if source == "Identity":
            return tape.op("Identity", [tape.initializer(ir.tensor(array, name=name))])
        return tape.op("Cast", [tape.initializer(ir.tensor(array.astype(np.float16), name=name))],
                       attributes={"to": ir.DataType.FLOAT})

    h = tape.op("MatMul", [x, constant("w0", (64, 32))], name="mm0")
    y = tape.op("Gemm", [h, constant("w1", (32, 16)), constant("b1", (16,))], name="gemm1")
    y.name = "y"
    graph = ir.Graph([x], [y], nodes=tape.nodes, initializers=tape.initializers, opset_imports={"": 21})
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("with_data", [True, False], ids=["data", "no data"])
@pytest.mark.parametrize("name", CONFIGS)
def test_constant_node_weights_are_quantized_in_every_mode(rng, name, with_data):
    data = {"x": rng.normal(0, 1, (64, 64)).astype(np.float32)} if with_data else None
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(sensitivity_samples=0), **CONFIGS[name])
    report = onnxq.quantize(_constant_weights(rng), data, config=config).report
    assert [e.name for e in report.quantized] == ["mm0", "gemm1"] and not report.left_float
    assert report.passed  # default tolerance: mean cosine ≥ 0.98 on y
    assert report.verification.outputs[0].metrics.cosine_mean >= 0.98


@pytest.mark.parametrize("source", ["Identity", "Cast"])
@pytest.mark.parametrize("name", CONFIGS)
def test_identity_and_cast_weights_are_quantized_in_every_mode(rng, name, source):
    """Identity / Cast(float16 → float) of an initializer: folded into a float32 initializer before planning (said
    in the notes), then quantized like any weight; verified against the model as given."""
    data = {"x": rng.normal(0, 1, (64, 64)).astype(np.float32)}
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(sensitivity_samples=0), **CONFIGS[name])
    model = _constant_weights(rng, source)
    report = onnxq.quantize(model, data if name != "dynamic" else None, config=config).report
    assert [e.name for e in report.quantized] == ["mm0", "gemm1"] and not report.left_float
    assert any(f"3 node(s) computing a constant weight (3 {source}) folded" in n for n in report.notes)
    assert report.passed and report.verification.outputs[0].metrics.cosine_mean >= 0.98
    assert sum(n.op_type == source for n in model.graph) == 3  # the model as given is not changed
