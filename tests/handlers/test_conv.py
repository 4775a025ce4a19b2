"""Conv: ORT's kernels measured (K order, saturation), then onnxq's static QDQ (QLinearConv) and dynamic ConvInteger
on small models of every Conv shape (1-D/2-D/3-D, grouped, depthwise, dilated, strided, padded)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.errors import UnsupportedModelError
from onnxq.passes.preparation.steps import prepared
from onnxq.io.model_sessions import make_session
from onnxq.verify.kernels.emulate import SaturationEmulator, this_cpu_saturates

# (name, input shape [N, C, *spatial], weight shape [M, C/group, *kernel], Conv attributes)
SHAPES = [
    ("2d", (2, 8, 9, 9), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("1d_odd_channels", (2, 3, 17), (6, 3, 5), {"strides": [2]}),
    ("3d", (1, 4, 5, 6, 7), (8, 4, 3, 2, 3), {"pads": [1, 0, 1, 1, 1, 0]}),
    ("grouped_dilated", (2, 12, 11, 11), (6, 4, 3, 3), {"group": 3, "dilations": [2, 2], "pads": [2, 1, 2, 1]}),
    ("same_upper_strided", (1, 6, 10, 9), (4, 6, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("depthwise", (2, 8, 10, 10), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
]


def _qdq_conv(x_shape, w: np.ndarray, attrs: dict, x_zero_point: int, y_scale: float):
    """uint8 activation (scale 1) → Conv with the int8 weight (scale 1) → QuantizeLinear(y_scale, 128) →
    DequantizeLinear: the QDQ pattern ORT fuses into QLinearConv."""
    m = w.shape[0]
    inits = [numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.ones(m, np.float32), "ws"),
             numpy_helper.from_array(np.zeros(m, np.int8), "wz"),
             numpy_helper.from_array(np.array(1.0, np.float32), "xs"),
             numpy_helper.from_array(np.array(x_zero_point, np.uint8), "xz"),
             numpy_helper.from_array(np.array(y_scale, np.float32), "ys"),
             numpy_helper.from_array(np.array(128, np.uint8), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv", **attrs),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


@pytest.mark.parametrize("name, x_shape, w_shape, attrs", SHAPES, ids=[s[0] for s in SHAPES])
def test_emulated_qlinearconv_is_orts_kernel(rng, name, x_shape, w_shape, attrs):
    """Adversarial int8 weights (large same-sign values) and uint8 activations near 255: the emulator's AVX2 output
    (im2col with K over (taps, channels), channels fastest; pairs of that order saturate) is ORT's QLinearConv on an
    AVX2 CPU, to within one output step; elsewhere ORT is exact. The depthwise kernel never saturates."""
    w = rng.choice([100, 127, -128, -110, 0], size=w_shape).astype(np.int8)
    x = rng.choice([250, 255, 0, 200], size=x_shape).astype(np.float32)
    coarse = SaturationEmulator(_qdq_conv(x_shape, w, attrs, 3, 1e4), ["y"], base_saturates=False).run({"x": x})[0]
    step = float(np.abs(coarse[0]).max()) / 100  # the output's grid: ±100 steps around zero point 128
    model = _qdq_conv(x_shape, w, attrs, 3, step)
    emulator = SaturationEmulator(model, ["y"], base_saturates=False)
    base, avx2, _ = emulator.run({"x": x})
    assert len(emulator.products) == (0 if name == "depthwise" else 1)
    if name != "depthwise":
        assert emulator.nodes[0].saturated > 0 and avx2 is not None
    here = avx2[0] if avx2 is not None and this_cpu_saturates() else base[0]
    deployed = make_session(model, optimize=True).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(deployed, here, atol=step * 1.01)  # one step: rounding at a tie may differ
    if avx2 is not None:  # the saturation moves outputs by far more than a step: the check above can fail
        assert np.abs(avx2[0] - base[0]).max() > 5 * step


def _cnn(shape, w_shape, attrs, rng, relu=True, pool=True) -> tuple[object, dict]:
    """x → Conv(+bias) → Relu → [MaxPool] → Conv(1×1) → GlobalAveragePool → y: a small CNN of the given first Conv.
    (A Conv whose output is the model's output stays float: onnxq does not requantize model outputs.)"""
    n = len(x_shape := shape) - 2
    w1 = rng.normal(0, 1 / np.sqrt(np.prod(w_shape[1:])), w_shape).astype(np.float32)
    w2 = rng.normal(0, 0.3, (5, w_shape[0], *([1] * n))).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", **attrs)]
    last = "c1"
    if relu:
        nodes.append(helper.make_node("Relu", ["c1"], ["r1"], name="relu1"))
        last = "r1"
    if pool:
        nodes.append(helper.make_node("MaxPool", [last], ["p1"], name="pool1", kernel_shape=[2] * n))
        last = "p1"
    nodes.append(helper.make_node("Conv", [last, "w2", "b2"], ["c2"], name="conv2"))
    nodes.append(helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="gap"))
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(rng.normal(0, 0.1, w_shape[0])
                                                                        .astype(np.float32), "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(np.full(5, 0.05, np.float32), "b2")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          ["N", *x_shape[1:]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    data = {"x": rng.normal(0, 1, (48, *x_shape[1:])).astype(np.float32)}
    return model, data


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum(a * b) / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("name, x_shape, w_shape, attrs", SHAPES, ids=[s[0] for s in SHAPES])
def test_static_conv_runs_as_qlinearconv(tmp_path, rng, name, x_shape, w_shape, attrs):
    """Every Conv shape is planned and verified (cosine ≥ 0.999 on held-out data, measured 0.99995-0.99999), and on
    ORT's CPU both Convs run as QLinearConv: the requantized output after the Relu lets ORT fuse it (and drop the
    Relu); MaxPool between them keeps its input's quantization, so ORT runs it on uint8 (NhwcMaxPool)."""
    model, data = _cnn(x_shape, w_shape, attrs, rng, pool=name in ("2d", "3d"))
    path = tmp_path / "cnn.onnx"

    onnx.save(model, path)
    result = onnxq.quantize(path, data)
    report = result.report.to_dict()
    assert {n["name"] for n in report["quantized"]} == {"conv1", "conv2"}
    assert report["verification"]["passed"]
    held_out = rng.normal(0, 1, (8, *x_shape[1:])).astype(np.float32)
    want = make_session(path, optimize=False).run(None, {"x": held_out})[0]
    got = make_session(result.model, optimize=True).run(None, {"x": held_out})[0]
    assert _cosine(want, got) >= 0.999
    placement = report["verification"]["providers"]["CPUExecutionProvider"]["placement"]
    assert placement["quantized"]["conv1"]["op_type"] == "QLinearConv"
    assert placement["quantized"]["conv2"]["op_type"] == "QLinearConv"
    assert "Relu" not in placement["kernels"] and "MaxPool" not in placement["kernels"]


@pytest.mark.parametrize("name, x_shape, w_shape, attrs", SHAPES, ids=[s[0] for s in SHAPES])
def test_dynamic_conv_runs_as_convinteger(tmp_path, rng, name, x_shape, w_shape, attrs):
    """Dynamic mode with dynamic_conv: DynamicQuantizeLinear → ConvInteger → scales → float bias, no calibration;
    cosine ≥ 0.999 on held-out data (measured ≥ 0.99999). Without it, Conv stays float and says why."""
    model, _ = _cnn(x_shape, w_shape, attrs, rng, pool=name in ("2d", "3d"))
    path = tmp_path / "cnn.onnx"
    onnx.save(model, path)
    with pytest.raises(UnsupportedModelError, match="ConvInteger ran 5.6-7.7x slower"):
        onnxq.quantize(path, None, config=onnxq.QuantConfig(mode="dynamic"))
    result = onnxq.quantize(path, None, config=onnxq.QuantConfig(mode="dynamic", dynamic_conv=True))
    assert sum(n.op_type == "ConvInteger" for n in result.model.graph) == 2
    assert result.report.verification.passed
    held_out = rng.normal(0, 1, (8, *x_shape[1:])).astype(np.float32)
    want = make_session(path, optimize=False).run(None, {"x": held_out})[0]
    got = make_session(result.model, optimize=True).run(None, {"x": held_out})[0]
    assert _cosine(want, got) >= 0.999


def _adversarial_cnn(tmp_path, rng):
    """Positive inputs and Conv weights whose neighbouring input channels are large and of one sign: full-range int8
    weights saturate AVX2's U8S8 pairs on such activations."""
    model, _ = _cnn((1, 16, 8, 8), (8, 16, 3, 3), {"pads": [1, 1, 1, 1]}, rng, pool=False)
    w1 = next(i for i in model.graph.initializer if i.name == "w1")
    values = np.abs(rng.normal(0, 0.1, (8, 16, 3, 3))).astype(np.float32)
    values[:, 0::2] *= 4 * np.sign(rng.normal(size=(8, 1, 1, 1)))
    values[:, 1::2] *= 4 * np.sign(rng.normal(size=(8, 1, 1, 1)))
    w1.CopyFrom(numpy_helper.from_array(values, "w1"))
    path = tmp_path / "adversarial.onnx"
    onnx.save(model, path)
    return path, {"x": rng.uniform(0.5, 1, (32, 16, 8, 8)).astype(np.float32)}


def test_pair_limit_keeps_conv_exact_on_avx2(tmp_path, rng):
    """The default target (portable) limits Conv weights' K pairs in the kernel's order: nothing can saturate, and
    ORT's deployed QLinearConv equals the exact quantization on this CPU. Target x86-vnni keeps full-range weights:
    the emulator finds the saturation (and, on an AVX2 CPU, the deployed kernel shows it)."""
    path, data = _adversarial_cnn(tmp_path, rng)
    off = onnxq.VerifyConfig(enabled=False)
    limited = onnxq.quantize(path, data, config=onnxq.QuantConfig(verify=off)).model
    emulator = SaturationEmulator(limited, ["y"], base_saturates=this_cpu_saturates())
    assert [p.name for p in emulator.products] == ["conv1", "conv2"] and not emulator.risky
    batch = {"x": data["x"][:8]}
    exact = make_session(limited, optimize=False).run(None, batch)[0]
    np.testing.assert_allclose(make_session(limited, optimize=True).run(None, batch)[0], exact,
                               atol=1e-3 * np.abs(exact).max())
    full = onnxq.quantize(path, data, config=onnxq.QuantConfig(target="x86-vnni", verify=off)).model
    emulator = SaturationEmulator(full, ["y"], base_saturates=this_cpu_saturates())
    _, avx2, _ = emulator.run(batch)
    assert "conv1" in [p.name for p in emulator.risky] and emulator.nodes[0].saturated > 0
    full_exact = make_session(full, optimize=False).run(None, batch)[0]
    deployed = make_session(full, optimize=True).run(None, batch)[0]
    if this_cpu_saturates():
        kernel_error, emulation_error = np.abs(deployed - full_exact).max(), np.abs(deployed - avx2[0]).max()
        assert kernel_error > 1e-3 * np.abs(full_exact).max()  # measured: 0.050 of 18.7
        assert emulation_error <= 0.1 * kernel_error  # measured: 0 (bit for bit after requantization)


def test_batchnorm_folded_into_conv(tmp_path, rng):
    """Conv → BatchNormalization → Relu: the BN is folded into the Conv before planning (one Conv quantized, its
    requantized output after the Relu, QLinearConv on ORT), said in the report, and verified against the model as
    given: cosine ≥ 0.999 (measured 0.99998)."""
    model, data = _cnn((2, 8, 9, 9), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, rng)
    graph = model.graph
    conv1 = next(n for n in graph.node if n.name == "conv1")
    conv1.output[0] = "c1_raw"
    stats = [rng.uniform(0.5, 2, 16), rng.normal(0, 0.5, 16), rng.normal(0, 0.5, 16), rng.uniform(0.2, 3, 16)]
    graph.initializer.extend(numpy_helper.from_array(a.astype(np.float32), n)
                             for a, n in zip(stats, ["bn_scale", "bn_b", "bn_mean", "bn_var"]))
    graph.node.insert(1, helper.make_node("BatchNormalization", ["c1_raw", "bn_scale", "bn_b", "bn_mean", "bn_var"],
                                          ["c1"], name="bn1", epsilon=1e-3))
    path = tmp_path / "bn.onnx"
    onnx.save(model, path)
    before = path.read_bytes()
    result = onnxq.quantize(path, data)
    assert path.read_bytes() == before
    assert "BatchNormalization" not in {n.op_type for n in result.model.graph}
    assert any("1 BatchNormalization node(s) folded" in note for note in result.report.notes)
    report = result.report.to_dict()
    assert report["verification"]["passed"]
    placement = report["verification"]["providers"]["CPUExecutionProvider"]["placement"]
    assert placement["quantized"]["conv1"]["op_type"] == "QLinearConv"
    held_out = rng.normal(0, 1, (8, 8, 9, 9)).astype(np.float32)
    want = make_session(path, optimize=False).run(None, {"x": held_out})[0]
    got = make_session(result.model, optimize=True).run(None, {"x": held_out})[0]
    assert _cosine(want, got) >= 0.999


def test_the_folds_leave_nothing_they_replaced(rng):
    """Weights and BatchNormalization statistics held in Constant nodes (as Paddle exports them): the folds replace
    them, and a run that ended with every node float (never-slower on the PP-OCR classifier, which kept all 54 of
    its products float on a Xeon) wrote the replaced Constants too — a file 1.52x the float model's size."""
    model, data = _cnn((2, 8, 9, 9), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, rng)
    graph = model.graph
    next(n for n in graph.node if n.name == "conv1").output[0] = "c1_raw"
    stats = [rng.uniform(0.5, 2, 16), rng.normal(0, 0.5, 16), rng.normal(0, 0.5, 16), rng.uniform(0.2, 3, 16)]
    arrays = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    arrays |= {n: a.astype(np.float32) for a, n in zip(stats, ["bn_scale", "bn_b", "bn_mean", "bn_var"])}
    del graph.initializer[:]
    graph.node.insert(1, helper.make_node("BatchNormalization", ["c1_raw", "bn_scale", "bn_b", "bn_mean", "bn_var"],
                                          ["c1"], name="bn1", epsilon=1e-3))
    for i, (name, array) in enumerate(arrays.items()):
        graph.node.insert(i, helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name)))
    given = ir.from_proto(model)
    ready, notes = prepared(given)
    assert any("1 BatchNormalization node(s) folded" in note for note in notes)
    # conv2's weights stay in their Constants (read); conv1's and the statistics are in the fold's initializers.
    assert [n.op_type for n in ready.graph if n.op_type != "Constant"] == ["Conv", "Relu", "MaxPool", "Conv",
                                                                           "GlobalAveragePool"]
    assert all(v.uses() or v.is_graph_output() for n in ready.graph for v in n.outputs)
    assert sum(n.op_type == "Constant" for n in ready.graph) == 2 and len(ready.graph.initializers) == 2
    assert sum(n.op_type == "Constant" for n in given.graph) == 8  # the model as given is untouched
    x = data["x"][:8]
    want = make_session(given, optimize=False).run(None, {"x": x})[0]
    got = make_session(ready, optimize=False).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # the BN fold is exact up to float rounding


