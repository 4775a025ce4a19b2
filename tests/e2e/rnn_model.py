"""An unrolled bidirectional RNN of the shape that strains GPTQ's memory: every time step of each
direction multiplies the step's input by W and the previous state by R, so 4 shared weights are read by 4 × steps
Gemms (80 for 20 steps) — each with its own activation. Built with onnx.helper, as exporters unroll such cells."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["unrolled_rnn", "rnn_inputs"]


def unrolled_rnn(steps: int = 20, width: int = 4096, seed: int = 0) -> onnx.ModelProto:
    """x [batch, steps, width] → y [batch, 2 · width]: h_t = tanh(x_t W + h_(t-1) R) forward and backward, h_0 = 0;
    W_fwd, R_fwd, W_bwd, R_bwd are width × width, scaled so that the states keep their size."""
    rng = np.random.default_rng(seed)
    weights = {name: (rng.standard_normal((width, width)) / np.sqrt(2 * width)).astype(np.float32)
               for name in ("W_fwd", "R_fwd", "W_bwd", "R_bwd")}
    inits = [numpy_helper.from_array(w, name) for name, w in weights.items()]
    inits += [numpy_helper.from_array(np.array(t, np.int64), f"t{t}") for t in range(steps)]
    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    nodes = [helper.make_node("Gather", ["x", "t0"], ["x_first"], axis=1, name="first_step"),
             helper.make_node("Mul", ["x_first", "zero"], ["h0"], name="zero_state")]
    finals = []
    for direction in ("fwd", "bwd"):
        state = "h0"
        order = range(steps) if direction == "fwd" else range(steps - 1, -1, -1)
        for t in order:
            p = f"{direction}{t}"
            nodes += [helper.make_node("Gather", ["x", f"t{t}"], [f"{p}_x"], axis=1, name=f"{p}/x"),
                      helper.make_node("Gemm", [f"{p}_x", f"W_{direction}"], [f"{p}_wx"], name=f"{p}/input/Gemm"),
                      helper.make_node("Gemm", [state, f"R_{direction}"], [f"{p}_rh"], name=f"{p}/state/Gemm"),
                      helper.make_node("Add", [f"{p}_wx", f"{p}_rh"], [f"{p}_sum"], name=f"{p}/Add"),
                      helper.make_node("Tanh", [f"{p}_sum"], [f"{p}_h"], name=f"{p}/Tanh")]
            state = f"{p}_h"
        finals.append(state)
    nodes.append(helper.make_node("Concat", finals, ["y"], axis=1, name="concat"))
    graph = helper.make_graph(nodes, "unrolled_rnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", steps, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2 * width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def rnn_inputs(samples: int, steps: int = 20, width: int = 4096, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((samples, steps, width)).astype(np.float32)
