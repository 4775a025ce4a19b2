"""Verdicts that mean something: green on nothing is refused or said (verify of a float pair, made-up inputs, nothing
quantized), made-up inputs never change the written model, the float model's own instability never lowers a bar
below what a user would accept, and exporters' generic names do not hide what an output computes."""

import dataclasses
import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from conftest import to_model
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.data.holdout import SHOWS_DEFAULT_BAR, plan_holdout
from onnxq.cli.main import main
from onnxq.verify.api import compare_models
from onnxq.verify.tasks.rules import choose_tasks, output_facts

WIDTH = 16


def _mlp(rng: np.random.Generator) -> ir.Model:
    """x [batch, 16] → MatMul → Relu → MatMul → y (no task: numeric bars)."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", WIDTH])
    hidden = tape.op("Relu", [tape.op("MatMul", [x, tape.initializer(ir.tensor(
        rng.normal(0, 0.5, (WIDTH, 32)).astype(np.float32), name="w0"))], name="fc0")])
    y = tape.op("MatMul", [hidden, tape.initializer(ir.tensor(rng.normal(0, 0.5, (32, 8)).astype(np.float32),
                                                               name="w1"))], name="fc1")
    y.name = "y"
    return to_model(tape, [x], [y])


def test_verify_refuses_a_float_pair_and_names_a_swap(tmp_path, capsys):
    rng = np.random.default_rng(0)
    ir.save(_mlp(rng), tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=rng.normal(0, 1, (64, WIDTH)).astype(np.float32))
    onnxq.quantize(tmp_path / "m.onnx", tmp_path / "d.npz", output=tmp_path / "q.onnx")
    before = sorted(p.name for p in tmp_path.iterdir())
    m, q, d = str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), str(tmp_path / "d.npz")
    for pair, says in (((m, m), f"the second model ({m}) quantizes nothing"),
                       ((q, m), f"the first model ({q}) is the quantized one and the second model ({m}) quantizes "
                                "nothing — swap them"),
                       ((q, q), f"the first model ({q}) is quantized too: the reference must be the float model")):
        assert main(["verify", *pair, "--data", d, "--report", str(tmp_path / "v.json")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("onnxq: error: ") and says in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no report written
    assert main(["verify", m, q, "--data", d, "--report", str(tmp_path / "v.json")]) == 0
    assert "result: within tolerance" in capsys.readouterr().out
    written = json.loads((tmp_path / "v.json").read_text())
    assert written["verdict"] == written["verification"]["verdict"] == "within tolerance" and written["passed"]


def test_quiet_keeps_the_made_up_inputs_caveat(tmp_path, capsys):
    ir.save(_mlp(np.random.default_rng(0)), tmp_path / "m.onnx")
    code = main([str(tmp_path / "m.onnx"), "-o", str(tmp_path / "q.onnx"), "-q", "--no-speed"])
    assert code == 0
    assert capsys.readouterr().out == (f"onnxq: wrote {tmp_path / 'q.onnx'}; within tolerance on made-up inputs — "
                                       "pass --verify-data for a verdict on yours\n")


def _blind_feature(rng: np.random.Generator) -> tuple[ir.Model, dict]:
    """Three MatMuls; feature 15 is always 0 in the real data, yet fc0 weighs it by 100: made-up N(0, 1) inputs put
    values far past fc1's calibrated input range, which no real input reaches."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", WIDTH])
    w0 = rng.normal(0, 0.5, (WIDTH, 32)).astype(np.float32)
    w0[15, 0] = 100.0
    w1 = rng.normal(0, 0.3, (32, 32)).astype(np.float32)
    w1[0, :] = 0.05
    w2 = rng.normal(0, 0.3, (32, 8)).astype(np.float32)
    h = tape.op("Relu", [tape.op("MatMul", [x, tape.initializer(ir.tensor(w0, name="w0"))], name="fc0")])
    h = tape.op("Relu", [tape.op("MatMul", [h, tape.initializer(ir.tensor(w1, name="w1"))], name="fc1")])
    y = tape.op("MatMul", [h, tape.initializer(ir.tensor(w2, name="w2"))], name="fc2")
    y.name = "y"
    x_data = rng.normal(0, 1, (200, WIDTH)).astype(np.float32)
    x_data[:, 15] = 0.0
    return to_model(tape, [x], [y]), {"x": x_data}


