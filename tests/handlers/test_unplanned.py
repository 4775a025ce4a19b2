"""Nothing skipped in silence: every node holding weights that no planner decided on is a skip
with its reason — an op no planner knows, an op type left out of op_types (the fused ops of ORT's transformer
optimizer, Attention and EmbedLayerNormalization, have planners: handlers/attention.py, embed_layer_norm.py) — and
small constants (a LayerNorm's scales, a shape) are not weights."""

import numpy as np
import onnx_ir as ir
from conftest import to_model

import onnxq
from onnxq.handlers import plan_model


def _fused_block(rng) -> ir.Model:
    """MiniLM's shape after onnxruntime's transformer optimizer: EmbedLayerNormalization (a 300 × 64 table) and
    Attention (64 × 192 QKV weights), then a MatMul, an Add of a [1, 16, 64] positional constant, a LayerNorm."""
    tape = ir.tape.Tape()
    ids = ir.val("ids", ir.DataType.INT32, ["batch", 16])

    def const(name, shape):
        return tape.initializer(ir.tensor(rng.normal(0, 1, shape).astype(np.float32), name=name))

    embedded = tape.op_multi_out("EmbedLayerNormalization", [ids, None, const("word_embeddings", (300, 64)),
                                                   const("position_embeddings", (16, 64)), None,
                                                   const("gamma", (64,)), const("beta", (64,))],
                       domain="com.microsoft", name="embed", num_outputs=2)[0]
    attended = tape.op("Attention", [embedded, const("qkv_weight", (64, 192)), const("qkv_bias", (192,))],
                       {"num_heads": 4}, domain="com.microsoft", name="attention")
    projected = tape.op("MatMul", [attended, const("dense", (64, 64))], name="dense")
    shifted = tape.op("Add", [projected, const("positions", (1, 16, 64))], name="add_positions")
    y = tape.op("LayerNormalization", [shifted, const("ln_scale", (64,)), const("ln_bias", (64,))], name="ln")
    y.name = "y"
    model = to_model(tape, [ids], [y])
    model.graph.opset_imports["com.microsoft"] = 1
    return model


def test_every_node_holding_weights_is_planned_or_said_why_not(rng):
    model = _fused_block(rng)
    plans, skips = plan_model(model.graph, onnxq.QuantConfig(), "static")
    assert [p.node.name for p in plans] == ["embed", "attention", "dense"]
    reasons = {s.node.name: s.reason for s in skips}
    assert set(reasons) == {"add_positions"}  # not the LayerNorm's 64 scales
    assert reasons["add_positions"] == ("onnxq does not quantize Add: its constant input(s) (positions [1, 16, 64]) "
                                        "stay float")
    _, without_matmul = plan_model(model.graph, onnxq.QuantConfig(op_types=("Gemm",)), "static")
    said = {s.node.name: s.reason for s in without_matmul}
    assert said["dense"].startswith("its op type is not in op_types (config)")
    assert said["attention"].startswith("its op type is not in op_types (config)")
    assert "qkv_weight [64, 192]" in said["attention"]
    assert "word_embeddings [300, 64]" in said["embed"]
