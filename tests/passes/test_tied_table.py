"""A token table tied to an lm_head is stored once in int8: the Gather reads the lm_head's codes through a Transpose
(passes.forms.tied_table), whichever way the export ties them — a Transpose of the table (torch.onnx's dynamo exporter,
folded by preparation), a Gemm with transB on the table itself, or a second initializer holding the same values
(TorchScript). A table that differs from the lm_head's weight keeps its own codes."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq

VOCAB, WIDTH = 512, 128  # 65,536 values: the least table onnxq quantizes


def _model(tie: str, rng) -> onnx.ModelProto:
    """ids [N] → Gather(table) → hidden → MatMul(w) → Tanh → lm_head over the table → logits [N, VOCAB]."""
    table = rng.normal(0, 0.5, (VOCAB, WIDTH)).astype(np.float32)
    inits = {"table": table, "w": rng.normal(0, 0.1, (WIDTH, WIDTH)).astype(np.float32)}
    nodes = [helper.make_node("Gather", ["table", "ids"], ["hidden"], name="embed"),
             helper.make_node("MatMul", ["hidden", "w"], ["mixed"], name="mix"),
             helper.make_node("Tanh", ["mixed"], ["state"], name="tanh")]
    if tie == "gemm transB":
        nodes.append(helper.make_node("Gemm", ["state", "table"], ["logits"], name="lm_head", transB=1))
    elif tie == "transpose":
        nodes += [helper.make_node("Transpose", ["table"], ["table_t"], name="lm_head/Transpose", perm=[1, 0]),
                  helper.make_node("MatMul", ["state", "table_t"], ["logits"], name="lm_head")]
    else:  # a second initializer: the table's transpose ("copy"), or one value off it ("untied")
        inits["lm_head.weight"] = np.ascontiguousarray(table.T)
        if tie == "untied":
            inits["lm_head.weight"][3, 7] += 0.25
        nodes.append(helper.make_node("MatMul", ["state", "lm_head.weight"], ["logits"], name="lm_head"))
    graph = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", VOCAB]),
                               helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["N", WIDTH])],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("tie", ["transpose", "gemm transB", "copy", "untied"])
@pytest.mark.parametrize("calibrated", [False, True])
def test_a_tied_table_is_stored_once_and_gathers_the_lm_head_s_rows(rng, tmp_path, tie, calibrated):
    model = _model(tie, rng)
    ids = rng.integers(0, VOCAB, 64)
    calibration = {"ids": ids[:48]} if calibrated else None
    out = tmp_path / "q.onnx"
    onnxq.quantize(model, calibration, output=out, config={"verify": {"enabled": False}})
    quantized = onnx.load(out)
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    tables = [name for name, a in inits.items() if a.size == VOCAB * WIDTH]
    assert all(inits[name].dtype == np.int8 for name in tables)
    assert len(tables) == (2 if tie == "untied" else 1)
    producers = {o: n for n in quantized.graph.node for o in n.output}
    gather = next(n for n in quantized.graph.node if n.name == "embed_quantized")  # the int8 rows
    if tie != "untied":  # the rows are the lm_head's codes, scaled by its per-channel scales
        codes = inits[tables[0]]
        if gather.input[0] != tables[0]:  # stored as a MatMul reads them, [WIDTH, VOCAB]: through a Transpose
            transpose = producers[gather.input[0]]
            assert transpose.op_type == "Transpose" and transpose.input[0] == tables[0]
            codes = codes.T
        assert codes.shape == (VOCAB, WIDTH)
        scale = next(a for name, a in inits.items() if a.shape == (VOCAB,) and a.dtype == np.float32)
        expected = codes[ids].astype(np.float32) * scale[ids, None]
    session = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
    logits, hidden = session.run(None, {"ids": ids[48:]})
    if tie != "untied":
        np.testing.assert_allclose(hidden, expected[48:], rtol=1e-6, atol=0)
    float_session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    float_logits, float_hidden = float_session.run(None, {"ids": ids[48:]})
    # Measured (seed 0): cosine 0.99997 and more for the rows, 0.9998 and more for the logits, every case.
    assert _cosine(hidden, float_hidden) > 0.9999 and _cosine(logits, float_logits) > 0.999


@pytest.mark.parametrize("tie", ["transpose", "untied"])
def test_asymmetric_int8_rows_are_shifted_by_their_zero_points(rng, tmp_path, tie):
    """x86-vnni takes asymmetric int8 weights: the gathered rows are (q − zero point) · scale, per row. The rows
    were scaled alone before (hidden cosine 0.959, measured, seed 0, untied); a tied table shares the lm_head's
    zero points with its codes."""
    model = _model(tie, rng)
    ids = rng.integers(0, VOCAB, 64)
    out = tmp_path / "q.onnx"
    onnxq.quantize(model, {"ids": ids[:48]}, output=out, config={
        "target": "x86-vnni", "weights": {"dtype": "int8", "symmetric": False}, "verify": {"enabled": False}})
    quantized = onnx.load(out)
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    assert sum(a.size == VOCAB * WIDTH for a in inits.values()) == (2 if tie == "untied" else 1)
    assert any(n.op_type == "Sub" and n.name.startswith("embed") for n in quantized.graph.node)
    hidden = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(["hidden"], {"ids": ids[48:]})[0]
    float_hidden = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["hidden"], {"ids": ids[48:]})[0]
    assert _cosine(hidden, float_hidden) > 0.9999  # measured 0.99998


def test_a_smoothed_lm_head_still_serves_the_table_its_rows_divided_by_the_scales(rng, tmp_path):
    """SmoothQuant multiplies the lm_head's input channels — the table's columns — by s: the Gather reads those
    codes and divides its rows by s, so the lm_head keeps its smoothing and the table is stored once."""
    model = _model("transpose", rng)
    ids = rng.integers(0, VOCAB, 64)
    out = tmp_path / "q.onnx"
    report = onnxq.quantize(model, {"ids": ids[:48]}, output=out,
                            config={"smooth": 0.5, "verify": {"enabled": False}}).report
    assert [s.activation for s in report.smoothing] == ["hidden", "state"]  # mix's input and the lm_head's
    quantized = onnx.load(out)
    inits = [i for i in quantized.graph.initializer if np.prod(i.dims) == VOCAB * WIDTH]
    assert len(inits) == 1 and inits[0].data_type == TensorProto.INT8
    assert any(n.name == "embed_unsmooth_Mul" for n in quantized.graph.node)
    hidden = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(["hidden"], {"ids": ids[48:]})[0]
    float_hidden = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["hidden"], {"ids": ids[48:]})[0]
    assert _cosine(hidden, float_hidden) > 0.9999  # measured 0.99996; without the division the rows are off by s


def test_untied_tables_keep_their_own_int8_form(rng, tmp_path):
    """tie_tables = false (--untie-tables): the table and the lm_head each their own int8 form, both smoothed
    alike."""
    model = _model("transpose", rng)
    ids = rng.integers(0, VOCAB, 64)
    out = tmp_path / "q.onnx"
    report = onnxq.quantize(model, {"ids": ids[:48]}, output=out,
                            config={"smooth": 0.5, "tie_tables": False, "verify": {"enabled": False}}).report
    assert [s.activation for s in report.smoothing] == ["hidden", "state"]
    assert sum(np.prod(i.dims) == VOCAB * WIDTH for i in onnx.load(out).graph.initializer) == 2


def test_the_untie_flag_sets_the_config():
    from onnxq.cli.main import build_parser
    from onnxq.cli.args import config_from_args

    assert config_from_args(build_parser().parse_args(["m.onnx", "--untie-tables"])).tie_tables is False
    assert config_from_args(build_parser().parse_args(["m.onnx"])).tie_tables is True


@pytest.mark.parametrize("tie_tables", [True, False])
def test_blocks_of_a_tied_table_follow_the_same_setting(rng, tmp_path, tie_tables):
    """4-bit weights: the Gather reads the lm_head's blocks (a Reshape of MatMulNBits' B) unless tie_tables is
    false, when the table gets blocks of its own."""
    out = tmp_path / "q.onnx"
    onnxq.quantize(_model("transpose", rng), output=out, config={
        "weights": {"dtype": "int4"}, "tie_tables": tie_tables, "verify": {"enabled": False}})
    quantized = onnx.load(out)
    gather = next(n for n in quantized.graph.node if n.op_type == "GatherBlockQuantized")
    producers = {o: n.op_type for n in quantized.graph.node for o in n.output}
    assert (producers.get(gather.input[0]) == "Reshape") == tie_tables
