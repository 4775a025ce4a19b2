"""A Gemm with transA, alpha or beta is made standard before planning (alpha into the weight, beta into C, A
transposed): the same outputs, and every form quantizes it — dynamic, weight-only and 4-bit forms used to leave it
float ("supports Gemm with transA=0, alpha=beta=1 only"), and ORT ran a static alpha = 0.5 Gemm as DequantizeLinear
+ float Gemm."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.passes.preparation.gemm_standard_form import gemms_in_standard_form
from onnxq.io.model_sessions import make_session

K, N = 64, 32
# (transA, transB, alpha, beta, C: "constant" | "computed" | None)
CASES = {"transA": (1, 0, 1.0, 1.0, "constant"), "alpha-beta": (0, 1, 0.5, 2.0, "constant"),
         "all-computed-C": (1, 1, 1.5, 0.5, "computed"), "no-C": (0, 0, 2.0, 3.0, None)}


def _gemm(rng: np.random.Generator, trans_a: int, trans_b: int, alpha: float, beta: float, c: str | None):
    weight = rng.normal(0, 0.3, (N, K) if trans_b else (K, N)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "W")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [K, "batch"] if trans_a else ["batch", K])]
    nodes, gemm_inputs = [], ["x", "W"]
    if c == "constant":
        inits.append(numpy_helper.from_array(rng.normal(0, 1, N).astype(np.float32), "C"))
        gemm_inputs.append("C")
    elif c == "computed":
        inputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [N]))
        nodes.append(helper.make_node("Relu", ["c"], ["c_relu"], name="relu"))
        gemm_inputs.append("c_relu")
    nodes.append(helper.make_node("Gemm", gemm_inputs, ["y"], name="gemm", transA=trans_a, transB=trans_b,
                                  alpha=alpha, beta=beta))
    graph = helper.make_graph(nodes, "gemm", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _data(rng: np.random.Generator, case: tuple, rows: int) -> dict[str, np.ndarray]:
    x = rng.normal(0, 1, (K, rows) if case[0] else (rows, K)).astype(np.float32)
    data = {"x": x}
    if case[4] == "computed":
        data["c"] = rng.normal(0, 1, N).astype(np.float32)
    return data


@pytest.mark.parametrize("name", CASES)
def test_the_standard_gemm_computes_the_same(rng, name):
    """The clone's outputs equal the model's (ORT without optimizations) within float32 rounding of alpha · B and
    beta · C (relative 1e-5); its Gemm has transA = 0, alpha = beta = 1; the model as given is unchanged."""
    model = ir.from_proto(_gemm(rng, *CASES[name]))
    standard, note = gemms_in_standard_form(model)
    assert standard is not model and "1 Gemm(s)" in note
    gemm = next(node for node in standard.graph if node.op_type == "Gemm")
    assert [gemm.attributes.get(key, ir.AttrFloat32(key, 1.0)).value for key in ("alpha", "beta")] == [1.0, 1.0]
    assert gemm.attributes.get("transA", ir.AttrInt64("transA", 0)).value == 0
    original = next(node for node in model.graph if node.op_type == "Gemm")
    assert original.attributes["alpha"].value == CASES[name][2]
    data = _data(rng, CASES[name], 16)
    want = make_session(model, optimize=False).run(None, data)[0]
    got = make_session(standard, optimize=False).run(None, data)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_standard_gemm_is_left_as_it_is(rng):
    model = ir.from_proto(_gemm(rng, 0, 1, 1.0, 1.0, "constant"))
    assert gemms_in_standard_form(model) == (model, None)


@pytest.mark.parametrize("flags", [{"mode": "dynamic"}, {"mode": "weight-only"},
                                   {"mode": "weight-only", "weights": onnxq.QScheme("int4")}, {}],
                         ids=["dynamic", "weight-only", "int4", "static"])
@pytest.mark.parametrize("name", CASES)
def test_every_form_quantizes_a_nonstandard_gemm(rng, name, flags):
    """Quantized in every form, within cosine 0.99 of float on held-out data (4-bit blocks of 32 on a random Gaussian
    weight: 0.98, measured 0.989–0.998); static runs it on QGemm where C is a constant (alpha = 0.5 ran as float
    Gemm; a computed C is a float bias, which ORT's QDQ Gemm fusion refuses — the report says so)."""
    case = CASES[name]
    model = _gemm(rng, *case)
    config = onnxq.QuantConfig(**flags, verify=onnxq.VerifyConfig(measure_speed=False))
    result = onnxq.quantize(model, _data(rng, case, 64), config=config)
    report = result.report.to_dict()
    assert [node["name"] for node in report["quantized"]] == ["gemm"]
    if not flags and case[4] != "computed":
        placement = report["verification"]["providers"]["CPUExecutionProvider"]["placement"]
        assert placement["quantized"]["gemm"]["op_type"] == "QGemm"
    held_out = _data(rng, case, 32)
    want = make_session(ir.from_proto(model), optimize=False).run(None, held_out)[0]
    got = make_session(result.model, optimize=True).run(None, held_out)[0]
    cosine = float(np.sum(want * got) / np.linalg.norm(want) / np.linalg.norm(got))
    assert cosine >= (0.98 if flags.get("weights") else 0.99)