def test_unknown_image_size_gets_synthetic_inputs_a_cnn_can_take(tmp_path, rng):
    """No data at all, an image input declared [-1, 8, ?, ?] (ONNX files write -1 for a dynamic batch): the smoke
    test's synthetic images are 8 × 8 × 64 × 64, which three stride-2 Convs can take (8 pixels could not)."""
    w = [rng.normal(0, 0.2, (8, 8, 3, 3)).astype(np.float32) for _ in range(3)]
    nodes = [helper.make_node("Conv", [x, f"w{i}"], [y], name=f"conv{i}", strides=[2, 2], pads=[1, 1, 1, 1])
             for i, (x, y) in enumerate([("x", "a"), ("a", "b"), ("b", "c")])]
    nodes.append(helper.make_node("GlobalAveragePool", ["c"], ["y"], name="gap"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 8, None, None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, f"w{i}") for i, a in enumerate(w)])
    path = tmp_path / "cnn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    result = onnxq.quantize(path, None, config=onnxq.QuantConfig(mode="dynamic", dynamic_conv=True))
    assert result.report.verification.passed and result.report.verification.samples == 32


def test_conv_writing_a_model_output_stays_float_and_is_no_integer_product(tmp_path, rng):
    """A Conv whose output is the model's keeps it float: ORT runs it as DequantizeLinear + float Conv (said in the
    placement), so the emulator counts no U8S8 product for it."""
    from onnxq.verify.kernels.emulate import integer_products

    model, data = _cnn((2, 8, 9, 9), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, rng)
    graph = model.graph
    graph.node.remove(next(n for n in graph.node if n.name == "gap"))
    graph.output[0].name = "c2"
    path = tmp_path / "open_end.onnx"
    onnx.save(model, path)
    result = onnxq.quantize(path, data)
    assert [p.name for p in integer_products(result.model)] == ["conv1"]
    placement = result.report.to_dict()["verification"]["providers"]["CPUExecutionProvider"]["placement"]
    assert placement["quantized"]["conv2"]["op_type"] == "Conv"
    assert "1 quantized node(s) ran on CPU as DequantizeLinear + float Conv" in placement["findings"]


