"""The corpus's second part: outputs that would land on an input or on each other, paths that are not
regular files (FIFOs, devices, folders), unnamed and repeated node names, malformed tensors, values out of range,
and valid models that were refused (small external tensors, sparse weights, fixed batch sizes).

Device paths are reached only through symlinks made in the work folder, and onnxq must refuse them before any
write: nothing here writes outside the test's temporary folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from corpus import (K, N, Case, _external, _good_model, _make_external, _npz, _runs, _two_matmuls, _weight,
                    matmul_model, save)
from onnx import TensorProto, helper, numpy_helper

__all__ = ["CASES"]


def _x(samples: int = 8, seed: int = 7) -> np.ndarray:
    return _weight((samples, K), seed=seed)


def _with_calib(work: Path, *more: str) -> list[str]:
    return [_good_model(work), "--calib", _npz(work, x=_x()), *more]


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


def _link(path: Path, target: str) -> str:
    path.symlink_to(target)
    return str(path)


def _text(work: Path, name: str, text: str | bytes) -> str:
    (work / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(work / name)


def _external_model(work: Path) -> list[str]:
    """m.onnx with its weight in w.bin beside it; returns [model]."""
    return _external(work, "w.bin")


def _quantized_pair(work: Path) -> tuple[str, str, str]:
    """A float model, its quantized form (made by onnxq) and verification data."""
    from onnxq import quantize

    model, data = _good_model(work), _npz(work, x=_x())
    quantize(model, data, output=work / "q_made.onnx")
    return model, str(work / "q_made.onnx"), data


def _other_output_shape(work: Path) -> list[str]:
    """verify on a float model and the quantized form of another model: same input, outputs of another width."""
    from onnxq import quantize

    model, data = _good_model(work), _npz(work, x=_x())
    other = save(matmul_model(_weight((K, 4), seed=8)), work / "other.onnx")
    quantize(other, data, output=work / "q_other.onnx")
    return ["verify", model, str(work / "q_other.onnx"), "--data", data]


def _summaries(work: Path) -> list[str]:
    from onnxq.cli.main import main

    model, data = _good_model(work), _npz(work, x=_x())
    for name in ("s1.json", "s2.json"):
        assert main(["calibrate", model, "--calib", data, "-o", str(work / name)]) == 0
    return [str(work / "s1.json"), str(work / "s2.json")]


def _calib_folder(work: Path, extra: Callable[[Path], None]) -> str:
    folder = work / "calib"
    folder.mkdir()
    np.savez(folder / "a.npz", x=_x())
    extra(folder)
    return str(folder)


# ---- nodes ---------------------------------------------------------------------------------------------------

def _unnamed(work: Path, duplicate: str | None = None) -> str:
    """x → MatMul → Relu → MatMul: no node names, or both MatMuls named `duplicate`."""
    model = _two_matmuls()
    for node in model.graph.node:
        node.name = duplicate if duplicate is not None and node.op_type == "MatMul" else ""
    return save(model, work / "m.onnx")


def _named_nodes(expected_ops: dict[str, int]) -> Callable[[Path], None]:
    """The output runs, and every node has a name of its own."""
    def check(path: Path) -> None:
        _runs(expected_ops)(path)
        names = [n.name for n in onnx.load(str(path)).graph.node]
        assert all(names) and len(set(names)) == len(names), names
    return check


def _newline_node_excluded(work: Path) -> list[str]:
    """The only MatMul, named with a newline, is excluded: "nothing to quantize" quotes its name."""
    model = matmul_model()
    model.graph.node[0].name = "mm\nsecond line"
    return [save(model, work / "m.onnx"), "--exclude-regex", "^mm"]


# ---- tensors -------------------------------------------------------------------------------------------------

def _tensor_model(work: Path, tensor: TensorProto) -> list[str]:
    model = matmul_model()
    model.graph.initializer[0].CopyFrom(tensor)
    return [save(model, work / "m.onnx")]


def _raw(dims, data: bytes, name: str = "w") -> TensorProto:
    """A float tensor with these dims and raw bytes, whether or not they agree (onnx.helper would check)."""
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, raw_data=data)
    tensor.dims.extend(dims)
    return tensor


def _float_data_short() -> TensorProto:
    tensor = helper.make_tensor("w", TensorProto.FLOAT, [K, N], np.ones(K * N, np.float32).tolist())
    del tensor.float_data[-5:]
    return tensor


def _external_location(work: Path, location: str) -> list[str]:
    model = matmul_model()
    _make_external(model.graph.initializer[0], location)
    return [save(model, work / "m.onnx")]


def _external_overflow(work: Path) -> list[str]:
    model = matmul_model()
    raw = _make_external(model.graph.initializer[0], "w.bin")
    (work / "w.bin").write_bytes(raw)
    model.graph.initializer[0].dims[:] = [2**40, 2**40]
    return [save(model, work / "m.onnx")]


def _constant_node_bad_raw(work: Path) -> list[str]:
    const = helper.make_node("Constant", [], ["w"], value=_raw([K, N], b"\0" * 12), name="c")
    model = matmul_model(extra_nodes=[])
    del model.graph.initializer[:]
    model.graph.node.insert(0, const)
    return [save(model, work / "m.onnx")]


# ---- valid models ----------------------------------------------------------------------------------------------

def _small_external(work: Path) -> list[str]:
    """Every tensor external, even the 4-byte bias (onnx's size_threshold=0)."""
    model = _two_matmuls(more_nodes=[helper.make_node("Add", ["z", "b"], ["zb"])],
                         more_inits=[numpy_helper.from_array(np.ones(N, np.float32), "b")],
                         outputs=[helper.make_tensor_value_info("zb", TensorProto.FLOAT, None)])
    onnx.save(model, work / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.onnx.data", size_threshold=0)
    return [str(work / "m.onnx"), "--calib", _npz(work, x=_x())]


def _sparse(work: Path) -> list[str]:
    w = _weight()
    w[np.abs(w) < 0.4] = 0.0  # pruned
    index = np.flatnonzero(w)
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(w.ravel()[index], "w"),
                                       numpy_helper.from_array(index.astype(np.int64), "w_indices"), [K, N])
    model = matmul_model()
    del model.graph.initializer[:]
    model.graph.sparse_initializer.append(sparse)
    return [save(model, work / "m.onnx"), "--calib", _npz(work, x=_x())]


def _fixed_batch(work: Path, batch: int, samples: int) -> list[str]:
    model = matmul_model(x_shape=(batch, K))
    return [save(model, work / "m.onnx"), "--calib", _npz(work, x=_x(samples))]


def _runs_fixed(batch: int) -> Callable[[Path], None]:
    def check(path: Path) -> None:
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert session.run(None, {"x": np.zeros((batch, K), np.float32)})[0].shape == (batch, N)
        ops = {n.op_type for n in onnx.load(str(path)).graph.node}
        assert ops & {"DequantizeLinear", "MatMulInteger"}, ops  # quantized
    return check


def _compressed_calibration(work: Path) -> list[str]:
    np.savez_compressed(work / "d.npz", x=np.tile(_x(1), (4096, 1)))
    return [_good_model(work), "--calib", str(work / "d.npz"), "--calib-samples", "16"]


def _toml(work: Path, text: str) -> str:
    return _text(work, "c.toml", text)


CASES: dict[str, Case] = {
    # -- an output that is an input of the run, or another output
    "report is the input model": Case(lambda w: [_good_model(w), "--report", str(w / "m.onnx")],
                                      "would overwrite the input model"),
    "html is the input model": Case(lambda w: [_good_model(w), "--html", str(w / "m.onnx")],
                                    "would overwrite the input model"),
    "report is the calibration data": Case(lambda w: _with_calib(w, "--report", str(w / "d.npz")),
                                           "would overwrite the calibration data"),
    "output is the calibration data": Case(lambda w: _with_calib(w, "-o", str(w / "d.npz")),
                                           "would overwrite the calibration data"),
    "report is the external data": Case(lambda w: [*_external_model(w), "--report", str(w / "models" / "w.bin")],
                                        "would overwrite the input model's external data"),
    "report is the verification data": Case(lambda w: [_good_model(w), "--verify-data", _npz(w, "v.npz", x=_x()),
                                                       "--report", str(w / "v.npz")],
                                            "would overwrite the verification data"),
    "report is the config file": Case(lambda w: [_good_model(w), "--config", _toml(w, "per_channel = true\n"),
                                                 "--report", str(w / "c.toml")], "would overwrite the config file"),
    "report and html are one file": Case(lambda w: [_good_model(w), "--report", str(w / "r"), "--html", str(w / "r")],
                                         "is also the run's --report"),
    "report is the output": Case(lambda w: [_good_model(w), "--report", str(w / "q.onnx")],
                                 "is also the run's --report"),
    "calibration cache is the output": Case(lambda w: _with_calib(w, "--calib-cache", str(w / "q.onnx")),
                                            "is also the run's calibration cache"),
    "report inside the calibration folder": Case(lambda w: [_good_model(w), "--calib", _calib_folder(w, lambda f: None),
                                                            "--report", str(w / "calib" / "r.npy")],
                                                 "would be read as data"),
    "verify report is the float model": Case(lambda w: (lambda m, q, d: ["verify", m, q, "--data", d, "--report", m])(
        *_quantized_pair(w)), "would overwrite the float model"),
    "verify report is the quantized model": Case(lambda w: (lambda m, q, d: ["verify", m, q, "--data", d, "--report",
                                                                             q])(*_quantized_pair(w)),
                                                 "would overwrite the quantized model"),
    "verify report folder missing": Case(lambda w: (lambda m, q, d: ["verify", m, q, "--data", d, "--report",
                                                                     str(w / "no" / "r.json")])(*_quantized_pair(w)),
                                         "does not exist"),
    "verify on models whose outputs differ in shape": Case(_other_output_shape, "has shape (8, 8) in the float model"),
    "calibrate output is the calibration data": Case(lambda w: ["calibrate", _good_model(w), "--calib",
                                                                _npz(w, x=_x()), "-o", str(w / "d.npz")],
                                                     "would overwrite the calibration data"),
    "calibrate output is the model": Case(lambda w: ["calibrate", _good_model(w), "--calib", _npz(w, x=_x()), "-o",
                                                     str(w / "m.onnx")], "would overwrite the input model"),
    "calibrate output is a folder": Case(lambda w: ["calibrate", _good_model(w), "--calib", _npz(w, x=_x()), "-o",
                                                    str(w)], "is a folder"),
    "merge output is one of the summaries": Case(lambda w: ["merge", *_summaries(w), "-o", str(w / "s1.json")],
                                                 "would overwrite a calibration summary to merge"),
    # -- outputs that are not regular files
    "output is a FIFO": Case(lambda w: [_good_model(w), "-o", _fifo(w / "q.onnx")], "a named pipe (FIFO)"),
    "output is a character device": Case(lambda w: [_good_model(w), "-o", _link(w / "q.onnx", "/dev/null")],
                                         "a character device"),
    "report is a FIFO": Case(lambda w: [_good_model(w), "--report", _fifo(w / "r.json")], "a named pipe (FIFO)"),
    "report is a folder": Case(lambda w: [_good_model(w), "--report", str(w)], "is a folder"),
    "html is a character device": Case(lambda w: [_good_model(w), "--html", _link(w / "r.html", "/dev/null")],
                                       "a character device"),
    "calibration cache is a folder": Case(lambda w: (w / "cache").mkdir() or _with_calib(w, "--calib-cache",
                                                                                         str(w / "cache")),
                                          "is a folder, not a regular file"),
    "calibration cache is a FIFO": Case(lambda w: _with_calib(w, "--calib-cache", _fifo(w / "cache.json")),
                                        "a named pipe (FIFO)"),
    "output name too long": Case(lambda w: [_good_model(w), "-o", str(w / ("a" * 300 + ".onnx"))],
                                 "longer than this file system allows"),
    "report in /proc": Case(lambda w: [_good_model(w), "--report", "/proc/self/onnxq-report.json"], "not writable"),
    # -- inputs that are not regular files
    "model is a FIFO": Case(lambda w: [_fifo(w / "m.onnx")], "a named pipe (FIFO)"),
    "model is a character device": Case(lambda w: [_link(w / "m.onnx", "/dev/zero")], "a character device"),
    "config is a FIFO": Case(lambda w: [_good_model(w), "--config", _fifo(w / "c.toml")], "a named pipe (FIFO)"),
    "config is a folder": Case(lambda w: [_good_model(w), "--config", str(w)], "is a folder"),
    "config is not UTF-8": Case(lambda w: [_good_model(w), "--config", _toml(w, b'mode = "\xff\xfe"\n')],
                                "not UTF-8"),
    "calibration data is a FIFO": Case(lambda w: [_good_model(w), "--calib", _fifo(w / "d.npz")],
                                       "a named pipe (FIFO)"),
    "FIFO in the calibration folder": Case(lambda w: [_good_model(w), "--calib",
                                                      _calib_folder(w, lambda f: _fifo(f / "b.npz"))],
                                           "a named pipe (FIFO)"),
    "folder named like a shard": Case(lambda w: [_good_model(w), "--calib",
                                                 _calib_folder(w, lambda f: (f / "b.npz").mkdir())], "is a folder"),
    "external data is a FIFO": Case(lambda w: (_external(w, "w.bin", write_data=False),
                                               _fifo(w / "models" / "w.bin"))[0], "not a regular file"),
    "verification data is a FIFO": Case(lambda w: [_good_model(w), "--verify-data", _fifo(w / "v.npz")],
                                        "a named pipe (FIFO)"),
    "calibration cache of the wrong types": Case(lambda w: _with_calib(w, "--calib-cache", _text(
        w, "cache.json", '{"format": "onnxq-calibration", "version": 1, "model_fingerprint": "x", "samples": 1, '
                         '"histogram_bins": null, "tensors": [1, 2]}')), "damaged calibration summary"),
    # -- node names
    "unnamed nodes, dynamic": Case(lambda w: [_unnamed(w)], check=_named_nodes({"MatMulInteger": 2})),
    "unnamed nodes, static with sensitivity": Case(lambda w: [_unnamed(w), "--calib", _npz(w, x=_x())],
                                                   check=_named_nodes({"MatMul": 2, "QuantizeLinear": 2})),
    "repeated node names, static": Case(lambda w: [_unnamed(w, "mm"), "--calib", _npz(w, x=_x())],
                                        check=_named_nodes({"MatMul": 2})),
    "repeated node names, 4-bit": Case(lambda w: [_unnamed(w, "mm"), "--weights", "int4"],
                                       check=_named_nodes({"MatMulNBits": 2})),
    "newline in a node name": Case(_newline_node_excluded, "e.g. mm\\nsecond line: name matches"),
    # -- malformed tensors
    "raw_data shorter than its dims": Case(lambda w: _tensor_model(w, _raw([K, N], b"\0" * 16)), "declares shape"),
    "float_data shorter than its dims": Case(lambda w: _tensor_model(w, _float_data_short()), "float_data entries"),
    "dims whose product overflows": Case(lambda w: _tensor_model(w, _raw([2**40, 2**40], b"\0" * 16)), "overflows"),
    "negative dimension": Case(lambda w: _tensor_model(w, _raw([-K, N], b"\0" * 16)), "negative dimension"),
    "absurd dims for the bytes present": Case(lambda w: _tensor_model(w, _raw([100000, 100000], b"\0" * 512)),
                                              "declares shape"),
    "Constant tensor shorter than its dims": Case(_constant_node_bad_raw, "declares shape"),
    "NUL in an external location": Case(lambda w: _external_location(w, "w\0.bin"), "control character"),
    "newline in an external location": Case(lambda w: _external_location(w, "w\n.bin"), "control character"),
    "external tensor dims overflow": Case(_external_overflow, "overflows"),
    "input with a 0 dimension": Case(lambda w: [save(matmul_model(x_shape=(0, K)), w / "m.onnx")],
                                     "0-sized dimension"),
    # -- values
    "--min-cosine 2": Case(lambda w: [_good_model(w), "--min-cosine", "2"], "outside its range [-1, 1]"),
    "--max-abs -1": Case(lambda w: [_good_model(w), "--max-abs", "-1"], "outside its range"),
    "cosine tolerance NaN": Case(lambda w: [_good_model(w), "--tolerance", "cosine=nan"], "must be finite"),
    "TOML tolerance NaN": Case(lambda w: [_good_model(w), "--config",
                                          _toml(w, "[verify.tolerance]\nmin_cosine = nan\n")], "must be finite"),
    "--block 2**40": Case(lambda w: [_good_model(w), "--weights", "int4", "--block", str(2**40)],
                          "outside its range [16, 4096]"),
    "--block not a power of two": Case(lambda w: [_good_model(w), "--weights", "int4", "--block", "48"],
                                       "power of two"),
    "histogram bins huge": Case(lambda w: [_good_model(w), "--config",
                                           _toml(w, "[calibration]\nhistogram_bins = 1000000000\n")],
                                "histogram_bins = 1000000000 is outside"),
    "--calib-samples 0": Case(lambda w: _with_calib(w, "--calib-samples", "0"), "outside its range"),
    "--calib-batch-size 0": Case(lambda w: _with_calib(w, "--calib-batch-size", "0"), "outside its range"),
    "--percentile 0": Case(lambda w: _with_calib(w, "--percentile", "0"), "outside its range (0, 100]"),
    "unknown provider": Case(lambda w: [_good_model(w), "--providers", "tpu"], "unknown execution provider"),
    "tolerance on a missing output": Case(lambda w: [_good_model(w), "--tolerance", "logits:cosine=0.9"],
                                          "which the model does not have; its outputs are: y"),
    "empty calibration path": Case(lambda w: [_good_model(w), "--calib", ""], "--calib: an empty path"),
    "empty output path": Case(lambda w: [_good_model(w), "-o", ""], "--output: an empty path"),
    "empty report path": Case(lambda w: [_good_model(w), "--report", ""], "--report: an empty path"),
    "bad choice": Case(lambda w: [_good_model(w), "--mode", "turbo"], "invalid choice"),
    "unknown flag": Case(lambda w: [_good_model(w), "--frobnicate"], "unknown flag '--frobnicate'"),
    # -- valid models that must quantize
    # The second MatMul + bias Add (2-D) is made one Gemm (passes/fold_matmul_add.py), its bias external too.
    "small external tensors": Case(_small_external, check=_runs({"MatMul": 1, "Gemm": 1})),
    "sparse initializer": Case(_sparse, check=_runs({"MatMul": 1, "DequantizeLinear": 2})),
    "fixed batch 4, 37 samples": Case(lambda w: _fixed_batch(w, 4, 37), check=_runs_fixed(4)),
    "fixed batch 1": Case(lambda w: _fixed_batch(w, 1, 9), check=_runs_fixed(1)),
    "fixed batch 4, dynamic": Case(lambda w: [save(matmul_model(x_shape=(4, K)), w / "m.onnx")],
                                   check=_runs_fixed(4)),
    "compressed calibration, 16 samples read": Case(_compressed_calibration, check=_runs()),
}
