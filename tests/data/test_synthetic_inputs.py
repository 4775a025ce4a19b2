"""Made-up inputs for a run without data, shaped as the model runs (data.synthetic_shapes): Hugging Face exports
name every dimension (pixel_values [batch_size, num_channels, height, width], attention_mask [batch_size,
past_sequence_length + sequence_length]) and onnxq made 8 of each — 8 channels into an RGB Conv, 64 pixels into a
ViT whose position table wants 224, a cache of 8 past tokens beside a mask of 8: every vision model and every
KV-cache decoder exported by Optimum exited 2 without data."""

import importlib

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.data.specs import input_specs
from onnxq.data.specs import InputSpec
from onnxq.io import load_model
from onnxq.data.synthetic import synthetic_batches
from onnxq.data.synthetic_shapes import shapes_for

_IMAGE = ["batch_size", "num_channels", "height", "width"]


def _patch_model(rng) -> onnx.ModelProto:
    """A ViT's front: the image normalized, 32×32 patches by a Conv, a position table for 224×224 images (7×7
    patches), then a classifier."""
    inits = [numpy_helper.from_array(np.full((1, 3, 1, 1), 0.5, np.float32), "mean"),
             numpy_helper.from_array(rng.normal(0, 0.1, (16, 3, 32, 32)).astype(np.float32), "patch.w"),
             numpy_helper.from_array(np.array([0, 16, -1], np.int64), "tokens"),
             numpy_helper.from_array(rng.normal(0, 0.1, (1, 16, 49)).astype(np.float32), "position"),
             numpy_helper.from_array(rng.normal(0, 0.1, (49, 10)).astype(np.float32), "head.w")]
    nodes = [helper.make_node("Sub", ["pixel_values", "mean"], ["normed"], name="norm"),
             helper.make_node("Conv", ["normed", "patch.w"], ["patches"], kernel_shape=[32, 32], strides=[32, 32],
                              name="patch"),
             helper.make_node("Reshape", ["patches", "tokens"], ["flat"], name="flatten"),
             helper.make_node("Add", ["flat", "position"], ["embedded"], name="position_add"),
             helper.make_node("MatMul", ["embedded", "head.w"], ["logits"], name="head")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, _IMAGE)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", 16, 10])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_an_images_channels_come_from_its_conv_and_its_sides_from_what_the_model_runs_on(rng, tmp_path):
    path = tmp_path / "vit.onnx"
    onnx.save(_patch_model(rng), path)
    model = load_model(path)
    batches = synthetic_batches(model, input_specs(model), count=2)
    # 3 channels from the Conv's weight (through the normalization); 64 pixels make 2×2 patches, not the table's 7×7.
    assert [b["pixel_values"].shape for b in batches] == [(8, 3, 224, 224)] * 2


def test_a_model_without_data_whose_sides_are_named_is_quantized(rng, tmp_path):
    path = tmp_path / "vit.onnx"
    onnx.save(_patch_model(rng), path)
    # Never-slower off: its float batch takes ~0.85 ms, about the 1 ms past which a slower timing sends nodes
    # float — on a loaded machine it did (the test is of the made-up inputs' shapes, not of speed).
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(never_slower=False))
    result = onnxq.quantize(path, output=tmp_path / "q.onnx", config=config)  # exited 2: "Input channels C is …"
    assert result.report.passed and "head" in [e.name for e in result.report.quantized]


def test_one_value_per_dimension_name_and_sums_of_names_are_sums():
    specs = [InputSpec("ids", np.dtype(np.int64), ("batch", "sequence_length")),
             InputSpec("mask", np.dtype(np.int64), ("batch", "past_sequence_length + sequence_length")),
             InputSpec("past", np.dtype(np.float32), ("batch", 2, "past_sequence_length", 4)),
             InputSpec("x", np.dtype(np.float32), (-1, "sequence_length", 5))]
    shapes = shapes_for(specs, {})
    # An image-like float input's later sides get 64, as a CNN's do.
    assert shapes == {"ids": (8, 8), "mask": (8, 72), "past": (8, 2, 64, 4), "x": (8, 8, 5)}
    # An extent sizes the float inputs' open dimensions, and through their names the others'.
    assert shapes_for(specs, {}, extent=32)["mask"] == (8, 64) and shapes_for(specs, {}, extent=32)["ids"] == (8, 32)


