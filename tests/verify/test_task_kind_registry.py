"""A new kind of output is one rule and one measure: the rule in verify.tasks.rules.RULES picks it, its measure in
verify.tasks.measures.MEASURES counts what the quantized output keeps, beside its words (verify.tasks.types.TASK_WORDS),
its default bar (TASK_BARS) and its unit (verify.outcome.UNITS). quantize() then gates the output on that measure, and the
report names the rule that chose it."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from conftest import to_model

import onnxq
from onnxq.verify import outcome
from onnxq.verify.tasks import measures as task_measures
from onnxq.verify.tasks import rules as task_rules
from onnxq.verify.tasks import types as task_types
from onnxq.verify.tasks.types import OutputFacts, OutputTask


def _signs_kept(ref: np.ndarray, got: np.ndarray, task: OutputTask) -> tuple[int, int]:
    """A direction's signs, value by value: (kept, total)."""
    same = np.sign(ref) == np.sign(got)
    return int(np.count_nonzero(same)), int(same.size)


def _named_direction(facts: OutputFacts) -> OutputTask | None:
    """An output named as a direction is judged by its signs."""
    if "direction" in facts.said and not facts.integer:
        return OutputTask("signs", "named as a direction: the sign of each value", class_axis=None)
    return None


@pytest.fixture
def signs_kind(monkeypatch):
    monkeypatch.setitem(task_measures.MEASURES, "signs", _signs_kept)
    monkeypatch.setitem(task_types.TASK_WORDS, "signs", "signs kept")
    monkeypatch.setitem(task_types.TASK_BARS, "signs", 0.97)
    monkeypatch.setitem(outcome.UNITS, "signs", "values")
    monkeypatch.setattr(task_rules, "RULES", [("direction", _named_direction), *task_rules.RULES])


def _direction_model(rng: np.random.Generator) -> ir.Model:
    """Two MatMul layers whose output, named "direction", is a vector whose signs are its answer."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 16])
    hidden = tape.op("Relu", [tape.op("MatMul", [x, tape.initializer(ir.tensor(
        rng.normal(0, 0.5, (16, 32)).astype(np.float32), name="w0"))], name="fc0")], name="relu")
    out = tape.op("MatMul", [hidden, tape.initializer(ir.tensor(
        rng.normal(0, 0.5, (32, 8)).astype(np.float32), name="w1"))], name="fc1")
    out.name = "direction"
    return to_model(tape, [x], [out])


def _run(model: ir.Model | bytes, x: np.ndarray) -> np.ndarray:
    proto = model if isinstance(model, bytes) else ir.to_proto(model).SerializeToString()
    session = ort.InferenceSession(proto, providers=["CPUExecutionProvider"])
    return session.run(["direction"], {"x": x})[0]


def test_a_registered_kind_gates_its_output_by_its_own_measure(signs_kind):
    rng = np.random.default_rng(0)
    model = _direction_model(rng)
    calib = {"x": rng.normal(0, 1, (64, 16)).astype(np.float32)}
    held_out = {"x": rng.normal(0, 1, (400, 16)).astype(np.float32)}
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(measure_speed=False, fallback=False))
    result = onnxq.quantize(model, calib, config=config, verify_data=held_out)
    verification = result.report.verification
    task = verification.tasks["direction"]
    assert (task.kind, task.rule) == ("signs", "named as a direction: the sign of each value")
    assert verification.task_bars["direction"] == 0.97
    check = next(o for o in verification.cpu.outputs if o.name == "direction")
    # The measure's figure is the signs the deployed quantized model keeps of the float model's, counted here alike.
    kept, total = _signs_kept(_run(model, held_out["x"]), _run(result.to_proto().SerializeToString(), held_out["x"]),
                              task)
    assert (check.metrics.task, check.metrics.task_units) == ("signs", total) and total == 400 * 8
    assert check.metrics.task_agreement == pytest.approx(kept / total, abs=2 / total)
    assert 0.9 < check.metrics.task_agreement < 1.0
    assert result.report.to_dict()["verification"]["tasks"]["direction"]["measure"] == "signs kept"


def test_without_the_registration_the_output_keeps_the_numeric_bars():
    rng = np.random.default_rng(0)
    model = _direction_model(rng)
    calib = {"x": rng.normal(0, 1, (64, 16)).astype(np.float32)}
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(measure_speed=False, fallback=False))
    report = onnxq.quantize(model, calib, config=config).report
    assert report.verification.tasks["direction"].kind == "numeric"
