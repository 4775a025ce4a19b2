"""MatMul + Add of a bias on a 2-D activation is made a Gemm before planning, so that ORT runs the quantized
product on QGemm instead of DequantizeLinear + float Gemm (its MatMulAddFusion made a Gemm with a float bias, which
its QDQ Gemm fusion refuses)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.passes.preparation.fold_matmul_add import folded_matmul_adds
from onnxq.io.model_sessions import make_session


def _mlp(rng: np.random.Generator, rank: int = 2):
    shape = ["N", 16] if rank == 2 else ["N", 3, 16]
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 8)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (8, 4)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, (1, 4)).astype(np.float32), "b2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
             helper.make_node("Add", ["b2", "m2"], ["y"], name="add2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:-1], 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_matmul_add_runs_as_qgemm(rng):
    """Both MatMul + Add pairs (bias [N] and [1, N], either Add operand order) become Gemms with int32 biases, and
    ORT runs both on QGemm; held-out outputs within cosine 0.995 of float (measured 0.99756, the same as without the
    fold: the int32 bias is the Add's bias rounded to s_x·s_w, far below the activations' own rounding)."""
    model = _mlp(rng)
    data = {"x": rng.normal(0, 1, (64, 16)).astype(np.float32)}
    result = onnxq.quantize(model, data)
    report = result.report.to_dict()
    assert {n["name"]: n["op_type"] for n in report["quantized"]} == {"mm1": "Gemm", "mm2": "Gemm"}
    assert any("2 MatMul + Add of a bias made one Gemm" in note for note in report["notes"])
    placement = report["verification"]["providers"]["CPUExecutionProvider"]["placement"]
    assert {name: run["op_type"] for name, run in placement["quantized"].items()} == {"mm1": "QGemm", "mm2": "QGemm"}
    held_out = {"x": rng.normal(0, 1, (16, 16)).astype(np.float32)}
    want = make_session(ir.from_proto(model), optimize=False).run(None, held_out)[0]
    got = make_session(result.model, optimize=True).run(None, held_out)[0]
    cosine = float(np.sum(want * got) / np.linalg.norm(want) / np.linalg.norm(got))
    assert cosine >= 0.995


def test_only_rank_two_activations_fold():
    """ORT's fusion (and Gemm) needs a 2-D A: a [N, 3, 16] activation keeps its MatMul + Add."""
    model = ir.from_proto(_mlp(np.random.default_rng(0), rank=3))
    folded, note = folded_matmul_adds(model)
    assert folded is model and note is None


def _flatten_then_linear(rng: np.random.Generator, target_rank: int):
    """x [N, 4, 2, 2] flattened as exporters write it, Reshape(x, Concat(Slice(Shape(x), 0, 1), tail)) at opset 13,
    whose Reshape inference gives the output no shape; then MatMul by [16, 8] and Add of a bias."""
    tail = [16] if target_rank == 2 else [2, 8]
    weight = rng.normal(0, 0.3, (tail[-1], 8)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(tail, np.int64), "tail")]
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Slice", ["shape", "zero", "one"], ["batch"], name="slice"),
             helper.make_node("Concat", ["batch", "tail"], ["target"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"], name="flatten"),
             helper.make_node("MatMul", ["flat", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "flatten_linear",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_computed_flatten_folds_by_the_reshape_rank(rng):
    """The activation's rank comes from the length of the Reshape's shape input ([2]) where ONNX's inference leaves
    it unknown: the pair is made a Gemm and ORT runs QGemm (PP-OCR's direction classifier ran DequantizeLinear +
    float Gemm before); a shape input of length 3 keeps the MatMul + Add."""
    model = _flatten_then_linear(rng, target_rank=2)
    result = onnxq.quantize(model, {"x": rng.normal(0, 1, (64, 4, 2, 2)).astype(np.float32)})
    report = result.report.to_dict()
    assert [(n["name"], n["op_type"]) for n in report["quantized"]] == [("mm", "Gemm")]
    placement = report["verification"]["providers"]["CPUExecutionProvider"]["placement"]
    assert {name: run["op_type"] for name, run in placement["quantized"].items()} == {"mm": "QGemm"}
    three_d = ir.from_proto(_flatten_then_linear(rng, target_rank=3))
    folded, note = folded_matmul_adds(three_d)
    assert folded is three_d and note is None
