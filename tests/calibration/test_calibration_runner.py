"""Streamed MinMax calibration against a brute-force numpy reference."""

import numpy as np
import onnx_ir as ir
from conftest import to_model, weight

from onnxq.calibration import collect_observers

from onnxq.data.dataset import iter_batches


def test_minmax_ranges_equal_brute_force_over_all_batches(rng):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 6])
    w = weight(tape, rng, "w", (6, 5))
    h = tape.op("MatMul", [x, w])
    h.name = "h"
    y = tape.op("Relu", [h])
    y.name = "y"
    model = to_model(tape, [x], [y])
    data = rng.normal(0, 2, (37, 6)).astype(np.float32)
    seen = []
    observers = collect_observers(model, ["x", "h", "y"], iter_batches({"x": data}, 8), progress=seen.append)
    ranges = {n: o.range("minmax") for n, o in observers.items()}
    h_ref = data @ w.const_value.numpy()
    assert ranges["x"] == (float(data.min()), float(data.max()))
    np.testing.assert_allclose(ranges["h"], (h_ref.min(), h_ref.max()), rtol=1e-5)
    np.testing.assert_allclose(ranges["y"], (0.0, h_ref.max()), rtol=1e-5)
    assert seen == [8, 8, 8, 8, 5]
    assert [o.name for o in model.graph.outputs] == ["y"]  # the caller's model is not changed


def test_onnx_runtime_s_reason_is_kept_whole_on_one_line(rng, tmp_path, capsys):
    """A batch the model cannot take: ORT names the shapes at fault past its message's first line ("Input
    shape:{8,6}, requested shape:{5,-1}"); the one error line keeps all of it."""
    from onnxq.cli.main import main
    from onnxq.io import save_model

    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 6])
    rows = tape.op("Reshape", [x, tape.initializer(ir.tensor(np.array([5, -1], np.int64), name="shape"))])
    y = tape.op("MatMul", [rows, weight(tape, rng, "w", (6, 4))], name="mm")
    y.name = "y"
    save_model(to_model(tape, [x], [y]), tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=rng.normal(0, 1, (16, 6)).astype(np.float32))
    code = main([str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "d.npz"), "-o", str(tmp_path / "q.onnx")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "ONNX Runtime rejected a calibration batch" in err and "requested shape:{5,-1}" in err
    assert not (tmp_path / "q.onnx").exists()



# onnxruntime 1.31.1's refusal of an opset-27 model, as it was raised (recorded): one line, 780 characters.
_ORT_OPSET_REFUSAL = (
    "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model_load_utils.h:46 void "
    "onnxruntime::model_load_utils::ValidateOpsetForDomain(const std::unordered_map<std::__cxx11::basic_string<char>, "
    "int>&, const onnxruntime::logging::Logger&, bool, const std::string&, int) ONNX Runtime only *guarantees* support "
    "for models stamped with official released onnx opset versions. Opset 27 is under development and support for "
    "this is limited. Current official support for domain ai.onnx is till opset 26.")


def test_onnx_runtime_s_source_location_is_left_out_of_its_reason():
    from onnxq.errors import whole_message

    assert whole_message(RuntimeError(_ORT_OPSET_REFUSAL)) == (
        "[ONNXRuntimeError] : 1 : FAIL : ONNX Runtime only *guarantees* support for models stamped with official "
        "released onnx opset versions. Opset 27 is under development and support for this is limited. Current "
        "official support for domain ai.onnx is till opset 26.")
    kernel = ("Non-zero status code returned while running Gemm node. Name:'fc' Status Message: /onnxruntime_src/"
              "onnxruntime/core/providers/cpu/math/gemm_helper.h:14 onnxruntime::GemmHelper::GemmHelper(const "
              "onnxruntime::TensorShape&, bool, const onnxruntime::TensorShape&, bool, const onnxruntime::"
              "TensorShape&) left.NumDimensions() == 2 || left.NumDimensions() == 1 was false.")
    assert whole_message(RuntimeError(kernel)).endswith(
        "Status Message: left.NumDimensions() == 2 || left.NumDimensions() == 1 was false.")

