"""The named values of a model batch by batch (calibration.channels.values_per_batch, which SmoothQuant's
statistics and GPTQ's moments read) come in pieces of at most VALUES_BUDGET bytes, measured on the first sample:
the same values, in the same order, as whole batches (to float32 rounding)."""

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
    assert [len(p["hidden"]) for p in pieces] == [1, 3, 3, 3, 3, 3, 3, 1]  # the first sample measures them
    np.testing.assert_array_equal(np.concatenate([p["x"] for p in pieces]), np.concatenate([w["x"] for w in whole]))
    # MLAS sums a one-row MatMul in another order than a ten-row one: equal to float32 rounding.
    np.testing.assert_allclose(np.concatenate([p["hidden"] for p in pieces]),
                               np.concatenate([w["hidden"] for w in whole]), rtol=1e-5, atol=1e-5)


def test_a_model_with_a_fixed_batch_size_runs_whole_batches(rng, monkeypatch):
    monkeypatch.setattr(channels, "VALUES_BUDGET", 1)
    batches = [{"x": rng.normal(0, 1, (4, 32)).astype(np.float32)}]
    assert [len(p["hidden"]) for p in _values(_model(rng, batch_dim=4), batches)] == [4]
