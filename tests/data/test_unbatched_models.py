"""Models that take one sample per run, with no batch axis (torchvision's detection models take one image
[3, H, W]). Their first dimension is not a fixed batch (read as one, data of N samples would come back as "shape
(3, 3, 320, 320) but the model expects rank 3" — a shape the user never gave): the data's shapes say it (rank one
more than the model's, the rest the model's own) and each run is fed one sample, as onnxruntime.quantization's readers
do; data that cannot say it (batches given one by one) gets one line naming the flag."""

import json
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.cli.main import main
from onnxq.errors import CalibrationDataError, ConfigError

UNBATCHED_NOTE = "inputs without a batch axis, fed one sample per run: x"


def _model(input_shape: list[int], extra_input: bool = False):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    if extra_input:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 8]))
        nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"), helper.make_node("Add", ["p", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*input_shape[:-1], 8])],
        [numpy_helper.from_array(np.random.default_rng(0).normal(0, 1, (16, 8)).astype(np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _input_scale(path) -> float:
    model = onnx.load(str(path))
    node = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    init = {i.name: i for i in model.graph.initializer}
    return float(numpy_helper.to_array(init[node.input[1]]))


@pytest.mark.parametrize("input_shape", [[3, 16], [1, 16]])
def test_samples_stacked_on_an_axis_of_their_own_are_fed_one_per_run(rng, tmp_path, input_shape):
    """40 samples of the whole input: 36 calibrate (every 10th held back) and 4 verify, each fed alone; the outputs
    agree with float per sample (cosine >= 0.999 at int8 on a 16-wide product, seeded)."""
    data = rng.normal(0, 1, (40, *input_shape)).astype(np.float32)
    out = tmp_path / "q.onnx"
    result = onnxq.quantize(_model(input_shape), {"x": data}, output=out)
    report = result.report.to_dict()
    assert report["passed"] and report["calibration_samples"] == 36
    assert report["verification"]["samples"] == 4
    assert any(note.startswith(UNBATCHED_NOTE) for note in report["notes"])
    assert report["config"]["calibration"]["unbatched_inputs"] == ("x",)
    schema = json.loads((Path(onnxq.__file__).parent / "report_schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(report)), schema)  # as the --report file holds it
    floated = ort.InferenceSession(_model(input_shape).SerializeToString(), providers=["CPUExecutionProvider"])
    quantized = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for sample in data[:5]:  # the model as saved takes one sample, as it did
        want, got = (s.run(None, {"x": sample})[0].ravel() for s in (floated, quantized))
        assert got.shape == want.shape
        assert np.dot(want, got) / np.linalg.norm(want) / np.linalg.norm(got) >= 0.999


def test_every_sample_is_calibrated_not_only_the_first(rng, tmp_path):
    """minmax: the input's (uint8) scale spans the extremes of every sample calibrated — a peak put in the 28th
    (the 10th, 20th and 30th are held back for verification)."""
    data = rng.uniform(-1, 1, (32, 3, 16)).astype(np.float32)
    data[27, 1, 5] = 25.0
    out = tmp_path / "q.onnx"
    onnxq.quantize(_model([3, 16]), {"x": data}, output=out,
                   config={"calibration": {"method": "minmax", "range_choice": "method"}})
    calibrated = np.delete(data, [9, 19, 29], axis=0)
    assert _input_scale(out) == pytest.approx((25.0 - calibrated.min()) / 255, rel=1e-6)


def test_max_samples_counts_samples_not_rows(rng, tmp_path):
    data = rng.normal(0, 1, (30, 3, 16)).astype(np.float32)
    result = onnxq.quantize(_model([3, 16]), {"x": data}, output=tmp_path / "q.onnx",
                            config={"calibration": {"max_samples": 7}, "verify": {"enabled": False}})
    assert result.report.to_dict()["calibration_samples"] == 7


@pytest.mark.parametrize("input_shape, said", [
    ([3, 16], "'x': each sample (3, 16) is all the model takes in one run (float32 [3, 16], no batch axis) — pass "
              "--unbatched-input x to feed them one per run (TOML [calibration] unbatched_inputs = ['x']), or export "
              "the model with a batch axis"),
    ([1, 16], "'x': each sample (1, 16) carries the model's batch axis of 1 (float32 [1, 16]) — pass "
              "--unbatched-input x to feed them one per run (TOML [calibration] unbatched_inputs = ['x']), or stack "
              "them on that axis: data.reshape(-1, *data.shape[2:])"),
])
def test_batches_given_one_by_one_are_told_the_flag(rng, tmp_path, input_shape, said):
    """An iterable of batches says nothing of its layout before it is read: the line names the flag."""
    batches = [{"x": rng.normal(0, 1, (10, *input_shape)).astype(np.float32)} for _ in range(2)]
    out = tmp_path / "q.onnx"
    with pytest.raises(CalibrationDataError) as raised:
        onnxq.quantize(_model(input_shape), batches, output=out)
    assert str(raised.value) == f"calibration input {said}" and "\n" not in str(raised.value)
    assert not out.exists()


def test_the_flag_feeds_a_reader_s_single_samples_and_stacked_batches(rng, tmp_path):
    """With calibration.unbatched_inputs, a batch given at the model's own rank is one sample (what an
    onnxruntime.quantization reader returns) and one with an axis more is cut into its samples: 12 + 2 x 5."""
    singles = [{"x": rng.normal(0, 1, (3, 16)).astype(np.float32)} for _ in range(12)]
    stacked = [{"x": rng.normal(0, 1, (5, 3, 16)).astype(np.float32)} for _ in range(2)]
    result = onnxq.quantize(_model([3, 16]), singles + stacked, output=tmp_path / "q.onnx",
                            config={"calibration": {"unbatched_inputs": ["x"]}})
    report = result.report.to_dict()
    assert report["passed"] and report["calibration_samples"] + report["verification"]["samples"] == 22


def test_a_sample_of_the_wrong_shape_is_refused_with_the_layout(rng, tmp_path):
    with pytest.raises(CalibrationDataError, match=r"^calibration input 'x' has shape \(3, 15\) but the model "
                                                   r"expects float32 \[3, 16\]; the model has no batch axis"):
        onnxq.quantize(_model([3, 16]), [{"x": rng.normal(0, 1, (3, 15)).astype(np.float32)}],
                       output=tmp_path / "q.onnx", config={"calibration": {"unbatched_inputs": ["x"]}})


def test_unbatched_beside_a_batched_input_is_refused(rng, tmp_path):
    data = {"x": rng.normal(0, 1, (4, 3, 16)).astype(np.float32), "b": rng.normal(0, 1, (4, 8)).astype(np.float32)}
    with pytest.raises(ConfigError, match=r"^input 'x' has no batch axis \(one sample a run\) but 'b' takes its "
                                          r"samples in batches"):
        onnxq.quantize(_model([3, 16], extra_input=True), data, output=tmp_path / "q.onnx",
                       config={"calibration": {"unbatched_inputs": ["x"]}})


def test_an_input_named_twice_is_refused(rng, tmp_path):
    with pytest.raises(ConfigError, match="input 'x' is both in calibration.constant_inputs and in unbatched_inputs"):
        onnxq.quantize(_model([3, 16]), {"x": rng.normal(0, 1, (3, 16)).astype(np.float32)},
                       output=tmp_path / "q.onnx",
                       config={"calibration": {"constant_inputs": ["x"], "unbatched_inputs": ["x"]}})


def test_verify_reads_the_layout_off_the_data(rng, tmp_path):
    data = {"x": rng.normal(0, 1, (12, 3, 16)).astype(np.float32)}
    model = _model([3, 16])
    onnxq.quantize(model, data, output=tmp_path / "q.onnx")
    verification = onnxq.verify(model, tmp_path / "q.onnx", data)
    assert verification.passed and verification.samples == 12


def test_one_sample_held_constant_still_runs_an_unbatched_model(rng, tmp_path):
    result = onnxq.quantize(_model([3, 16]), {"x": rng.normal(0, 1, (3, 16)).astype(np.float32)},
                            output=tmp_path / "q.onnx", config={"calibration": {"constant_inputs": ["x"]}})
    assert result.report.passed and (tmp_path / "q.onnx").exists()


def _image_model():
    """torchvision's detection models' shape of input: one image [3, 8, 8], batched inside the graph."""
    w = np.random.default_rng(1).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Unsqueeze", ["image", "zero"], ["batched"]),
         helper.make_node("Conv", ["batched", "w"], ["features"], name="conv"),
         helper.make_node("Relu", ["features"], ["out"])], "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0], np.int64), "zero")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_the_command_line_and_calibrate_read_it_off_an_npz(rng, tmp_path, capsys):
    model, data, out, cache = (tmp_path / n for n in ("det.onnx", "images.npz", "q.onnx", "cache.json"))
    onnx.save(_image_model(), model)
    np.savez(data, image=rng.uniform(0, 1, (20, 3, 8, 8)).astype(np.float32))
    assert main([str(model), "--calib", str(data), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "inputs without a batch axis, fed one sample per run: image" in printed
    assert "18 samples (+2 held back for verification)" in printed
    assert main(["verify", str(model), str(out), "--data", str(data)]) == 0
    # calibrate reads the layout as quantize does, and takes the flag
    assert main(["calibrate", str(model), "--calib", str(data), "-o", str(cache)]) == 0
    assert "20 samples" in capsys.readouterr().out
    assert main(["calibrate", str(model), "--calib", str(data), "-o", str(tmp_path / "c2.json"), "--unbatched-input",
                 "image"]) == 0
    assert (tmp_path / "c2.json").read_bytes() == cache.read_bytes()
    assert main([str(model), "--calib-cache", str(cache), "-o", str(tmp_path / "q2.onnx"), "--verify-data", str(data),
                 "-q"]) == 0


def test_one_array_for_the_model_s_one_input_is_read_the_same(rng, tmp_path):
    result = onnxq.quantize(_model([3, 16]), rng.normal(0, 1, (20, 3, 16)).astype(np.float32),
                            output=tmp_path / "q.onnx")
    assert result.report.passed and result.report.calibration_samples == 18


def test_stacked_samples_one_dimension_off_say_which(rng, tmp_path):
    """(10, 3, 15) for a model of [3, 16]: not "shape (3, 3, 15) (rank 3)", a batch the user never made."""
    with pytest.raises(CalibrationDataError) as raised:
        onnxq.quantize(_model([3, 16]), {"x": rng.normal(0, 1, (10, 3, 15)).astype(np.float32)},
                       output=tmp_path / "q.onnx")
    assert str(raised.value) == ("calibration input 'x': each sample has shape (3, 15) but the model takes float32 "
                                 "[3, 16] in one run — its dimension 1 is 15, not 16")


def test_an_open_first_axis_is_read_as_a_batch_and_the_line_names_the_flag(rng, tmp_path):
    """A point cloud [points, 16]: its open first axis is no batch's, but nothing says so. Data of one more rank is
    refused with the flag; with it, each run takes one cloud."""
    data = {"x": rng.normal(0, 1, (12, 5, 16)).astype(np.float32)}
    said = (r"model expects rank 2 float32 \[points, 16\]; axis 0 holds the samples — if the model takes one "
            r"sample a run with no batch axis, pass --unbatched-input x$")
    with pytest.raises(CalibrationDataError, match=said):
        onnxq.quantize(_model(["points", 16]), data, output=tmp_path / "q.onnx")
    result = onnxq.quantize(_model(["points", 16]), data, output=tmp_path / "q.onnx",
                            config={"calibration": {"unbatched_inputs": ["x"]}})
    assert result.report.passed and result.report.calibration_samples + result.report.verification.samples == 12
