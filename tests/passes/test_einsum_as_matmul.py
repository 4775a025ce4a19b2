"""An Einsum of an activation and a constant weight that is a matrix product becomes a MatMul (with the Transposes and
Reshapes its indices need) computing what ORT's Einsum computes; any other Einsum stays one."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxq.passes.preparation.einsum_as_matmul import einsums_as_matmuls

# equation, activation shape, weight shape, weight first, (Transposes, Reshapes) of the MatMul form
PRODUCTS = {
    "a linear layer": ("bsd,df->bsf", (3, 5, 8), (8, 6), False, (0, 0)),
    "Keras EinsumDense into heads": ("abc,cde->abde", (3, 5, 8), (8, 2, 4), False, (0, 1)),
    "Keras EinsumDense out of heads": ("abcd,cde->abe", (3, 5, 2, 4), (2, 4, 8), False, (0, 1)),
    "a transposed weight, ellipsis": ("...d,fd->...f", (2, 3, 5, 8), (6, 8), False, (0, 0)),
    "the weight first": ("df,bsd->bsf", (3, 5, 8), (8, 6), True, (0, 0)),
    "the output in another order": ("bsd,df->bfs", (3, 5, 8), (8, 6), False, (1, 0)),
    "the summed index not last": ("bds,df->bsf", (3, 8, 5), (8, 6), False, (1, 0)),
    "an implicit output": ("ij,jk", (5, 8), (8, 6), False, (0, 0)),
}
NOT_PRODUCTS = {
    "a batched weight": ("bsd,bdf->bsf", (3, 5, 8), (3, 8, 6)),
    "a weight index summed alone": ("bsd,df->bs", (3, 5, 8), (8, 6)),
    "a diagonal": ("bdd,df->bf", (3, 8, 8), (8, 6)),
}


def _model(equation, x_shape, w, weight_first=False) -> ir.Model:
    inputs = ["w", "x"] if weight_first else ["x", "w"]
    graph = helper.make_graph([helper.make_node("Einsum", inputs, ["y"], equation=equation, name="proj")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ir.serde.deserialize_model(model)


def _run(model: ir.Model, x: np.ndarray) -> np.ndarray:
    proto = ir.serde.serialize_model(model).SerializeToString()
    return ort.InferenceSession(proto, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("case", PRODUCTS)
def test_a_matrix_product_einsum_becomes_a_matmul_computing_the_same(rng, case):
    equation, x_shape, w_shape, weight_first, (transposes, reshapes) = PRODUCTS[case]
    w = rng.normal(0, 1, w_shape).astype(np.float32)
    given = _model(equation, x_shape, w, weight_first)
    rewritten, note = einsums_as_matmuls(given)
    ops = [n.op_type for n in rewritten.graph]
    assert ops.count("MatMul") == 1 and "Einsum" not in ops and note.startswith("1 Einsum node(s)")
    assert (ops.count("Transpose"), ops.count("Reshape")) == (transposes, reshapes)
    assert next(n for n in rewritten.graph if n.op_type == "MatMul").name == "proj"  # the name the user knows
    x = rng.normal(0, 1, x_shape).astype(np.float32)
    np.testing.assert_allclose(_run(rewritten, x), _run(given, x), rtol=1e-5, atol=1e-5)
    assert [n.op_type for n in given.graph] == ["Einsum"]  # the model as given is unchanged


@pytest.mark.parametrize("case", NOT_PRODUCTS)
def test_other_einsums_stay(rng, case):
    equation, x_shape, w_shape = NOT_PRODUCTS[case]
    model = _model(equation, x_shape, rng.normal(0, 1, w_shape).astype(np.float32))
    assert einsums_as_matmuls(model) == (model, None)
