"""Placement per provider: a quantized node counts as on an integer kernel of a provider only when it ran
there; where the provider is absent, ORT's kernel registrations predict it (targets.ort_kernels), and where it is
present the prediction is checked against the session.

The CUDA facts come from an H100 run (onnxruntime-gpu 1.31.1): a dynamic model's products run as
MatMulIntegerToFloat on the CPU with copies each way, a QDQ model's as DequantizeLinear + float MatMul on CUDA,
an int4 model's as MatMulNBits on CUDA. The profiles below are ORT's event format with those placements."""

import json

import jsonschema
import numpy as np
import onnxruntime as ort
import pytest

import onnxq
from onnxq.cli.main import main
from onnxq.verify import profile_placement, quantized_nodes
from onnxq.verify.kernels.placement import placement_from_profile
from onnxq.verify.kernels.predict import predict_placement, with_mismatches

CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"
OFF = onnxq.VerifyConfig(enabled=False)


@pytest.fixture(scope="module")
def forms(samples_dir):
    """The sample transformer in three forms: dynamic int8, static int8 QDQ, 4-bit weights."""
    model, data = samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz"
    return {"dynamic": onnxq.quantize(model, config=onnxq.QuantConfig(verify=OFF)).model,
            "qdq": onnxq.quantize(model, data, config=onnxq.QuantConfig(verify=OFF)).model,
            "int4": onnxq.quantize(model, config=onnxq.QuantConfig(verify=OFF, weights=onnxq.QScheme("int4"))).model}


def test_cuda_placement_predicted_per_form(forms):
    dynamic = predict_placement(forms["dynamic"], CUDA, quantized_nodes(forms["dynamic"]))
    assert dynamic.source == "predicted" and dynamic.integer == [] and dynamic.float_fallbacks == []
    assert {(r.op_type, r.provider) for r in dynamic.elsewhere} == {("MatMulInteger", CPU)}
    assert len(dynamic.elsewhere) == 6 and dynamic.copies > 0
    assert any("DynamicQuantizeLinear" in f for f in dynamic.findings())  # no CUDA kernel either
    qdq = predict_placement(forms["qdq"], CUDA, quantized_nodes(forms["qdq"]))
    assert len(qdq.float_fallbacks) == 6 and qdq.integer == [] and qdq.elsewhere == [] and qdq.copies == 0
    int4 = predict_placement(forms["int4"], CUDA, quantized_nodes(forms["int4"]))
    assert len(int4.integer) == 6 and int4.elsewhere == [] and int4.copies == 0
    assert int4.text()[0].endswith("(6/6 quantized nodes on integer kernels of CUDA)")


def _profile(ran: dict[str, tuple[str, str]], copies: int) -> list[dict]:
    """Profile events as ORT writes them: one "<node>_kernel_time" event per node run."""
    events = [{"cat": "Session", "name": "model_run", "args": {}}]
    for name, (op_type, provider) in ran.items():
        events.append({"cat": "Node", "name": f"{name}_kernel_time", "args": {"op_name": op_type,
                                                                            "provider": provider}})
    for i in range(copies):
        events.append({"cat": "Node", "name": f"Memcpy_{i}_kernel_time",
                       "args": {"op_name": "MemcpyFromHost" if i % 2 else "MemcpyToHost", "provider": CUDA}})
    return events


def test_a_fallback_to_the_cpu_is_not_counted_as_a_cuda_integer_kernel(forms):
    """Never '36/36 quantized nodes on integer kernels' right above '74 node(s) fell back to CPU: 36
    MatMulIntegerToFloat': the CPU's kernels are not counted for CUDA."""
    nodes = quantized_nodes(forms["dynamic"])
    ran = {n: ("MatMulIntegerToFloat", CPU) for n in nodes} | {"/attention/Softmax": ("Softmax", CUDA)}
    placement = placement_from_profile(CUDA, _profile(ran, copies=12), nodes)
    assert placement.integer == [] and len(placement.elsewhere) == 6 and placement.copies == 12
    assert placement.text()[0].endswith("integer none; float MatMul/Gemm/Conv 0 (0/6 quantized nodes on integer "
                                        "kernels of CUDA)")
    assert "6 quantized node(s) fell back from CUDA (no CUDA kernel for their types): 6 MatMulIntegerToFloat on " \
           "CPU" in placement.findings()
    # The CPU's own fusion renamed the fallback (MatMulInteger → MatMulIntegerToFloat): same kind, same place.
    predicted = predict_placement(forms["dynamic"], CUDA, nodes)
    assert with_mismatches(placement, predicted).mismatches == ()


