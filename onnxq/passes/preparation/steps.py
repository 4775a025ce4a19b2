"""The float model made ready to plan, each preparation a function (model) → (model or a prepared clone, a note or
None), in order: model-local functions inlined, initializers listed as graph inputs read as constants, an old opset
converted, a float16 model made float32 inside (its float16 inputs and outputs kept), Identity / Cast / layout ops
of weights folded, loop-invariant weights carried through a Loop read as constants, an Einsum that is an activation
× constant matrix product made a MatMul, a kernel = stride ConvTranspose made a 1×1 Conv + DepthToSpace,
BatchNormalization folded into Conv, MatMul + Add of a bias made a Gemm (2-D activations), a Gemm's transA / alpha /
beta made standard. The model as given is never changed; it stays the verification's reference."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.io import LOAD_NOTES
from onnxq.passes.preparation.conv_transpose_as_conv import conv_transposes_as_convs
from onnxq.passes.preparation.einsum_as_matmul import einsums_as_matmuls
from onnxq.passes.preparation.fold_batchnorm import folded_batchnorms
from onnxq.passes.preparation.fold_matmul_add import folded_matmul_adds
from onnxq.passes.preparation.fold_constant_weights import folded_constant_weights
from onnxq.passes.preparation.gemm_standard_form import gemms_in_standard_form
from onnxq.passes.float16.model import computed_in_float32
from onnxq.passes.preparation.initializer_inputs import initializers_as_constants
from onnxq.passes.preparation.inline_functions import inlined_functions
from onnxq.passes.preparation.loop_invariants import captured_loop_invariants
from onnxq.passes.preparation.upgrade import upgraded

__all__ = ["PREPARATIONS", "prepared"]

PREPARATIONS = (inlined_functions, initializers_as_constants, upgraded, computed_in_float32, folded_constant_weights,
                captured_loop_invariants, einsums_as_matmuls, conv_transposes_as_convs, folded_batchnorms,
                folded_matmul_adds, gemms_in_standard_form)


def prepared(model: ir.Model) -> tuple[ir.Model, list[str]]:
    """(the model after every preparation, their notes for the report)."""
    notes, given = [], model
    for preparation in PREPARATIONS:
        result, note = preparation(model)
        if result is not model:  # a prepared clone: clone() drops meta, and the report reads what loading noted
            result.meta[LOAD_NOTES] = model.meta.get(LOAD_NOTES, {})
        model = result
        if note is not None:
            notes.append(note)
    if model is not given:
        # What a fold replaced (a BatchNormalization's parameters, a weight's Constant) goes now, not only where a
        # quantizing rewrite runs: a model that ends with every node float (never-slower) kept them, 1.5x float.
        RemoveUnusedNodesPass()(model)
    return model, notes
