"""MatMul / Gemm inside If branches and Loop bodies, nested too: planned per body in the run's
mode (static: calibration observes a body's values through its outputs, tests/calibration/test_body_values.py),
rewritten as a model of its own, the outer float weights they read dropped; ORT runs every body's product on an
integer kernel."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.io.irquery import model_names

K = 32


def _w(seed: int, shape=(K, K)) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.3, shape).astype(np.float32)


def _model() -> onnx.ModelProto:
    """y = x·W0; if (flag) y·W_then (outer weight) else Gemm(y, W_else, b) (the branch's own initializer); then a
    Loop of 2 steps whose body holds an If (nested) with a MatMul on a Constant-node weight."""
    inner = helper.make_graph(
        [helper.make_node("Constant", [], ["wc"], value=numpy_helper.from_array(_w(4), "wc")),
         helper.make_node("MatMul", ["s_in", "wc"], ["inner_out"], name="nested_mm")], "inner", [],
        [helper.make_tensor_value_info("inner_out", TensorProto.FLOAT, None)])
    inner_else = helper.make_graph([helper.make_node("Identity", ["s_in"], ["inner_else_out"])], "inner_else", [],
                                   [helper.make_tensor_value_info("inner_else_out", TensorProto.FLOAT, None)])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("If", ["c_in"], ["s_out"], name="inner_if", then_branch=inner, else_branch=inner_else)],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("s_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, None)])
    then = helper.make_graph([helper.make_node("MatMul", ["y", "w_then"], ["then_out"], name="then_mm")], "then", [],
                             [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Gemm", ["y", "w_else", "b_else"], ["else_out"], name="else_gemm")],
                              "else", [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(_w(3), "w_else"),
                               numpy_helper.from_array(_w(5, (K,)), "b_else")])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w0"], ["y"], name="mm"),
         helper.make_node("If", ["flag"], ["z"], name="branch", then_branch=then, else_branch=other),
         helper.make_node("Loop", ["trip", "", "z"], ["out"], name="loop", body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", K])],
        [numpy_helper.from_array(_w(1), "w0"), numpy_helper.from_array(_w(2), "w_then"),
         numpy_helper.from_array(np.array(2, np.int64), "trip")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _data(flag: bool, samples: int = 40) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(6).normal(0, 1, (samples, K)).astype(np.float32), "flag": np.array(flag)}


def _names_everywhere(model: onnx.ModelProto) -> list[str]:
    """Every value a node makes and every initializer, in all graphs: ONNX lets no body shadow an outer name."""
    names = []

    def walk(graph):
        names.extend(i.name for i in graph.initializer)
        for node in graph.node:
            names.extend(o for o in node.output if o)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
    walk(model.graph)
    return names


def _ops_everywhere(model: onnx.ModelProto) -> list[str]:
    ops = []

    def walk(graph):
        for node in graph.node:
            ops.append(node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
    walk(model.graph)
    return ops


@pytest.mark.parametrize("flag", [True, False])
def test_every_body_product_is_quantized_and_runs(flag, tmp_path):
    path = tmp_path / "q.onnx"
    report = onnxq.quantize(_model(), _data(flag), output=path).report
    scopes = {e.name: e.detail for e in report.quantized}
    assert set(scopes) == {"mm", "then_mm", "else_gemm", "nested_mm"}
    assert all("activation(s) uint8 static" in detail for detail in scopes.values())
    assert "inside If 'branch' then_branch" in scopes["then_mm"]
    assert "inside If 'inner_if' then_branch" in scopes["nested_mm"]
    saved = onnx.load(str(path))
    ops = _ops_everywhere(saved)
    # Every product is static QDQ, the bodies' too (each body quantizes the outer activation it reads itself).
    assert ops.count("MatMul") == 3 and ops.count("Gemm") == 1 and ops.count("QuantizeLinear") == 4
    assert "MatMulInteger" not in ops and "DynamicQuantizeLinear" not in ops
    # ORT fuses the bodies' QDQ groups as it does the main graph's.
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    fused = _ops_everywhere(onnx.load(options.optimized_model_filepath))
    assert fused.count("MatMulIntegerToFloat") == 3 and fused.count("QGemm") == 1 and "DequantizeLinear" not in fused
    # No float weight is left behind (the outer ones the bodies read are dropped), and no name is taken twice.
    assert {i.name for i in saved.graph.initializer} & {"w0", "w_then"} == set()
    made = _names_everywhere(saved)
    assert len(made) == len(set(made)), sorted(n for n in made if made.count(n) > 1)
    assert set(made) <= model_names(onnxq.io.load_model(path))
    # Measured (seeded, AVX2): cosine 0.9996 to float on the held-out samples, either branch taken (0.9998 with
    # the bodies dynamic).
    [out] = report.verification.outputs
    assert out.metrics.cosine_mean > 0.999 and report.passed
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    reference = ort.InferenceSession(_model().SerializeToString(), providers=["CPUExecutionProvider"])
    feed = _data(flag, 8)
    got, want = session.run(None, feed)[0], reference.run(None, feed)[0]
    cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() > 0.999


def test_weight_only_bodies_use_matmulnbits_and_exclusion_reaches_them(tmp_path):
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4"), mode="weight-only", exclude_nodes=("nested_mm",))
    report = onnxq.quantize(_model(), config=config, output=tmp_path / "q.onnx").report
    assert {e.name for e in report.quantized} == {"mm", "then_mm", "else_gemm"}
    assert any(e.name == "nested_mm" and "excluded by name" in e.detail for e in report.left_float)
    ops = _ops_everywhere(onnx.load(str(tmp_path / "q.onnx")))
    assert ops.count("MatMulNBits") == 3 and ops.count("MatMul") == 1 and "Gemm" not in ops


def test_check_speed_times_every_kind_bodies_included(tmp_path):
    """--check-speed decides node kinds across the model: a body's nodes count with their kind (a float copy of
    the kind, bodies included, is what the quantized one is timed against; silero-vad's LSTM inside an If once made
    it fail with a KeyError)."""
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(check_speed=True, sensitivity_samples=0))
    report = onnxq.quantize(_model(), _data(True), config=config, output=tmp_path / "q.onnx").report
    speed = next(s for s in report.sections if s.key == "speed_by_kind")
    assert {(t.kind, t.nodes) for t in speed.timings} == {("MatMul", 3), ("Gemm", 1)}
    # Whichever kinds this CPU runs slower quantized are float; every node is one or the other.
    assert {e.name for e in report.quantized} | set(speed.float_nodes) == {"mm", "then_mm", "else_gemm", "nested_mm"}
    assert not {e.name for e in report.quantized} & set(speed.float_nodes)


def _branch_local_model(shared_name: bool = False) -> onnx.ModelProto:
    """If (flag) MatMul(Relu(x), W1) else MatMul(Tanh(x), W2): each branch's activation is its own (shared_name:
    both called "act", as sibling bodies may)."""
    branches = []
    for name, op, seed in (("then", "Relu", 11), ("else", "Tanh", 12)):
        act = "act" if shared_name else f"{name}_act"
        branches.append(helper.make_graph(
            [helper.make_node(op, ["x"], [act]),
             helper.make_node("MatMul", [act, f"w_{name}"], [f"{name}_out"], name=f"{name}_mm")],
            name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(_w(seed), f"w_{name}")]))
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["out"], name="branch", then_branch=branches[0], else_branch=branches[1])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K]),
              helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", K])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("shared_name", [False, True])
def test_a_branch_the_data_never_takes_goes_dynamic_and_says_why(shared_name, tmp_path):
    """shared_name: both branches call their activation "act"; keyed by name, the taken branch's range (Relu's,
    from 0) went to the other (Tanh's, from -1): cosine 0.61 on the else branch. Renamed at load, it stays apart."""
    verify = {"x": _data(True)["x"][:16], "flag": np.array(False)}  # the other branch, checked all the same
    report = onnxq.quantize(_branch_local_model(shared_name), _data(True), output=tmp_path / "q.onnx",
                            verify_data=verify).report
    assert any("value name(s) repeated across subgraphs renamed" in n for n in report.notes) == shared_name
    details = {e.name: e.detail for e in report.quantized}
    assert "activation(s) uint8 static" in details["then_mm"]
    assert "dynamic: no calibrated range for its activation (the calibration data never ran this subgraph" \
        in details["else_mm"]
    ops = _ops_everywhere(onnx.load(str(tmp_path / "q.onnx")))
    assert ops.count("MatMulInteger") == 1 and ops.count("DynamicQuantizeLinear") == 1
    # Measured (seeded, AVX2): cosine 0.9999 on the branch calibration never ran.
    assert report.verification.outputs[0].metrics.cosine_mean > 0.999 and report.passed


def test_a_cache_without_body_ranges_leaves_those_nodes_dynamic(tmp_path):
    """A cache written before onnxq observed bodies holds main-graph ranges only: the body's node goes dynamic
    instead of the run failing."""
    cache = tmp_path / "cache.json"
    onnxq.quantize(_model(), _data(True), output=tmp_path / "first.onnx", calibration_cache=cache)
    data = json.loads(cache.read_text())
    assert set(data["tensors"]) == {"x", "y", "s_in"}  # s_in: the Loop body's carried value
    del data["tensors"]["s_in"]
    cache.write_text(json.dumps(data))
    report = onnxq.quantize(_model(), _data(True), output=tmp_path / "q.onnx", calibration_cache=cache).report
    details = {e.name: e.detail for e in report.quantized}
    assert "dynamic: no calibrated range for its activation" in details["nested_mm"]
    assert "activation(s) uint8 static" in details["then_mm"] and report.passed


def _scan_model() -> onnx.ModelProto:
    """A Scan over the time axis of x [T, batch, K]: h ← tanh(x_t·Wx + h·Wh), each step's h a scan output."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "wx"], ["xw"], name="scan_x_mm"),
         helper.make_node("MatMul", ["h_in", "wh"], ["hw"], name="scan_h_mm"),
         helper.make_node("Add", ["xw", "hw"], ["pre"]), helper.make_node("Tanh", ["pre"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["h_step"])],
        "step", [helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["batch", K]),
                 helper.make_tensor_value_info("x_t", TensorProto.FLOAT, ["batch", K])],
        [helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["batch", K]),
         helper.make_tensor_value_info("h_step", TensorProto.FLOAT, ["batch", K])])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "zero"], ["h0_full"]),
         helper.make_node("ReduceSum", ["h0_full", "axis0"], ["h0"], keepdims=0),
         helper.make_node("Scan", ["h0", "x"], ["h_last", "h_all"], name="scan", body=body, num_scan_inputs=1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, "batch", K])],
        [helper.make_tensor_value_info("h_all", TensorProto.FLOAT, [6, "batch", K])],
        [numpy_helper.from_array(_w(21) / 2, "wx"), numpy_helper.from_array(_w(22) / 2, "wh"),
         numpy_helper.from_array(np.array(0, np.float32), "zero"), numpy_helper.from_array(np.array([0]), "axis0")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_scan_body_products_are_static_and_fused(tmp_path):
    """The body's products quantize with ranges observed over every step (x is [time, batch, K]: its samples are
    on axis 1, every 10th held back for the verification)."""
    x = np.random.default_rng(7).normal(0, 1, (6, 48, K)).astype(np.float32)
    config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(sample_axes={"x": 1}))
    report = onnxq.quantize(_scan_model(), {"x": x}, config=config, output=tmp_path / "q.onnx").report
    assert report.calibration_samples == 44 and report.verification.outputs[0].metrics.samples == 4
    details = {e.name: e.detail for e in report.quantized}
    assert set(details) == {"scan_x_mm", "scan_h_mm"}
    assert all("activation(s) uint8 static" in d and "inside Scan 'scan' body" in d for d in details.values())
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(tmp_path / "q.onnx"), options, providers=["CPUExecutionProvider"])
    assert _ops_everywhere(onnx.load(options.optimized_model_filepath)).count("MatMulIntegerToFloat") == 2
    # Measured (seeded, AVX2): cosine 0.9998 over all steps of the held-out samples.
    assert report.verification.outputs[0].metrics.cosine_mean > 0.999 and report.passed


def test_sensitivity_ranks_body_nodes_and_the_fallback_keeps_one_float(tmp_path):
    """The switch model doubles a body's nodes in their body (their switches read from the main graph): the
    product nested in an If inside the Loop is the most harmful (measured, seeded: output SQNR 32.8 dB quantized
    alone, the others 38.6-39.0 dB; the else branch, never taken, changes nothing), and the fallback keeps it float
    to meet 33 dB (35.8 dB after; 31.2 dB with every node quantized)."""
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(tolerance=onnxq.Tolerance(min_sqnr_db=33.0), fallback=True))
    report = onnxq.quantize(_model(), _data(True), config=config, output=tmp_path / "q.onnx").report
    ranked = report.to_dict()["sensitivity"]["nodes"]
    assert [n["name"] for n in ranked] == ["nested_mm", "mm", "then_mm", "else_gemm"]
    assert ranked[0]["local_sqnr_db"] is None and ranked[1]["local_sqnr_db"] > 35  # a body's twins are not outputs
    assert ranked[0]["outputs"]["out"]["sqnr_db"] < 33 < ranked[1]["outputs"]["out"]["sqnr_db"]
    assert ranked[3]["harm"] == 0.0
    assert [e.name for e in report.left_float] == ["nested_mm"] and report.passed
    assert report.verification.outputs[0].metrics.sqnr_db > 33
    # The float node is the one in the nested If, inside the Loop's body, in the file written.
    ops = _ops_everywhere(onnx.load(str(tmp_path / "q.onnx")))
    assert ops.count("MatMul") == 3 and ops.count("QuantizeLinear") == 3


def _conv_branch_model() -> onnx.ModelProto:
    """If (flag) Conv → Relu → Conv → Sigmoid on x [batch, 4, 32] else Identity: a CNN inside a branch (silero's
    layout: its decoder's last Conv feeds a Sigmoid)."""
    rng = np.random.default_rng(31)
    w1 = rng.normal(0, 0.3, (8, 4, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (4, 8, 3)).astype(np.float32)
    then = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1]),
         helper.make_node("Sigmoid", ["c2"], ["s2"])], "then", [],
        [helper.make_tensor_value_info("s2", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b1"),
         numpy_helper.from_array(w2, "w2")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["x_out"])], "else", [],
                              [helper.make_tensor_value_info("x_out", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], name="branch", then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 32]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 32])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_cnn_inside_a_branch_runs_as_qlinearconv(tmp_path):
    """Static Conv needs its output's range too (ORT fuses DequantizeLinear → Conv → QuantizeLinear into
    QLinearConv): both come through the branch's outputs. Dynamic mode leaves a body's Conv float — here nothing
    is left to quantize; before bodies were calibrated, a static run refused this model the same way."""
    data = {"x": np.random.default_rng(32).normal(0, 1, (48, 4, 32)).astype(np.float32), "flag": np.array(True)}
    report = onnxq.quantize(_conv_branch_model(), data, output=tmp_path / "q.onnx").report
    assert {e.name for e in report.quantized} == {"conv1", "conv2"}
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(tmp_path / "q.onnx"), options, providers=["CPUExecutionProvider"])
    fused = _ops_everywhere(onnx.load(options.optimized_model_filepath))
    assert fused.count("QLinearConv") == 2 and "Conv" not in fused and "Relu" not in fused
    # Measured (seeded, AVX2): cosine 0.99999 to float on the held-out samples.
    assert report.verification.outputs[0].metrics.cosine_mean > 0.999 and report.passed
    with pytest.raises(onnxq.errors.UnsupportedModelError, match="nothing to quantize.*dynamic mode leaves Conv"):
        onnxq.quantize(_conv_branch_model(), data, output=tmp_path / "d.onnx", config=onnxq.QuantConfig(mode="dynamic"))
    assert not (tmp_path / "d.onnx").exists()