def _decoder(rng) -> onnx.ModelProto:
    """A decoder's inputs as Optimum names them: the new keys are the token embeddings, the present cache is the past
    concatenated with them, and the mask must span past and new tokens (it is added to a score of that length)."""
    inits = [numpy_helper.from_array(rng.normal(0, 1, (50, 4)).astype(np.float32), "table"),
             numpy_helper.from_array(np.array([1], np.int64), "one")]
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["embedded"], name="embed"),
             helper.make_node("Unsqueeze", ["embedded", "one"], ["new_keys"], name="heads"),
             helper.make_node("Concat", ["past_key_values.0.key", "new_keys"], ["present.0.key"], axis=2,
                              name="cache"),
             helper.make_node("ReduceSum", ["present.0.key", "axes"], ["score"], keepdims=0, name="score"),
             helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT, name="mask_cast"),
             helper.make_node("Add", ["score", "mask_f"], ["logits"], name="masked")]
    inits.append(numpy_helper.from_array(np.array([1, 3], np.int64), "axes"))
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                       ["batch_size", "past_sequence_length + sequence_length"]),
         helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT,
                                       ["batch_size", 1, "past_sequence_length", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_decoders_cache_mask_and_positions_are_made_as_for_its_first_step(rng, tmp_path):
    path = tmp_path / "decoder.onnx"
    onnx.save(_decoder(rng), path)
    model = load_model(path)
    batch = synthetic_batches(model, input_specs(model), count=1)[0]
    assert batch["past_key_values.0.key"].shape == (8, 1, 0, 4)  # empty: the prefill of a window
    assert batch["attention_mask"].shape == (8, 8) and (batch["attention_mask"] == 1).all()
    assert batch["input_ids"].shape == (8, 8) and batch["input_ids"].max() < 50


@pytest.mark.parametrize("dims", [["n", 3, 64, 64], ["n", "c", "h", "w"]])
def test_a_cnn_keeps_its_first_sizes(rng, dims):
    """No search where the first sizes run: a Conv's input of 64 pixels, as before."""
    w = numpy_helper.from_array(rng.normal(0, 1, (4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                                         ir_version=8))
    assert synthetic_batches(model, input_specs(model), count=1)[0]["x"].shape == (8, 3, 64, 64)


def test_an_input_the_model_fixes_whole_is_made_once_beside_the_samples(rng, tmp_path):
    """A flag [1] beside inputs of open batch (an Optimum merged decoder's use_cache_branch) is held constant: cut
    with the samples, it reached onnxruntime empty ('Got: 0 Expected: 1')."""
    w = numpy_helper.from_array(rng.normal(0, 1, (16, 16)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Cast", ["use_cache_branch"], ["gate"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Mul", ["h", "gate"], ["y"], name="gated")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", 16]),
                                           helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_size", 16])], [w])
    path = tmp_path / "flag.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    model = load_model(path)
    batch = synthetic_batches(model, input_specs(model), count=1)[0]
    assert batch.axes == {"use_cache_branch": None} and batch["use_cache_branch"].shape == (1,)
    report = onnxq.quantize(path, output=tmp_path / "q.onnx").report
    assert report.passed and any("held constant with every batch: use_cache_branch" in n for n in report.notes)


def test_sizes_whose_batch_would_be_huge_are_not_tried(rng, monkeypatch):
    """An image model that runs on no size: the sizes are tried in turn, but not 3000 × 3000 or 16000 × 16000 pixels
    (8 of them would be 0.9 and 24 GB)."""
    synthetic = importlib.import_module("onnxq.data.synthetic")
    built = []
    real = synthetic._batch
    monkeypatch.setattr(synthetic, "_batch", lambda specs, shapes, *a: built.append(shapes["x"]) or real(
        specs, shapes, *a))
    w = numpy_helper.from_array(rng.normal(0, 1, (4, 3, 3, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([0, 7], np.int64), "bad")  # no image makes 7 values a sample
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                               helper.make_node("Reshape", ["c", "bad"], ["y"], name="reshape")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, shape])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                                         ir_version=8))
    synthetic_batches(model, input_specs(model), count=1)
    sides = [shape[-1] for shape in built]
    assert 224 in sides and 1024 in sides and max(sides) == 1024  # every size up to the budget, none past it
