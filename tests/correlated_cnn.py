"""A two-Conv CNN over inputs whose channels and neighbouring pixels are strongly correlated (2 smooth latent maps
mixed into 8 channels): where GPTQ's rounding of the Conv weights learns most (tests/handlers/test_conv_rounding.py,
tests/steps/test_escalate.py)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

__all__ = ["correlated_inputs", "two_conv_cnn"]


def correlated_inputs(rng: np.random.Generator, n: int) -> np.ndarray:
    """8 channels mixed from 2 smooth latent maps: strongly correlated across channels and neighbouring pixels."""
    latent = rng.standard_normal((n, 2, 14, 14)).astype(np.float32)
    latent = (latent + np.roll(latent, 1, 2) + np.roll(latent, 1, 3)) / 3
    mix = np.random.default_rng(7).standard_normal((8, 2)).astype(np.float32)
    return np.einsum("cl,nlhw->nchw", mix, latent) + 0.05 * rng.standard_normal((n, 8, 14, 14)).astype(np.float32)


def two_conv_cnn(group: int = 1) -> ir.Model:
    weights = np.random.default_rng(1)
    w1 = weights.normal(0, 0.3, (16, 8 // group, 3, 3)).astype(np.float32)
    w2 = weights.normal(0, 0.3, (6, 16, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0"),
             helper.make_node("Conv", ["r", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], group=group),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="gap")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