def test_made_up_inputs_never_change_the_written_model(tmp_path):
    """A calibration cache and no data to verify on: the check runs on made-up inputs, out of tolerance there
    (cosine 0.96: they saturate fc1's calibrated range), and the fallback does not act on them (it would keep fc1
    float: a larger file for a verdict on inputs no user has). The model written is the one the cache's ranges make,
    every node int8, the same as with verification off."""
    model, data = _blind_feature(np.random.default_rng(0))
    cache = tmp_path / "cache.json"
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(measure_speed=False))
    first = onnxq.quantize(model, data, calibration_cache=cache, config=config)
    assert first.report.verdict == "within tolerance" and not first.report.left_float
    ranked = config.replace(verify=dataclasses.replace(config.verify, sensitivity="always"))
    cached = onnxq.quantize(model, None, calibration_cache=cache, config=ranked, output=tmp_path / "q.onnx")
    report = cached.report
    assert report.verification.data == "synthetic inputs" and report.verification.failed
    assert report.fallback is None and not report.left_float and len(report.quantized) == 3
    assert report.sensitivity is not None  # reported, not acted on
    assert report.verdict == "out of tolerance" and report.result == (
        "OUT OF TOLERANCE on made-up inputs — pass --verify-data for a verdict on yours")
    assert any(n.startswith("fallback: not run — out of tolerance on made-up inputs") for n in report.notes)
    again = onnxq.quantize(model, None, calibration_cache=cache, config=onnxq.QuantConfig(
        verify=onnxq.VerifyConfig(enabled=False)))
    assert ir.to_proto(again.model).SerializeToString() == ir.to_proto(cached.model).SerializeToString()


