"""A task bar the verification data cannot resolve is said (verify.outcome.coarse_task): at 0.99, one changed answer
among fewer than 100 fails the gate, so the gate — and the fallback after it — asks for no change at all. A
layout detector's class scores over 8 pages held 8 positives at 0.5 on its coarsest level: the fallback kept 73 of
its 102 Convs float without a word on why."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model

import onnxq
from onnxq.summary import format_summary
from onnxq.verify.outcome import coarse_task


def test_data_too_small_for_the_bar_is_named_with_what_would_resolve_it():
    words = coarse_task(40, 0.99, "top1")
    assert "over 40 decisions one change is 0.0250 of it" in words and "100+ decisions" in words
    assert coarse_task(100, 0.99, "top1") is None  # 99 of 100 kept is 0.99: one change allowed
    assert coarse_task(99, 0.99, "top1") is not None
    assert coarse_task(64, 0.97, "sequence") is None  # 62 of 64 strings: 0.969 < 0.97, but one change passes
    assert coarse_task(33, 0.97, "sequence") is not None
    assert "no pixels of the union" in coarse_task(0, 0.99, "iou")


def _classifier(rng: np.random.Generator) -> ir.Model:
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 16])
    w = rng.normal(0, 1, (16, 5)).astype(np.float32)
    logits = tape.op("MatMul", [x, tape.initializer(ir.tensor(w, name="head.w"))], name="head")
    logits.name = "logits"
    return to_model(tape, [x], [logits])


@pytest.mark.parametrize("held_out, coarse", [(40, True), (100, False)])
def test_the_summary_and_report_say_when_the_verification_data_is_too_small(held_out, coarse):
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(0, 1, (10 * held_out, 16)).astype(np.float32)}  # every 10th sample held out
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(measure_speed=False, fallback=False,
                                                         sensitivity_samples=0))
    report = onnxq.quantize(_classifier(rng), data, config=config).report
    assert report.verification.tasks["logits"].kind == "top1"
    assert report.verification.task_bars["logits"] == 0.99
    assert report.to_dict()["verification"]["tasks"]["logits"]["bar"] == 0.99
    line = next(line for line in format_summary(report).splitlines() if line.startswith("  logits: top-1"))
    assert ("COARSE: over 40 decisions one change is 0.0250 of it" in line) == coarse
