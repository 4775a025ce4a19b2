"""Task-level agreement: the share of argmax decisions kept, and the share of float answers among the quantized top
k, as metrics and tolerances. A classifier whose two top classes are nearly tied keeps cosine ≈ 1 after int8
quantization while its answers change; the cosine gate passes it, the argmax gate does not, a top-2 gate does."""

import numpy as np
import onnx_ir as ir
from conftest import tied_classes, to_model

import onnxq
from onnxq.cli.main import main
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
    assert scalar.result().topk_agreement == (1.0,) * 10


def test_topk_agreement_ranks_the_float_answer_among_the_quantized_classes():
    reference = np.zeros((4, 12), np.float32)
    reference[np.arange(4), [0, 3, 7, 11]] = 1.0  # float answers: 0, 3, 7, 11
    quantized = np.tile(np.arange(12, dtype=np.float32)[::-1], (4, 1))  # class c ranked c (0 highest)
    quantized[3, 11] = quantized[3, 5]  # a tie with class 5 (rank 5): counted in the answer's favour
    accumulator = MetricsAccumulator()
    accumulator.add(reference, quantized)
    metrics = accumulator.result()
    # Ranks of the float answers: 0, 3, 7, 5 → top-1 1/4, top-4 2/4, top-6 3/4, top-8 4/4.
    assert metrics.argmax_agreement == 0.25
    assert [metrics.top(k) for k in (1, 3, 4, 5, 6, 7, 8, 10)] == [0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1.0, 1.0]


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
    # (agreement 0.525); bounded loosely since other CPUs' kernels round a few ties the other way. The default gate
    # judges the logits' top-1 and fails it; one node: the fallback cannot keep "all but one" float.
    assert logits.metrics.cosine_mean > 0.9999 and not report.passed
    assert logits.metrics.task == "top1" and any("top-1 agreement" in f for f in logits.failures)
    assert logits.metrics.decisions == 200 and logits.metrics.argmax_agreement <= 0.75  # half of 400 held out
    path = tmp_path / "classifier.onnx"
    save_model(model, path)
    np.savez(tmp_path / "data.npz", **data)
    code = main([str(path), "--calib", str(tmp_path / "data.npz"), "--tolerance", "logits:argmax=0.99",
                 "--no-fallback", "-o", str(tmp_path / "q.onnx")])
    out = capsys.readouterr().out
    assert code == 1 and "argmax agreement" in out and "decisions changed" in out and "OUT OF TOLERANCE" in out
    # Every flipped answer went to the tied class: all stay in the top 2, none in the top 1.
    assert logits.metrics.top(2) == 1.0 and logits.metrics.top(1) <= 0.75
    code = main([str(path), "--calib", str(tmp_path / "data.npz"), "--tolerance", "logits:top2=0.99",
                 "--task-metric", "numeric", "--no-fallback", "-o", str(tmp_path / "q2.onnx")])
    assert code == 0 and "within tolerance" in capsys.readouterr().out
    code = main([str(path), "--calib", str(tmp_path / "data.npz"), "--tolerance", "logits:top1=0.99",
                 "--no-fallback", "-o", str(tmp_path / "q1.onnx")])
    out = capsys.readouterr().out
    assert code == 1 and "top-1 agreement" in out and "outside the quantized top 1" in out


def test_a_topk_outside_1_to_10_is_refused_with_one_line(rng, tmp_path, capsys):
    path = tmp_path / "classifier.onnx"
    save_model(_near_tie_classifier(rng), path)
    for spec, words in (("logits:top11=0.9", "topk (topK=) = 11 is outside its range [1, 10]"),
                        ("logits:top0=0.9", "topk (topK=) = 0 is outside its range [1, 10]")):
        assert main([str(path), "-o", str(tmp_path / "q.onnx"), "--tolerance", spec]) == 2
        assert words in capsys.readouterr().err
        assert not (tmp_path / "q.onnx").exists()
