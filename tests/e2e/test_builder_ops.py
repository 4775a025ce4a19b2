"""Ops that onnxruntime runs but onnx.defs does not define: onnxruntime-genai's model builder writes
SimplifiedLayerNormalization (ONNX domain in ORT) and com.microsoft's SkipSimplifiedLayerNormalization into every
model. onnxq asks ORT's own schemas, accepts them, leaves them float and quantizes around them; an op
neither defines is still refused in one line."""

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.cli.main import main
from onnxq.passes.graph.op_signatures import defined

D = 64


def _builder_block(rng, norm_op: str = "SimplifiedLayerNormalization") -> onnx.ModelProto:
    """RMSNorm → MatMul → Skip-RMSNorm (the residual) → MatMul, written as the genai builder writes them."""
    inits = [numpy_helper.from_array((rng.normal(0, 0.1, (D, D))).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.normal(0, 0.1, (D, D))).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, D).astype(np.float32), "g1"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, D).astype(np.float32), "g2")]
    nodes = [helper.make_node(norm_op, ["x", "g1"], ["n1"], name="input_layernorm", axis=-1, epsilon=1e-6),
             helper.make_node("MatMul", ["n1", "w1"], ["m1"], name="q_proj"),
             helper.make_node("SkipSimplifiedLayerNormalization", ["m1", "x", "g2"], ["n2", "", "", "residual"],
                              name="post_attention_layernorm", domain="com.microsoft", epsilon=1e-6),
             helper.make_node("MatMul", ["n2", "w2"], ["y"], name="down_proj")]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 16, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 16, D]),
                               helper.make_tensor_value_info("residual", TensorProto.FLOAT, ["b", 16, D])], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                  helper.make_opsetid("com.microsoft", 1)])


def test_ort_is_asked_which_ops_it_defines():
    assert defined("", "SimplifiedLayerNormalization", 21)
    assert defined("com.microsoft", "SkipSimplifiedLayerNormalization", 1)
    assert defined("", "MatMul", 21) and not defined("", "NoSuchOp", 21)


def test_ort_s_kernel_definitions_are_never_asked(rng, tmp_path, monkeypatch):
    """onnxruntime-gpu 1.31.1's get_all_opkernel_def loads every provider library, and where TensorRT's cannot load
    (pip's onnxruntime-gpu without libnvinfer) the process dies with SIGSEGV (on an H100, every genai file
    would crash onnxq). Recorded here as a query that fails: a builder block still quantizes."""
    def crash():
        raise AssertionError("get_all_opkernel_def called: it kills onnxruntime-gpu processes without TensorRT")
    monkeypatch.setattr(ort.capi.onnxruntime_pybind11_state, "get_all_opkernel_def", crash)
    path = tmp_path / "block.onnx"
    onnx.save(_builder_block(rng), path)
    data = {"x": rng.normal(0, 1, (8, 16, D)).astype(np.float32)}
    assert onnxq.quantize(path, data, output=tmp_path / "q.onnx", verify_data=data).report.quantized


def test_a_builder_block_is_quantized_around_its_norms(rng, tmp_path):
    path = tmp_path / "block.onnx"
    onnx.save(_builder_block(rng), path)
    before = path.read_bytes()
    x = rng.normal(0, 1, (48, 16, D)).astype(np.float32)
    result = onnxq.quantize(path, {"x": x[:32]}, output=tmp_path / "q.onnx", verify_data={"x": x[32:]})
    assert result.report.passed
    assert sorted(e.name for e in result.report.quantized) == ["down_proj", "q_proj"]
    quantized = onnx.load(str(tmp_path / "q.onnx"))
    # The norms stay as written (float), and the file keeps the model's inputs and outputs: a runtime that feeds the
    # float model by name (onnxruntime-genai's genai_config.json) feeds this one unchanged.
    assert [n.op_type for n in quantized.graph.node if "Norm" in n.op_type] == [
        "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"]
    assert [i.name for i in quantized.graph.input] == ["x"] and [o.name for o in quantized.graph.output] == [
        "y", "residual"]
    want = ort.InferenceSession(str(path)).run(None, {"x": x[32:]})
    got = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"x": x[32:]})
    for a, b in zip(want, got):  # seeded data: int8 products of 64 terms keep the outputs' cosine > 0.999
        cosine = np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b))
        assert cosine > 0.999
    assert path.read_bytes() == before


@pytest.mark.parametrize("op", ["SimplifiedLayerNormalisation", "RMSNorm"])
def test_an_op_neither_onnx_nor_ort_defines_is_refused_in_one_line(rng, tmp_path, capsys, op):
    path = tmp_path / "bad.onnx"
    onnx.save(_builder_block(rng, op), path)
    np.savez(tmp_path / "calib.npz", x=rng.normal(0, 1, (8, 16, D)).astype(np.float32))
    code = main([str(path), "--calib", str(tmp_path / "calib.npz"), "-o", str(tmp_path / "q.onnx")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not (tmp_path / "q.onnx").exists()
    assert err.count("\n") == 0 and f"uses {op!r}, which is neither an ONNX operator at opset 21 nor one " \
                                   f"onnxruntime {ort.__version__} defines — fix the export" in err


def test_v_shows_onnxq_s_progress_not_the_libraries_info(rng, tmp_path):
    """onnx_ir logs a stack trace at INFO for every op onnx.defs does not define, in every pass: -v printed 30 of
    them for a SmolLM2 builder file before onnxq's own lines. -v is onnxq's progress."""
    path = tmp_path / "block.onnx"
    onnx.save(_builder_block(rng), path)
    np.savez(tmp_path / "calib.npz", x=rng.normal(0, 1, (8, 16, D)).astype(np.float32))
    run = subprocess.run([sys.executable, "-m", "onnxq", str(path), "--calib", str(tmp_path / "calib.npz"), "-o",
                          str(tmp_path / "q.onnx"), "-v", "--no-sensitivity", "--no-speed"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Failed to get schema" not in run.stderr and "Stack" not in run.stderr
