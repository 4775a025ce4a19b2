"""A task verdict states what its sample count can show (numerics.interval, verify.outcome): the agreement with its
95 % Wilson interval; where the interval straddles the bar the verdict is "not shown" (exit 4), with the count that
would show it. None of 64 answers changed shows only 0.943, not "top1 1.0000 ok — within tolerance": a file-type classifier so
verified keeps 0.972 of float's answers on 576 samples, under the 0.99 bar."""

import json

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model

import onnxq
from onnxq.cli.main import main
from onnxq.numerics.interval import units_to_show, wilson
from onnxq.verify.tasks.types import TASK_BARS


def test_the_wilson_interval_and_the_count_that_shows_a_bar():
    none_changed = wilson(64, 64)
    assert none_changed.low == pytest.approx(0.9434, abs=1e-4) and none_changed.high == 1.0
    assert wilson(0, 0).low == 0.0 and wilson(0, 0).high == 1.0  # nothing counted: nothing known
    some = wilson(560, 576)  # 0.972 kept
    assert some.low == pytest.approx(0.9555, abs=1e-3) and some.high == pytest.approx(0.9829, abs=1e-3)
    assert units_to_show(1.0, 0.99) == 381  # n / (n + z²) >= 0.99
    assert units_to_show(1.0, 0.97) == 125
    assert units_to_show(0.99, 0.99) is None and units_to_show(0.98, 0.99) is None  # at or below: never shown
    assert wilson(round(0.995 * units_to_show(0.995, 0.99)), units_to_show(0.995, 0.99)).low >= 0.99
    assert max(TASK_BARS.values()) == 0.99  # data.holdout's SHOWS_DEFAULT_BAR is this bar's


PROTOTYPES = np.random.default_rng(7).normal(0, 1, (5, 16)).astype(np.float32)


def _classifier(rng: np.random.Generator) -> ir.Model:
    """Softmax over 5 classes of a 16-wide input, each class a prototype the input is near (_inputs): clear
    margins, so int8 changes none of its answers."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 16])
    logits = tape.op("MatMul", [x, tape.initializer(ir.tensor(PROTOTYPES.T.copy(), name="head.w"))], name="head")
    probabilities = tape.op("Softmax", [logits], attributes={"axis": -1})
    probabilities.name = "probabilities"
    return to_model(tape, [x], [probabilities])


def _inputs(rng: np.random.Generator, count: int) -> np.ndarray:
    return (PROTOTYPES[rng.integers(0, 5, count)] + rng.normal(0, 0.3, (count, 16))).astype(np.float32)


_QUIET = ["--no-speed", "--no-sensitivity", "--no-fallback"]


def test_64_samples_none_changed_is_not_shown_and_says_what_would_show_it(tmp_path, capsys):
    rng = np.random.default_rng(0)
    ir.save(_classifier(rng), tmp_path / "m.onnx")
    np.savez(tmp_path / "calib.npz", x=_inputs(rng, 256))
    np.savez(tmp_path / "held.npz", x=_inputs(rng, 64))
    code = main([str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "calib.npz"), "--verify-data",
                 str(tmp_path / "held.npz"), "-o", str(tmp_path / "q.onnx"), "--report", str(tmp_path / "r.json"),
                 *_QUIET])
    out = capsys.readouterr().out
    assert code == 4, out
    assert ("result: NOT SHOWN — top-1 agreement 1.0000 on 64 decisions (95% interval 0.943–1.000) cannot show "
            "the 0.99 bar: about 381 decisions with no change would show it") in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "not shown" and report["passed"] is False
    check = report["verification"]["providers"]["CPUExecutionProvider"]["outputs"]["probabilities"]
    assert check["verdict"] == "not shown" and check["failures"] == [] and check["task_bar"] == 0.99
    assert check["task_interval"]["kept"] == 64 and check["task_interval"]["low"] == pytest.approx(0.9434, abs=1e-4)
    assert (tmp_path / "q.onnx").is_file()  # a model is written: the verdict says what it shows


def test_enough_held_out_samples_show_the_bar(tmp_path):
    rng = np.random.default_rng(0)
    model = _classifier(rng)
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(measure_speed=False, sensitivity_samples=0,
                                                         fallback=False))
    report = onnxq.quantize(model, {"x": _inputs(rng, 256)}, config=config, verify_data={"x": _inputs(rng, 400)}).report
    check = report.verification.outputs[0]
    assert check.metrics.task_agreement == 1.0 and check.metrics.task_units == 400
    assert check.verdict == "within tolerance" and report.verdict == "within tolerance" and report.passed is True
    assert report.result == "within tolerance"
