"""Task-level agreement: the share of argmax decisions kept, as a metric and a tolerance. A classifier whose two
top classes are nearly tied keeps cosine ≈ 1 after int8 quantization while its answers change; the cosine gate
passes it, the argmax gate does not (issue 19, scope 9)."""

import numpy as np
import onnx_ir as ir
from conftest import tied_classes, to_model

import onnxq
from onnxq.cli import main
from onnxq.io import save_model
from onnxq.verify.metrics import MetricsAccumulator


def test_argmax_agreement_counts_decisions_over_the_last_axis():
    reference = np.array([[[0.0, 1.0, 0.5], [2.0, 1.0, 0.0]], [[0.3, 0.2, 0.1], [0.0, 0.0, 9.0]]], np.float32)
    changed = reference.copy()
    changed[0, 0, 2] = 1.5  # row [0, 0]: argmax 1 → 2
    accumulator = MetricsAccumulator()
    accumulator.add(reference, changed)
    metrics = accumulator.result()
    assert metrics.decisions == 4 and metrics.argmax_agreement == 0.75
    scalar = MetricsAccumulator()
    scalar.add(np.float32(1.0), np.float32(2.0))
    assert scalar.result().decisions == 0 and scalar.result().argmax_agreement == 1.0


def _near_tie_classifier(rng) -> ir.Model:
    """10 classes; classes 0 and 1 share a weight column up to 1e-4, and lead every other class by a margin."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 32])
    w, bias = tied_classes(rng)
    logits = tape.op("Gemm", [x, tape.initializer(ir.tensor(w, name="w")),
                              tape.initializer(ir.tensor(bias, name="b"))], name="classifier")
    logits.name = "logits"
    return to_model(tape, [x], [logits])


def test_the_gate_fails_when_cosine_holds_but_answers_change(rng, tmp_path, capsys):
    model = _near_tie_classifier(rng)
    data = {"x": np.abs(rng.normal(0, 1, (400, 32))).astype(np.float32)}
    report = onnxq.quantize(model, data).report
    [logits] = report.verification.outputs
    # Measured (seeded, AVX2): cosine 0.999999, yet 19 of the 40 held-out answers flip between the two tied classes
    # (agreement 0.525); bounded loosely since other CPUs' kernels round a few ties the other way.
    assert logits.metrics.cosine_mean > 0.9999 and report.passed
    assert logits.metrics.decisions == 40 and logits.metrics.argmax_agreement <= 0.75
    path = tmp_path / "classifier.onnx"
    save_model(model, path)
    np.savez(tmp_path / "data.npz", **data)
    code = main([str(path), "--calib", str(tmp_path / "data.npz"), "--tolerance", "logits:argmax=0.99",
                 "--no-fallback", "-o", str(tmp_path / "q.onnx")])
    out = capsys.readouterr().out
    assert code == 1 and "argmax agreement" in out and "decisions changed" in out and "OUT OF TOLERANCE" in out