def test_a_session_that_contradicts_the_table_is_a_finding(forms):
    """Should a new onnxruntime run an int8 product on CUDA, the table's prediction is shown wrong, by node."""
    nodes = quantized_nodes(forms["dynamic"])
    first = sorted(nodes)[0]
    ran = {n: ("MatMulIntegerToFloat", CPU) for n in nodes} | {first: ("MatMulInteger", CUDA)}
    checked = with_mismatches(placement_from_profile(CUDA, _profile(ran, 0), nodes),
                              predict_placement(forms["dynamic"], CUDA, nodes))
    assert checked.mismatches == (f"{first}: predicted MatMulInteger on CPU, ran MatMulInteger on CUDA",)
    assert any("targets/ort_kernels.py needs updating" in f for f in checked.findings())


@pytest.mark.skipif(CUDA in ort.get_available_providers(), reason="CUDA is here: its placement is profiled, not "
                                                                  "predicted (test_cuda_placement_matches_the_table)")
def test_an_absent_provider_asked_for_is_predicted_in_every_report(samples_dir, tmp_path, capsys):
    report_path = tmp_path / "r.json"
    code = main([str(samples_dir / "tiny_transformer.onnx"), "-o", str(tmp_path / "q.onnx"), "--providers",
                 "cpu,cuda", "--no-sensitivity", "--report", str(report_path), "--html", str(tmp_path / "r.html")])
    out = capsys.readouterr().out
    assert code == 0
    # The summary's line says how many quantized nodes would run on integer kernels there (-v: every kernel).
    assert "kernels:     0/6 quantized nodes on integer kernels of CUDA (predicted: no such provider here)" in out
    report = json.loads(report_path.read_text())
    schema = json.loads((samples_dir.parent / "onnxq" / "report_schema.json").read_text())
    jsonschema.validate(report, schema)
    cuda = report["verification"]["predicted"][CUDA]
    assert cuda["source"] == "predicted" and cuda["integer"] == [] and len(cuda["elsewhere"]) == 6
    assert "CUDAExecutionProvider (absent here)" in (tmp_path / "r.html").read_text()


@pytest.mark.cuda
@pytest.mark.parametrize("form", ["dynamic", "qdq", "int4"])
def test_cuda_placement_matches_the_table(forms, samples_dir, form):
    """On a GPU machine: the real CUDA session places every quantized node as the table predicts."""
    batch = {"input_ids": np.load(samples_dir / "tiny_transformer_calib.npz")["input_ids"][:4]}
    nodes = quantized_nodes(forms[form])
    placement = profile_placement(forms[form], CUDA, batch, nodes)
    assert with_mismatches(placement, predict_placement(forms[form], CUDA, nodes)).mismatches == ()


def test_shape_arithmetic_left_on_the_cpu_is_not_a_fallback(forms):
    """On an H100 (MiniLM, onnxruntime-gpu 1.31.1) every form's CUDA session runs 13 Gather, 13 Unsqueeze and 12
    Concat on the CPU — the shape computations ORT places there on purpose, with CUDA kernels of their own — and
    these are no '38 node(s) fell back to CPU'. A float node on the CPU still is one."""
    nodes = quantized_nodes(forms["qdq"])
    events = _profile({n: ("MatMul", CUDA) for n in nodes}, copies=0)
    shapes = {"Gather": [{"int64": []}], "Unsqueeze": [{"int64": [1]}], "Concat": [{"int64": [3]}]}
    for i, (op, outputs) in enumerate(shapes.items()):
        events.append({"cat": "Node", "name": f"/shape_{i}_kernel_time",
                       "args": {"op_name": op, "provider": CPU, "output_type_shape": outputs}})
    # Not shape arithmetic: a float output, and an integer one with more values than any shape has.
    events.append({"cat": "Node", "name": "/norm_kernel_time", "args": {
        "op_name": "LayerNormalization", "provider": CPU, "output_type_shape": [{"float": [2, 16, 64]}]}})
    events.append({"cat": "Node", "name": "/ids_kernel_time", "args": {
        "op_name": "Gather", "provider": CPU, "output_type_shape": [{"int64": [2, 16]}]}})
    placement = placement_from_profile(CUDA, events, nodes)
    assert [r.op_type for r in placement.cpu_shape_nodes] == ["Gather", "Unsqueeze", "Concat"]
    assert [r.op_type for r in placement.cpu_fallbacks] == ["LayerNormalization", "Gather"]
    text = placement.text()
    assert text[1] == "  3 shape computation(s) on the CPU, where ORT places them (outputs of a few integers): " \
                      "1 Gather, 1 Unsqueeze, 1 Concat"
    assert "  ! 2 node(s) fell back to CPU: 1 LayerNormalization, 1 Gather" in text
    assert [r["op_type"] for r in placement.to_dict()["cpu_shape_nodes"]] == ["Gather", "Unsqueeze", "Concat"]
