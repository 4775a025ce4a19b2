"""A model that takes one sample per run, with no batch axis (torchvision's detection models take one image
[3, H, W]), read its fixed first dimension as a batch size: data of N samples came back as "shape (3, 3, 320, 320)
but the model expects rank 3 … axis 0 holds the samples" — a shape the user never gave and no way out. Now the line
says what the model takes and how to proceed; a model whose batch axis is a fixed 1, given samples that each carry
it, is told to stack them on it."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.errors import CalibrationDataError


def _model(input_shape: list[int]):
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*input_shape[:-1], 8])],
        [numpy_helper.from_array(np.random.default_rng(0).normal(0, 1, (16, 8)).astype(np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("input_shape, said", [
    ([3, 16], "'x': each sample (3, 16) is all the model takes in one run (float32 [3, 16], no batch axis), and "
              "onnxq feeds samples in batches along a first axis — export the model with a batch axis (a leading "
              "dimension, dynamic or 1), or give one sample and pass --constant-input x to run on that alone"),
    ([1, 16], "'x': each sample (1, 16) carries the model's batch axis of 1 (float32 [1, 16]) — stack the samples on "
              "that axis instead: an array of shape (N, 16), e.g. data.reshape(-1, *data.shape[2:])"),
])
def test_samples_of_the_model_s_whole_input_are_told_what_to_do(rng, tmp_path, input_shape, said):
    data = {"x": rng.normal(0, 1, (10, *input_shape)).astype(np.float32)}
    out = tmp_path / "q.onnx"
    with pytest.raises(CalibrationDataError) as raised:
        onnxq.quantize(_model(input_shape), data, output=out)
    assert str(raised.value) == f"calibration input {said}" and "\n" not in str(raised.value)
    assert not out.exists()


def test_one_sample_held_constant_runs_an_unbatched_model(rng, tmp_path):
    """The way out the line gives: one sample, fed whole."""
    result = onnxq.quantize(_model([3, 16]), {"x": rng.normal(0, 1, (3, 16)).astype(np.float32)},
                            output=tmp_path / "q.onnx", config={"calibration": {"constant_inputs": ["x"]}})
    assert result.report.passed and (tmp_path / "q.onnx").exists()