def test_shards_that_take_different_branches_merge_into_ranges_for_both(tmp_path):
    """Calibrated in two shards, each taking one branch (a body value the shard never computed keeps an empty
    observer, saved and merged like any other): the merged cache makes both branches static."""
    shards = []
    for flag in (True, False):
        summary = onnxq.calibrate(_branch_local_model(), _data(flag))
        assert summary.observers["else_act" if flag else "then_act"].empty
        shards.append(summary.save(tmp_path / f"shard_{flag}.json"))
    merged = onnxq.merge_calibrations(shards)
    assert merged.observers["then_act"].count == merged.observers["else_act"].count == 40 * K
    report = onnxq.quantize(_branch_local_model(), _data(True), calibration_cache=merged,
                            output=tmp_path / "q.onnx").report
    assert all("activation(s) uint8 static" in e.detail for e in report.quantized) and len(report.quantized) == 2


def test_a_sequencemap_body_goes_dynamic_and_is_ranked(tmp_path):
    """SequenceMap's body (ORT expands it into a Loop of its own) cannot pass calibration a bag: its MatMul goes
    dynamic with the reason; the sensitivity doubles it there all the same (its values typed, which that expansion
    needs)."""
    w = np.random.default_rng(41).normal(0, 0.3, (K, K)).astype(np.float32)
    body = helper.make_graph([helper.make_node("MatMul", ["item", "w"], ["product"], name="mapped_mm")], "body",
                             [helper.make_tensor_value_info("item", TensorProto.FLOAT, ["n", K])],
                             [helper.make_tensor_value_info("product", TensorProto.FLOAT, ["n", K])])
    graph = helper.make_graph(
        [helper.make_node("SplitToSequence", ["x"], ["items"], axis=0, keepdims=1),
         helper.make_node("SequenceMap", ["items"], ["products"], body=body, name="map"),
         helper.make_node("ConcatFromSequence", ["products"], ["y"], axis=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    report = onnxq.quantize(model, {"x": _data(True)["x"]}, output=tmp_path / "q.onnx",
                            config={"verify": {"sensitivity": "always"}}).report
    [entry] = report.quantized
    assert "dynamic: no calibrated range" in entry.detail and "a body other than If / Loop / Scan" in entry.detail
    assert [n["name"] for n in report.to_dict()["sensitivity"]["nodes"]] == ["mapped_mm"]
    # Measured (seeded, AVX2): cosine 0.99997.
    assert report.verification.outputs[0].metrics.cosine_mean > 0.999 and report.passed
