"""What the Python API takes besides paths and protos, as export scripts hand it over: the model's serialized bytes,
one array for a one-input model, a config as a dict of the config file's keys — each the same run as its usual
form; anything else refused with one line naming what to pass (a TypeError or AttributeError before)."""

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from conftest import initializer_bytes

import onnxq
from onnxq.errors import CalibrationDataError, ConfigError, ModelLoadError


@pytest.fixture
def mlp(samples_dir) -> tuple[Path, np.ndarray]:
    data = np.load(samples_dir / "mlp_calib.npz")
    assert list(data) == ["x"]
    return samples_dir / "mlp.onnx", data["x"]


def test_bytes_array_and_dict_config_quantize_as_their_usual_forms(mlp):
    path, x = mlp
    usual = onnxq.quantize(path, {"x": x}, config=onnxq.QuantConfig(gemm_bias="float"))
    given = onnxq.quantize(path.read_bytes(), x, config={"gemm_bias": "float"})
    assert not given.report.verification.failed and not usual.report.verification.failed
    assert initializer_bytes(given.model) == initializer_bytes(usual.model)
    # The JSON report's config runs the same settings again.
    again = onnxq.quantize(path, x, config=json.loads(json.dumps(usual.report.to_dict()))["config"])
    assert initializer_bytes(again.model) == initializer_bytes(usual.model)
    summary = onnxq.calibrate(path.read_bytes(), x, config={"calibration": {"method": "percentile"}})
    assert summary.samples == len(x)
    checked = onnxq.verify(path.read_bytes(), given.model, x, config={"verify": {"holdout_every": 5}})
    assert checked.samples == len(x)
    with pytest.raises(ConfigError, match=r"config is a str"):
        onnxq.verify(path, given.model, x, config="strict")


@pytest.mark.parametrize("model, message", [
    (5, "a model given as int: pass a path, an onnx.ModelProto"),
    (b"hello world", "the bytes given are not a readable ONNX model (DecodeError)"),
    (b"", "the bytes given hold no graph"),
])
def test_models_of_other_kinds_are_refused_in_one_line(mlp, model, message):
    with pytest.raises(ModelLoadError, match=r"^[^\n]*$") as refused:
        onnxq.quantize(model, mlp[1])
    assert message in str(refused.value)


def test_configs_of_other_kinds_are_refused_in_one_line(mlp):
    path, x = mlp
    with pytest.raises(ConfigError, match=r"config is a list: pass an onnxq.QuantConfig or a dict"):
        onnxq.quantize(path, x, config=["mode"])
    with pytest.raises(ConfigError, match=r"^unknown config key 'mdoe' — did you mean 'mode'\?$"):
        onnxq.quantize(path, x, config={"mdoe": "static"})


def test_one_array_for_a_model_of_two_inputs_asks_for_names(rng):
    w = numpy_helper.from_array(rng.normal(0, 1, (8, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("MatMul", ["s", "w"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 8]) for n in ("a", "b", "y")]
    model = helper.make_model(helper.make_graph(nodes, "g", io[:2], io[2:], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CalibrationDataError, match=r"calibration data is one array but the model has 2 inputs "
                                                   r"\(a, b\) — pass a dict of input name → array"):
        onnxq.quantize(model, rng.normal(0, 1, (16, 8)).astype(np.float32))
    with pytest.raises(CalibrationDataError, match=r"item 0 is a ndarray, not a dict of input name → array — key"):
        onnxq.quantize(model, [rng.normal(0, 1, (16, 8)).astype(np.float32)])
