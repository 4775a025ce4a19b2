"""A QDQ MatMul of a 2-D activation whose output an Add of another activation alone reads (an RNN cell's x·Wx +
h·Wh, a residual): ORT's MatMulAddFusion made them one float Gemm before its QDQ fusion, so one product of each such
pair ran as DequantizeLinear + float Gemm. onnxq writes that Add as Sum (passes.formats.separate_matmul_add)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq

K = 32


def _cell(rank: int) -> onnx.ModelProto:
    """tanh(x·Wx + h·Wh), x and h [batch, K] (rank 2) or [batch, 5, K] (rank 3)."""
    shape = ["batch", K] if rank == 2 else ["batch", 5, K]
    weights = [np.random.default_rng(s).normal(0, 0.15, (K, K)).astype(np.float32) for s in (1, 2)]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "wx"], ["xw"], name="x_mm"),
         helper.make_node("MatMul", ["h", "wh"], ["hw"], name="h_mm"),
         helper.make_node("Add", ["xw", "hw"], ["pre"], name="add"), helper.make_node("Tanh", ["pre"], ["y"])], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "h")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(weights[0], "wx"), numpy_helper.from_array(weights[1], "wh")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _data(rank: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shape = (64, K) if rank == 2 else (64, 5, K)
    return {n: rng.normal(0, 1, shape).astype(np.float32) for n in ("x", "h")}


def _deployed_ops(path, tmp_path) -> list[str]:
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]


@pytest.mark.parametrize("rank", [2, 3])
def test_both_products_of_a_cell_run_on_integer_kernels(rank, tmp_path):
    path = tmp_path / "q.onnx"
    report = onnxq.quantize(_cell(rank), _data(rank), output=path).report
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    # Rank 3: ORT fuses no MatMul + Add, so the Add stays.
    assert ops.count("Sum") == (rank == 2) and ops.count("Add") == (rank == 3)
    assert any("Add after a quantized MatMul written as Sum" in n for n in report.notes) == (rank == 2)
    deployed = _deployed_ops(path, tmp_path)
    assert deployed.count("MatMulIntegerToFloat") == 2, deployed
    assert not {"Gemm", "FusedGemm", "DequantizeLinear"} & set(deployed)
    # Measured (seeded, AVX2): cosine 0.9999 to float.
    assert report.verification.outputs[0].metrics.cosine_mean > 0.999 and report.passed


def test_sum_computes_what_add_did(tmp_path):
    """The same quantized model with the Add put back: bit-equal outputs under ORT_DISABLE_ALL."""
    path = tmp_path / "q.onnx"
    onnxq.quantize(_cell(2), _data(2), output=path)
    model = onnx.load(str(path))
    [total] = [n for n in model.graph.node if n.op_type == "Sum"]
    total.op_type = "Add"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    feed = {n: a[:8] for n, a in _data(2).items()}
    with_sum = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    with_add = ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(with_sum, with_add)


@pytest.mark.parametrize("rank", [2, 3])
def test_the_rank_is_read_through_the_quantizelinear_when_the_product_has_no_shape(rank):
    """A transformer's 3-D MatMul → Add(bias) → Gelu keeps its Add (ORT fuses Add + Gelu into BiasGelu there, and no
    MatMul + Add); its product's own shape was not inferred, so the rank comes from the activation behind the Q/DQ."""
    import onnx_ir as ir

    from onnxq.handlers.plan import NodePlan
    from onnxq.passes.formats.separate_matmul_add import separate_matmul_adds

    dims = [4, K] if rank == 2 else [4, 5, K]
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(dims))
    scale, zero = ir.Value(name="s"), ir.Value(name="z")
    quantized = ir.node("QuantizeLinear", [x, scale, zero])
    dequantized = ir.node("DequantizeLinear", [quantized.outputs[0], scale, zero])
    matmul = ir.node("MatMul", [dequantized.outputs[0], ir.Value(name="w")], name="mm")
    add = ir.node("Add", [matmul.outputs[0], ir.Value(name="other")])
    graph = ir.Graph([x, scale, zero], [add.outputs[0]], nodes=[quantized, dequantized, matmul, add])
    assert separate_matmul_adds([NodePlan(matmul, activations=(0,), form="qdq")]) == (["mm"] if rank == 2 else [])
    assert [n.op_type for n in graph][-1] == ("Sum" if rank == 2 else "Add")
