"""An autoregressive decoder inside an ONNX Loop, as a table recognizer exports its structure decoder: features
x [batch, 16] → a start state and a per-sample pace; each iteration a MatMul moves the state, a MatMul reads class
scores off it (class 0, the end token, wins once the sample's progress passes 1), a Sigmoid MatMul a box; the Loop
stops when every sample's token is the end token (or after MAX_STEPS). Its outputs — per-step probabilities
[batch, steps, 8] and boxes [batch, steps, 4] — are as long as the slowest sample needs: the data decides the steps.
Weights fixed (seeded); the body's MatMuls read the main graph's constant weights."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

FEATURES, HIDDEN, CLASSES, MAX_STEPS = 16, 32, 8, 40


def _weights(pace_scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {"w_start": rng.normal(0, 0.3, (FEATURES, HIDDEN)).astype(np.float32),
            "w_pace": (rng.normal(0, 0.5, (FEATURES, 1)) * pace_scale).astype(np.float32),
            "w_step": rng.normal(0, 0.25, (HIDDEN, HIDDEN)).astype(np.float32),
            "w_classes": rng.normal(0, 0.6, (HIDDEN, CLASSES)).astype(np.float32),
            "w_box": rng.normal(0, 0.4, (HIDDEN, 4)).astype(np.float32)}


def _body() -> helper.GraphProto:
    nodes = [
        helper.make_node("MatMul", ["h_in", "w_step"], ["h_moved"], name="body_step"),
        helper.make_node("Tanh", ["h_moved"], ["h_out"]),
        helper.make_node("Add", ["s_in", "pace"], ["s_out"]),
        helper.make_node("MatMul", ["h_out", "w_classes"], ["scores"], name="body_classes"),
        # The end token's score: 40 per unit of progress past 1 (a sample ends when it outgrows the others).
        helper.make_node("Sub", ["s_out", "one"], ["past"]),
        helper.make_node("Mul", ["past", "forty"], ["end_score"]),
        helper.make_node("Slice", ["scores", "one_i", "classes_i", "one_i"], ["others"]),
        helper.make_node("Concat", ["end_score", "others"], ["logits"], axis=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["h_out", "w_box"], ["box_raw"], name="body_box"),
        helper.make_node("Sigmoid", ["box_raw"], ["box"]),
        helper.make_node("ArgMax", ["logits"], ["token"], axis=1, keepdims=0),
        helper.make_node("Equal", ["token", "zero_i"], ["ended"]),
        helper.make_node("Not", ["ended"], ["running"]),
        helper.make_node("Cast", ["running"], ["running_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMax", ["running_f"], ["any_running"], keepdims=0),
        helper.make_node("Greater", ["any_running", "half"], ["cond_out"]),
    ]
    return helper.make_graph(
        nodes, "decoder_step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["batch", HIDDEN]),
         helper.make_tensor_value_info("s_in", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["batch", HIDDEN]),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, ["batch", 1]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", CLASSES]),
         helper.make_tensor_value_info("box", TensorProto.FLOAT, ["batch", 4])])


def decoder(pace_scale: float = 1.0, quantized_pace: float | None = None):
    """pace_scale scales the pace weights. quantized_pace: a hand-made quantized form — the pace weight read through a
    DequantizeLinear of int8 codes at this scale (a coarse one moves every sample's pace, so the loop runs a different
    number of steps)."""
    w = _weights(pace_scale)
    constants = {"one": np.float32(1.0), "forty": np.float32(40.0), "half": np.float32(0.5),
                 "zero_i": np.int64(0), "one_i": np.array([1], np.int64),
                 "classes_i": np.array([CLASSES], np.int64), "max_steps": np.int64(MAX_STEPS),
                 "go": np.bool_(True), "pace_low": np.float32(0.06), "pace_range": np.float32(0.2)}
    pace_weight = "w_pace"
    nodes = []
    if quantized_pace is not None:
        codes = np.clip(np.round(w.pop("w_pace") / quantized_pace), -127, 127).astype(np.int8)
        w["w_pace_q"], constants["pace_scale"] = codes, np.float32(quantized_pace)
        nodes.append(helper.make_node("DequantizeLinear", ["w_pace_q", "pace_scale"], ["w_pace_dq"]))
        pace_weight = "w_pace_dq"
    nodes += [
        helper.make_node("MatMul", ["x", "w_start"], ["start_raw"], name="start"),
        helper.make_node("Tanh", ["start_raw"], ["h0"]),
        helper.make_node("MatMul", ["x", pace_weight], ["pace_raw"], name="pace_of"),
        helper.make_node("Sigmoid", ["pace_raw"], ["pace_unit"]),
        helper.make_node("Mul", ["pace_unit", "pace_range"], ["pace_part"]),
        helper.make_node("Add", ["pace_part", "pace_low"], ["pace"]),
        helper.make_node("Mul", ["pace_raw", "zero_f"], ["s0"]),  # zeros [batch, 1]
        helper.make_node("Loop", ["max_steps", "go", "h0", "s0"], ["h_last", "s_last", "probs_steps", "box_steps"],
                         body=_body(), name="decoder"),
        helper.make_node("Transpose", ["probs_steps"], ["structure_probs"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["box_steps"], ["loc_preds"], perm=[1, 0, 2]),
    ]
    constants["zero_f"] = np.float32(0.0)
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in {**w, **constants}.items()]
    graph = helper.make_graph(
        nodes, "loop_decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", FEATURES])],
        [helper.make_tensor_value_info("structure_probs", TensorProto.FLOAT, ["batch", "steps", CLASSES]),
         helper.make_tensor_value_info("loc_preds", TensorProto.FLOAT, ["batch", "steps", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def features(rng: np.random.Generator, count: int) -> np.ndarray:
    return rng.normal(0, 1, (count, FEATURES)).astype(np.float32)
