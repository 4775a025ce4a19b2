"""Models with custom operators: refused in one line without their library, quantized around them with it
(--custom-ops / custom_op_libraries), every ONNX Runtime session of the run registering it. The library is
onnxruntime-extensions' (its StftNorm, an audio front end, before two dense layers)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.cli.main import main

EXTENSIONS = "onnxruntime_extensions"


def _audio_model(rng: np.random.Generator) -> onnx.ModelProto:
    """pcm [1, 4096] → StftNorm (ai.onnx.contrib: 129 bins × 33 frames; batch 1 only) → sqrt → two MatMuls."""
    inits = [numpy_helper.from_array(np.array(256, np.int64), "n_fft"),
             numpy_helper.from_array(np.array(128, np.int64), "hop"),
             numpy_helper.from_array(np.hanning(256).astype(np.float32), "window"),
             numpy_helper.from_array(np.array(256, np.int64), "frame"),
             numpy_helper.from_array(rng.normal(0, 0.1, (129, 64)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, (64, 48)).astype(np.float32), "w2")]
    nodes = [helper.make_node("StftNorm", ["pcm", "n_fft", "hop", "window", "frame"], ["spec"], name="stft",
                              domain="ai.onnx.contrib", onesided=1),
             helper.make_node("Transpose", ["spec"], ["frames"], name="frames", perm=[0, 2, 1]),
             helper.make_node("Sqrt", ["frames"], ["magnitude"], name="magnitude"),
             helper.make_node("MatMul", ["magnitude", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["features"], name="fc2")]
    graph = helper.make_graph(nodes, "audio", [helper.make_tensor_value_info("pcm", TensorProto.FLOAT, [1, 4096])],
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 33, 48])], inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17),
                                                                  helper.make_opsetid("ai.onnx.contrib", 1)])


@pytest.fixture
def audio(tmp_path, rng):
    path, data = tmp_path / "audio.onnx", tmp_path / "pcm.npz"
    onnx.save(_audio_model(rng), path)
    np.savez(data, pcm=rng.normal(0, 1, (24, 4096)).astype(np.float32))
    return path, data


def test_a_custom_operator_without_its_library_is_refused_in_one_line(audio, tmp_path, capsys):
    path, data = audio
    out = tmp_path / "q.onnx"
    assert main([str(path), "--calib", str(data), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ai.onnx.contrib::StftNorm" in err[0] and "--custom-ops" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("library", ["no_such_package_here", "lib/missing.so", "not-a-library"])
def test_a_library_that_cannot_be_loaded_is_refused_in_one_line(audio, tmp_path, capsys, library):
    path, data = audio
    if library == "not-a-library":  # a file, but no shared library
        library = str(tmp_path / "notes.so")
        (tmp_path / "notes.so").write_text("not a library\n")
    out = tmp_path / "q.onnx"
    assert main([str(path), "--calib", str(data), "-o", str(out), "--custom-ops", library]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "custom-op library" in err[0] and not out.exists()


def test_the_model_is_quantized_around_the_custom_operator_with_its_library(audio, tmp_path, capsys):
    """Every session (calibration, sensitivity, verification, speed) registers the library: the MatMuls are
    quantized, the custom node is kept as it is, the output file runs with the library; `verify` takes the flag too.
    Measured: cosine 0.9999 (this random model; the bar is the default 0.98)."""
    extensions = pytest.importorskip(EXTENSIONS, reason="onnxruntime-extensions is not installed")
    path, data = audio
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    assert main([str(path), "--calib", str(data), "-o", str(out), "--report", str(report),
                 "--custom-ops", EXTENSIONS]) == 0
    quantized = onnx.load(out)
    assert [n.op_type for n in quantized.graph.node if n.domain == "ai.onnx.contrib"] == ["StftNorm"]
    assert any(n.op_type in ("QuantizeLinear", "DynamicQuantizeLinear") for n in quantized.graph.node)
    options = ort.SessionOptions()
    options.register_custom_ops_library(extensions.get_library_path())
    pcm = np.load(data)["pcm"][:1]
    float_out = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"pcm": pcm})
    quant_out = ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"]).run(None, {"pcm": pcm})
    a, b = float_out[0].ravel(), quant_out[0].ravel()
    assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) >= 0.99
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--data", str(data), "--custom-ops", EXTENSIONS]) == 0
    assert "result: within tolerance" in capsys.readouterr().out


def test_the_python_api_takes_the_library_in_the_config(audio):
    pytest.importorskip(EXTENSIONS, reason="onnxruntime-extensions is not installed")
    path, data = audio
    config = onnxq.QuantConfig(custom_op_libraries=(EXTENSIONS,), verify=onnxq.VerifyConfig(sensitivity_samples=0))
    report = onnxq.quantize(path, data, config=config).report
    assert report.passed and any(e.op_type == "MatMul" for e in report.quantized)
    assert min(o.metrics.cosine_mean for o in report.verification.outputs) >= 0.99


def test_an_operator_the_library_does_not_define_is_refused_in_one_line(tmp_path, rng, capsys):
    pytest.importorskip(EXTENSIONS, reason="onnxruntime-extensions is not installed")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
                               helper.make_node("Mystery", ["h"], ["y"], name="mystery", domain="ai.onnx.contrib")],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(rng.normal(0, 0.1, (64, 32)).astype(np.float32), "w")])
    path, out = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)]), path)
    assert main([str(path), "-o", str(out), "--custom-ops", EXTENSIONS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Mystery" in err[0] and "onnxruntime cannot run the model" in err[0]
    assert not out.exists()
