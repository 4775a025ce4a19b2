"""QDQ → QOperator lowering: structure, numbers equal to the QDQ model, and the reasons for what stays QDQ."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model, weight

import onnxq
from onnxq import QuantConfig, VerifyConfig
from onnxq.handlers import plan_model
from onnxq.passes import InsertQdqPass
from onnxq.passes.formats.qoperator import LowerToQOperatorPass
from onnxq.io.model_sessions import make_session

_OFF = VerifyConfig(enabled=False)


@pytest.mark.parametrize("sample, op", [("mlp", "QGemm"), ("tiny_transformer", "MatMulIntegerToFloat")])
def test_qoperator_equals_qdq_on_ort(samples_dir, sample, op):
    data = dict(np.load(samples_dir / f"{sample}_calib.npz"))
    model = samples_dir / f"{sample}.onnx"
    qdq = onnxq.quantize(model, data, config=QuantConfig(verify=_OFF)).model
    qop = onnxq.quantize(model, data, config=QuantConfig(format="qoperator", verify=_OFF)).model
    ops = [n.op_type for n in qop.graph]
    planned = [n for n in qdq.graph if n.op_type in ("MatMul", "Gemm") and
               n.inputs[1].producer() is not None and n.inputs[1].producer().op_type == "DequantizeLinear"]
    assert ops.count(op) == len(planned) > 0
    assert "DequantizeLinear" not in ops  # weights and activations feed the integer operators directly
    assert qop.opset_imports["com.microsoft"] == 1
    feed = {k: v[:8] for k, v in data.items()}
    deployed_qdq = make_session(qdq, optimize=True).run(None, feed)[0]
    exact_qdq = make_session(qdq, optimize=False).run(None, feed)[0]
    for optimize in (True, False):  # the operators are explicit: no optimizer needed
        got = make_session(qop, optimize=optimize).run(None, feed)[0]
        np.testing.assert_allclose(got, deployed_qdq, atol=1e-5 * np.abs(deployed_qdq).max())  # same kernels
        np.testing.assert_allclose(got, exact_qdq, atol=1e-3 * np.abs(exact_qdq).max())  # measured ~1e-6


def _gemms(rng):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, [8, 8])
    y1 = tape.op("Gemm", [x, weight(tape, rng, "w1", (8, 8)), weight(tape, rng, "b1", (8,))], {"transA": 1},
                 name="trans_a")
    y2 = tape.op("Gemm", [y1, weight(tape, rng, "w2", (8, 8)), weight(tape, rng, "b2", (8,))], name="float_bias")
    y3 = tape.op("MatMul", [y2, weight(tape, rng, "w3", (8, 4))], name="plain")
    y1.name, y2.name = "y1", "y2"
    return to_model(tape, [x], [y3])


def test_declined_products_keep_qdq_with_reasons(rng):
    model = _gemms(rng)
    config = QuantConfig(gemm_bias="float", exclude_nodes=("plain",))
    plans, _ = plan_model(model.graph, config, "static")
    InsertQdqPass(plans, {"x": (-3.0, 3.0), "y1": (-9.0, 9.0)}, config)(model)
    lowering = LowerToQOperatorPass()(model)
    assert "transA" in lowering.declined["trans_a"]
    assert "bias is float" in lowering.declined["float_bias"]
    assert "not dequantized" in lowering.declined["plain"]
    assert not lowering.lowered
    assert {n.op_type for n in model.graph} >= {"Gemm", "MatMul", "DequantizeLinear"}


def test_cli_format_qoperator_reports_kept_qdq(samples_dir, tmp_path):
    config = QuantConfig(format="qoperator", gemm_bias="float", verify=_OFF)
    report = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz", config=config).report
    assert any("kept in QDQ form" in note and "bias is float" in note for note in report.notes)
