"""Per-sample figures (cosine per sample, its minimum, the sample count) on outputs whose samples are not on axis
0: a recurrent state [layers, batch, hidden], a time-major [time, batch, classes]. The axis is found on a batch's
outputs (their dims are often unnamed: silero's state is [2, ?, 128])."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.verify.metrics import MetricsAccumulator, Operand, SampleAxes, sample_axis


@pytest.mark.parametrize("shape, samples, axis", [
    ((8, 4), 8, 0), ((2, 8, 128), 8, 1), ((30, 8, 97), 8, 1), ((8,), 8, 0), ((), 1, 0),
    ((2, 2, 16), 2, 0),  # both could be: axis 0 is taken
    ((3, 5), 8, 0),  # none is: axis 0, as before
])
def test_the_samples_axis_is_the_first_whose_length_is_the_sample_count(shape, samples, axis):
    assert sample_axis(np.zeros(shape), samples) == axis


def test_the_first_batch_decides_for_the_smaller_last_one():
    axes = SampleAxes()
    assert axes.of("state", np.zeros((2, 8, 16)), 8) == 1
    assert axes.of("state", np.zeros((2, 2, 16)), 2) == 1  # alone, a batch of 2 would read as axis 0


def test_cosine_per_sample_on_axis_1():
    """Sample 0 is exact and sample 1 is negated, in a [2, batch, 3] state: per sample, cosines 1 and -1."""
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(2, 2, 3))
    quantized = reference.copy()
    quantized[:, 1] *= -1
    accumulator = MetricsAccumulator()
    accumulator.add(Operand(reference, 1), quantized)
    metrics = accumulator.result()
    assert metrics.samples == 2 and metrics.cosine_min == pytest.approx(-1.0) and metrics.cosine_mean == \
        pytest.approx(0.0, abs=1e-12)


def test_verification_counts_samples_of_a_state_output(tmp_path):
    """A model whose output stacks its result as a [1, batch, K] state: the verification counts its samples (the
    held-out ones), where axis 0 made every batch one sample."""
    k = 16
    w = np.random.default_rng(1).normal(0, 0.3, (k, k)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
         helper.make_node("Unsqueeze", ["y", "zero"], ["state"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
        [helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, "batch", k])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0]), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(2).normal(size=(64, k)).astype(np.float32)
    report = onnxq.quantize(model, {"x": x}, output=tmp_path / "q.onnx").report
    [output] = report.verification.outputs
    # 64 samples, every 10th held back (6), in one batch: axis 0 counted it as 1 sample.
    assert output.metrics.samples == 64 - report.calibration_samples == 6
    assert output.metrics.cosine_min < output.metrics.cosine_mean < 1.0