def _conv_model(rng: np.random.Generator) -> onnx.ModelProto:
    """Two 3×3 Convs of 32 channels on 32×32 images: dynamic ConvInteger runs them several times slower than
    float Conv on every CPU onnxruntime has (im2col and an integer GEMM against MLAS's NCHWc kernels)."""
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (32, c, 3, 3)).astype(np.float32), f"w{i}")
             for i, c in enumerate((3, 32))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["y"], name="conv1", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 32, 32, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_nothing_quantized_is_the_result_and_the_float_file_is_written_unchanged(tmp_path, capsys):
    """--check-speed keeps every Conv float (slower quantized here, measured): the run says so as its result,
    exits 4, and writes the float model's own bytes — never a rewritten file as large or larger."""
    onnx.save(_conv_model(np.random.default_rng(0)), tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=np.random.default_rng(1).normal(0, 1, (16, 3, 32, 32)).astype(np.float32))
    (tmp_path / "c.toml").write_text("dynamic_conv = true\n")
    code = main([str(tmp_path / "m.onnx"), "--mode", "dynamic", "--verify-data", str(tmp_path / "d.npz"),
                 "--config", str(tmp_path / "c.toml"), "--check-speed", "--no-sensitivity", "-o",
                 str(tmp_path / "q.onnx"), "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["quantized"] == [] and len(report["left_float"]) == 2, out
    assert code == 4 and report["verdict"] == "nothing quantized" and report["passed"] is False
    assert ("result: NOTHING QUANTIZED — every node kept float (kept float by --check-speed: slower quantized than "
            "float on this CPU, measured); wrote the float model unchanged") in out
    assert (tmp_path / "q.onnx").read_bytes() == (tmp_path / "m.onnx").read_bytes()
    assert report["size"]["quant_bytes"] == report["size"]["float_bytes"]


def _on_a_threshold(step: float = 0.0) -> ir.Model:
    """Per feature, on/off at 0.5 (a Sigmoid of 2000·(x − 0.5 − step)): one step of an 8-bit input moves the values
    at 127/255 and 128/255 across it."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 40])
    shifted = tape.op("Sub", [x, tape.initializer(ir.tensor(np.float32(0.5 + step), name="threshold"))])
    gain = tape.initializer(ir.tensor(np.float32(2000.0), name="gain"))
    y = tape.op("Sigmoid", [tape.op("Mul", [shifted, gain])])
    y.name = "speech"
    return to_model(tape, [x], [y])


def test_an_unstable_float_model_never_lowers_the_bar_below_the_floor():
    """The float model keeps 0.80 of its own on/off decisions under one step of its 8-bit input's noise; held to
    0.80, a copy that changes a tenth of them would pass. The bar stays 0.99 (the floor is 0.90): such a copy
    is not shown, the data cannot judge it; a copy that changes nothing is still shown within tolerance."""
    rng = np.random.default_rng(0)
    levels = rng.choice([0, 127, 128, 255], p=[0.1, 0.7, 0.1, 0.1], size=(50, 40))
    data = {"x": (levels / 255).astype(np.float32)}
    decisions_only = onnxq.VerifyConfig(tolerance=onnxq.Tolerance(min_cosine=None))  # the task bar alone
    same = compare_models(_on_a_threshold(), _on_a_threshold(), data, config=decisions_only)
    assert same.stability["speech"] == pytest.approx(0.8, abs=0.03) and same.task_bars["speech"] == 0.99
    assert same.verdict == "within tolerance"
    moved = compare_models(_on_a_threshold(), _on_a_threshold(step=0.002), data, config=decisions_only)
    check = moved.outputs[0]
    # 128/255 turns off: a tenth of the decisions change.
    assert check.metrics.task_agreement == pytest.approx(0.9, abs=0.02) and not check.failed
    assert moved.verdict == "not shown" and "the float model itself keeps only 0.8" in check.unshown[0]
    assert "below the 0.9 floor" in check.unshown[0] and "the data cannot judge" in check.unshown[0]


def test_an_exporter_s_generic_name_does_not_hide_a_sigmoid_map_or_a_softmax(rng):
    """tf2onnx names every output StatefulPartitionedCall:N — "State" is no recurrent state: a Sigmoid's
    posteriorgram is judged as on/off frames, a Softmax as top-1, whatever the name."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 8])
    dense = tape.op("MatMul", [x, tape.initializer(ir.tensor(rng.normal(0, 1, (8, 6)).astype(np.float32),
                                                             name="w"))])
    posteriors, classes = tape.op("Sigmoid", [dense]), tape.op("Softmax", [dense], {"axis": -1})
    posteriors.name, classes.name = "StatefulPartitionedCall:0", "StatefulPartitionedCall:1"
    model = to_model(tape, [x], [posteriors, classes])
    values = [rng.uniform(0, 1, (4, 6)).astype(np.float32), np.full((4, 6), 1 / 6, np.float32)]
    tasks = choose_tasks(onnxq.VerifyConfig(), output_facts(model, [posteriors.name, classes.name], values, 4))
    assert tasks["StatefulPartitionedCall:0"].kind == "frames"
    assert tasks["StatefulPartitionedCall:1"].kind == "top1"


def test_the_default_holdout_holds_back_what_the_strictest_bar_needs():
    assert SHOWS_DEFAULT_BAR == 381
    assert (plan_holdout(4000, 10, None).every, plan_holdout(4000, 10, None).most) == (10, 400)  # every 10th
    assert (plan_holdout(1000, 10, None).every, plan_holdout(1000, 10, None).most) == (2, 381)  # what 0.99 needs
    assert (plan_holdout(256, 10, None).every, plan_holdout(256, 10, None).most) == (2, 128)  # at most half
    assert (plan_holdout(None, 10, None).every, plan_holdout(None, 10, None).most) == (10, 381)  # size unknown
    assert (plan_holdout(1000, 10, 64).every, plan_holdout(1000, 10, 64).most) == (10, 64)  # the user's cap


def test_a_run_holds_back_enough_to_show_the_bar_and_says_why():
    rng = np.random.default_rng(0)
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(measure_speed=False, sensitivity_samples=0))
    report = onnxq.quantize(_mlp(rng), {"x": rng.normal(0, 1, (1000, WIDTH)).astype(np.float32)},
                            config=config).report
    assert report.verification.samples == 381 and report.calibration_samples == 619
    assert report.verification.data == "held-out calibration samples (every 2nd)"
    assert ("verification: 381 calibration samples held back (every 2nd: at least the 381 that a 0.99 bar needs with "
            "no change)") in report.notes