def _stft_like(after: list, k: int = 16) -> onnx.ModelProto:
    """Conv [batch, 1, 64] → [batch, 2k, t], then `after` (nodes from "c")."""
    w = np.random.default_rng(3).normal(0, 0.3, (2 * k, 1, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="stft", strides=[4]), *after], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0]), "start"),
         numpy_helper.from_array(np.array([k]), "end"), numpy_helper.from_array(np.array([1]), "axis"),
         numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("after, squared", [
    ([helper.make_node("Slice", ["c", "start", "end", "axis"], ["re"]), helper.make_node("Cast", ["re"], ["f"], to=1),
      helper.make_node("Pow", ["f", "two"], ["y"])], True),
    ([helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 1]), helper.make_node("Mul", ["t", "t"], ["y"])], True),
    ([helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Pow", ["r", "two"], ["y"])], False),  # not a layout op
    ([helper.make_node("Pow", ["c", "start"], ["y"])], False),  # exponent 0 (an int64 constant), not 2
])
def test_a_conv_whose_output_is_squared_stays_float(after, squared, tmp_path):
    x = np.random.default_rng(4).normal(0, 1, (24, 1, 64)).astype(np.float32)
    model = _stft_like(after)
    if squared:
        with pytest.raises(onnxq.errors.UnsupportedModelError, match="its output is squared"):
            onnxq.quantize(model, {"x": x}, output=tmp_path / "q.onnx")
    else:
        report = onnxq.quantize(model, {"x": x}, output=tmp_path / "q.onnx").report
        assert [e.name for e in report.quantized] == ["stft"]


@pytest.mark.parametrize("target, hint", [
    ("portable", "(use static mode for Conv: QLinearConv)"),
    # CUDA EP runs no int8 activations either: the mode the line used to name was refused for that target.
    ("cuda", "(nor int8 activations on this target: int8 activations run on CUDA EP as DequantizeLinear + float "
             "MatMul"),
])
def test_a_conv_weight_only_blocks_leave_float_names_the_way_that_quantizes_it(rng, target, hint):
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = {"x": rng.normal(0, 1, (8, 4, 8, 8)).astype(np.float32)}
    with pytest.raises(UnsupportedModelError, match="nothing to quantize") as refused:
        onnxq.quantize(model, data, config=onnxq.QuantConfig(target=target, mode="weight-only"))
    assert hint in str(refused.value)
    if target != "portable":
        assert str(refused.value).endswith(  # no exclude option set: the line does not point there
            "— --target portable quantizes it for CPUs)) — docs/limits.md lists what stays float and why")
