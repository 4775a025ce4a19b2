"""The named values of a model batch by batch (calibration.channels.values_per_batch, which SmoothQuant's
statistics and GPTQ's moments read) come in pieces of at most VALUES_BUDGET bytes, measured on the first sample and
cut from each batch's start:
the same values, in the same order, as whole batches (to float32 rounding). The calibration observers
(calibration.runner) run a batch in pieces of OBSERVED_BUDGET the same way, with the statistics of whole batches."""

import numpy as np
import onnx_ir as ir
from conftest import to_model, weight

from onnxq.calibration import channels


def _model(rng, batch_dim="batch"):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, [batch_dim, 32])
    hidden = tape.op("MatMul", [x, weight(tape, rng, "w1", (32, 64))])
    hidden.name = "hidden"
    y = tape.op("MatMul", [tape.op("Relu", [hidden]), weight(tape, rng, "w2", (64, 8))])
    y.name = "y"
    return to_model(tape, [x], [y])


def _values(model, batches):
    return list(channels.values_per_batch(model, ["hidden", "x"], batches))


def test_batches_come_in_pieces_within_the_budget_with_the_same_values(rng, monkeypatch):
    model = _model(rng)
    batches = [{"x": rng.normal(0, 1, (10, 32)).astype(np.float32)} for _ in range(2)]
    whole = _values(model, batches)
    monkeypatch.setattr(channels, "VALUES_BUDGET", 3 * 64 * 4)  # three samples' 'hidden'
    pieces = _values(model, batches)
    # A run of the first sample measures them; every batch is then cut from its start alike (a shard's first batch
    # as in the whole run: the second moments of its pieces merge exactly).
    assert [len(p["hidden"]) for p in pieces] == [3, 3, 3, 1, 3, 3, 3, 1]
    np.testing.assert_array_equal(np.concatenate([p["x"] for p in pieces]), np.concatenate([w["x"] for w in whole]))
    # MLAS sums a one-row MatMul in another order than a ten-row one: equal to float32 rounding.
    np.testing.assert_allclose(np.concatenate([p["hidden"] for p in pieces]),
                               np.concatenate([w["hidden"] for w in whole]), rtol=1e-5, atol=1e-5)


def test_a_model_with_a_fixed_batch_size_runs_whole_batches(rng, monkeypatch):
    monkeypatch.setattr(channels, "VALUES_BUDGET", 1)
    batches = [{"x": rng.normal(0, 1, (4, 32)).astype(np.float32)}]
    assert [len(p["hidden"]) for p in _values(_model(rng, batch_dim=4), batches)] == [4]


def _elementwise_model(rng):
    """h = 2x, r = Relu(h) (exact whatever the batch), then a MatMul."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 32])
    two = tape.initializer(ir.tensor(np.array(2.0, np.float32), name="two"))
    h = tape.op("Mul", [x, two])
    h.name = "h"
    r = tape.op("Relu", [h])
    r.name = "r"
    y = tape.op("MatMul", [r, weight(tape, rng, "w", (32, 8))])
    y.name = "y"
    return to_model(tape, [x], [y])


def test_observed_batches_run_in_pieces_give_the_whole_batches_statistics(rng, monkeypatch):
    """Histograms and channel statistics fetch whole values: past OBSERVED_BUDGET a batch runs in pieces (Xception,
    batches of 8: 3.9 GB → 0.56 GB peak, the same summary file), and each observer still sees the batch as one —
    its extremes once a batch (average MinMax), its histogram and count the same, bit for bit."""
    from onnxq.calibration import runner

    model = _elementwise_model(rng)
    batches = [{"x": rng.normal(0, 1, (10, 32)).astype(np.float32)} for _ in range(3)]

    def observed():
        return {n: o.state() for n, o in runner.collect_observers(model, ["h", "r"], batches, 512).items()}

    whole = observed()
    monkeypatch.setattr(runner, "OBSERVED_BUDGET", 3 * 2 * 32 * 4)  # three samples of h and r
    runs = []
    monkeypatch.setattr(runner.Exposed, "run", lambda self, batch, run=runner.Exposed.run: runs.append(
        len(batch["x"])) or run(self, batch))
    assert observed() == whole and whole["h"]["batches"] == 3
    assert runs == [1, 3, 3, 3] + [3, 3, 3, 1] * 2  # the first sample measures them
