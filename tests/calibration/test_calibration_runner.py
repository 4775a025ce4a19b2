"""Streamed MinMax calibration against a brute-force numpy reference."""

import numpy as np
import onnx_ir as ir
from conftest import to_model, weight

from onnxq.calibration import collect_observers, iter_batches


def test_minmax_ranges_equal_brute_force_over_all_batches(rng):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 6])
    w = weight(tape, rng, "w", (6, 5))
    h = tape.op("MatMul", [x, w])
    h.name = "h"
    y = tape.op("Relu", [h])
    y.name = "y"
    model = to_model(tape, [x], [y])
    data = rng.normal(0, 2, (37, 6)).astype(np.float32)
    seen = []
    observers = collect_observers(model, ["x", "h", "y"], iter_batches({"x": data}, 8), progress=seen.append)
    ranges = {n: o.range("minmax") for n, o in observers.items()}
    h_ref = data @ w.const_value.numpy()
    assert ranges["x"] == (float(data.min()), float(data.max()))
    np.testing.assert_allclose(ranges["h"], (h_ref.min(), h_ref.max()), rtol=1e-5)
    np.testing.assert_allclose(ranges["y"], (0.0, h_ref.max()), rtol=1e-5)
    assert seen == [8, 8, 8, 8, 5]
    assert [o.name for o in model.graph.outputs] == ["y"]  # the caller's model is not changed
