"""blocks.scale_dtype "uint8": block scales stored a byte each on an 8-bit grid per output channel, behind
Cast · Mul · Add that ORT folds at load. ORT computes from them exactly the scales the codes were chosen for —
deployed and under ORT_DISABLE_ALL — the tied table's Gather reads the lm_head's, and the file is smaller."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from decoder_model import genai_decoder, token_windows
from onnx import numpy_helper

import onnxq
from onnxq.io.model_sessions import make_session

INT4 = onnxq.QScheme("int4", symmetric=True)
UINT4 = onnxq.QScheme("uint4", symmetric=False)
_READERS = ("MatMulNBits", "GatherBlockQuantized")


def _decoded_scales(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Each scale input of the block operators, decoded by numpy from its stored codes, step and low:
    float32 Cast(codes) · Cast(step), then + Cast(low), reshaped — as numerics.scale_grid decodes."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producer = {n.output[0]: n for n in model.graph.node}

    def value(name: str) -> np.ndarray:
        if name in inits:
            return inits[name]
        node = producer[name]
        args = [value(i) for i in node.input]
        if node.op_type == "Cast":
            assert node.attribute[0].i == onnx.TensorProto.FLOAT
            return args[0].astype(np.float32)
        if node.op_type == "Mul":
            return (args[0] * args[1]).astype(np.float32)
        if node.op_type == "Add":
            return (args[0] + args[1]).astype(np.float32)
        assert node.op_type == "Reshape", node.op_type
        return args[0].reshape(args[1])

    return {n.input[2]: value(n.input[2]) for n in model.graph.node if n.op_type in _READERS}


def _with_float32_scales(model: onnx.ModelProto, scales: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The same model reading float32 initializers holding the decoded scales instead of their chains."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for name, array in scales.items():
        copy.graph.initializer.append(numpy_helper.from_array(array, f"{name}_float32"))
    for node in copy.graph.node:
        if node.op_type in _READERS:
            node.input[2] = f"{node.input[2]}_float32"
    return copy


def _quantized(source, weights: onnxq.QScheme, scale_dtype: str, data=None) -> onnx.ModelProto:
    config = onnxq.QuantConfig(weights=weights, blocks=onnxq.BlockConfig(scale_dtype=scale_dtype),
                               verify=onnxq.VerifyConfig(enabled=False))
    return ir.serde.serialize_model(onnxq.quantize(source, data, config=config).model)


def _stored_bytes(model: onnx.ModelProto) -> int:
    return sum(numpy_helper.to_array(i).nbytes for i in model.graph.initializer)


def _assert_outputs_equal(a: onnx.ModelProto, b: onnx.ModelProto, feed: dict[str, np.ndarray]) -> None:
    for optimize in (True, False):  # ORT's folded constants, and the chains run at every call
        first = make_session(ir.serde.deserialize_model(a), optimize=optimize).run(None, feed)
        second = make_session(ir.serde.deserialize_model(b), optimize=optimize).run(None, feed)
        assert all(np.array_equal(x, y) for x, y in zip(first, second, strict=True))


def _mlp(rng: np.random.Generator) -> onnx.ModelProto:
    """Two products large enough for a grid to pay (512 channels of 12 blocks, 384 of 16)."""
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"], name="down")], "mlp",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 384])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 384])],
        [numpy_helper.from_array(rng.normal(0, 0.05, (384, 512)).astype(np.float32), "w1"),
         numpy_helper.from_array(rng.normal(0, 0.05, (512, 384)).astype(np.float32), "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("weights", [INT4, UINT4])
def test_the_scales_ort_decodes_are_those_the_codes_were_chosen_for(rng, weights):
    model = _mlp(rng)
    grid, half = _quantized(model, weights, "uint8"), _quantized(model, weights, "float16")
    scales = _decoded_scales(grid)
    inits = {i.name: numpy_helper.to_array(i) for i in grid.graph.initializer}
    codes = [a for name, a in inits.items() if name.endswith("_block_scales_codes")]
    steps = [a for name, a in inits.items() if name.endswith("_block_scales_step")]
    assert len(codes) == len(scales) == 2 and all(a.dtype == np.uint8 for a in codes)
    assert all(a.dtype == np.float16 and a.shape[1] == 1 for a in steps)
    _assert_outputs_equal(grid, _with_float32_scales(grid, scales),
                          {"x": rng.normal(0, 1, (4, 384)).astype(np.float32)})
    # a byte a block instead of two, less each channel's step and low and each Reshape's shape
    saved = sum(c.size - 2 * 2 * len(s) - 8 for c, s in zip(codes, steps, strict=True))
    assert _stored_bytes(half) - _stored_bytes(grid) == saved == 512 * 8 + 384 * 12 - 16


def test_a_model_of_small_weights_keeps_float16_scales(samples_dir):
    """tiny_transformer's products have 2 blocks a channel: a grid would make them larger."""
    grid = _quantized(samples_dir / "tiny_transformer.onnx", INT4, "uint8")
    half = _quantized(samples_dir / "tiny_transformer.onnx", INT4, "float16")
    assert not any(i.name.endswith("_block_scales_codes") for i in grid.graph.initializer)
    assert _stored_bytes(grid) == _stored_bytes(half)


def test_the_tied_table_s_gather_reads_the_lm_head_s_scales_on_their_grid(rng):
    """The genai builder's layout: the Gather reads Transpose(lm_head.weight); one table serves both, its scales
    one grid's codes, reshaped for the Gather — the rows it returns are the lm_head's blocks as ORT decodes them."""
    width, vocab = 256, 1024
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["lm_head.weight"], ["table"], perm=[1, 0], name="embed/Transpose"),
         helper.make_node("Gather", ["table", "input_ids"], ["hidden"], name="embed/Gather"),
         helper.make_node("MatMul", ["hidden", "lm_head.weight"], ["logits"], name="lm_head/MatMul")], "tied",
        [helper.make_tensor_value_info("input_ids", onnx.TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["b", "s", vocab]),
         helper.make_tensor_value_info("hidden", onnx.TensorProto.FLOAT, ["b", "s", width])],
        [numpy_helper.from_array(rng.normal(0, 0.1, (width, vocab)).astype(np.float32), "lm_head.weight")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    grid = _quantized(model, INT4, "uint8")
    gather = next(n for n in grid.graph.node if n.op_type == "GatherBlockQuantized")
    lm_head = next(n for n in grid.graph.node if n.op_type == "MatMulNBits")
    reshapes = {n.output[0]: n.input[0] for n in grid.graph.node if n.op_type == "Reshape"}
    assert reshapes[gather.input[2]] == lm_head.input[2] and reshapes[gather.input[0]] == lm_head.input[1]
    assert sum(i.name.endswith("_block_scales_codes") for i in grid.graph.initializer) == 1
    feed = {"input_ids": np.random.default_rng(1).integers(0, vocab, (2, 8))}
    _assert_outputs_equal(grid, _with_float32_scales(grid, _decoded_scales(grid)), feed)
