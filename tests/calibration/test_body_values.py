"""Calibration observes values inside If / Loop / Scan bodies: each is threaded out of its body
as a bag (calibration.bodies), and its observer must see exactly what the body computed — every execution, every
iteration, nested too — and nothing where the body did not run. The graph's arithmetic is exact in float32 (×2,
+1, ×0.5, negation), so the numpy reference is bit-equal."""

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxq.calibration import collect_observers
from onnxq.numerics import TensorObserver

C = 4
BINS = 64


def _const(name: str, value: float):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float32), name))


def _loop_signature(scan_output: str) -> tuple[list, list]:
    """A Loop body's inputs (i, c_in, s_in) and outputs (c_out, s_out, a float scan output)."""
    inputs = [helper.make_tensor_value_info("i", TensorProto.INT64, []),
              helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
              helper.make_tensor_value_info("s_in", TensorProto.FLOAT, None)]
    outputs = [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
               helper.make_tensor_value_info("s_out", TensorProto.FLOAT, None),
               helper.make_tensor_value_info(scan_output, TensorProto.FLOAT, None)]
    return inputs, outputs


def _model() -> ir.Model:
    """y = 2x; If (flag) t = y + 1 else e = -3y; Loop (trip) s ← 0.5 s + 1 from y, with h = 0.5 s and, in an If
    on the carried condition, g = -h; Scan over x's rows: acc ← acc + x_t (v), scan output w = 3 x_t."""
    then = helper.make_graph([_const("one", 1.0), helper.make_node("Add", ["y", "one"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([_const("m3", -3.0), helper.make_node("Mul", ["y", "m3"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nested = helper.make_graph([helper.make_node("Neg", ["h"], ["g"])], "nested", [],
                               [helper.make_tensor_value_info("g", TensorProto.FLOAT, None)])
    skip = helper.make_graph([helper.make_node("Identity", ["h"], ["g_else"])], "skip", [],
                             [helper.make_tensor_value_info("g_else", TensorProto.FLOAT, None)])
    loop = helper.make_graph(
        [_const("half", 0.5), _const("one_l", 1.0), helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Mul", ["s_in", "half"], ["h"]), helper.make_node("Add", ["h", "one_l"], ["s_out"]),
         helper.make_node("If", ["c_in"], ["g_out"], then_branch=nested, else_branch=skip),
         helper.make_node("Identity", ["g_out"], ["scanned"])],
        "loop", *_loop_signature("scanned"))
    scan = helper.make_graph(
        [_const("three", 3.0), helper.make_node("Add", ["acc_in", "x_t"], ["v"]),
         helper.make_node("Identity", ["v"], ["acc_out"]), helper.make_node("Mul", ["x_t", "three"], ["w"])],
        "scan", [helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [C]),
                 helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [C])],
        [helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [C]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [C])])
    graph = helper.make_graph(
        [_const("two", 2.0), helper.make_node("Mul", ["x", "two"], ["y"]),
         helper.make_node("If", ["flag"], ["z"], then_branch=then, else_branch=other),
         helper.make_node("Loop", ["trip", "go", "y"], ["s_final", "stacked"], body=loop),
         helper.make_node("Scan", ["zeros", "x"], ["acc_final", "w_all"], body=scan, num_scan_inputs=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", C]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
         helper.make_tensor_value_info("trip", TensorProto.INT64, []),
         helper.make_tensor_value_info("go", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
         for n in ("z", "s_final", "stacked", "acc_final", "w_all")],
        [numpy_helper.from_array(np.zeros(C, np.float32), "zeros")])
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


NAMES = ["y", "t", "e", "s_in", "h", "g", "v", "x_t", "w"]


def _batch(seed: int, flag: bool, trip: int, go: bool = True) -> dict[str, np.ndarray]:
    x = np.random.default_rng(seed).normal(0, 1, (5, C)).astype(np.float32)
    return {"x": x, "flag": np.array(flag), "trip": np.array(trip, np.int64), "go": np.array(go)}


def _reference(batch: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    """Per name, every array the body computes on the batch, in execution order."""
    x, seen = batch["x"], {n: [] for n in NAMES}
    y = x * np.float32(2)
    seen["y"].append(y)
    seen["t" if batch["flag"] else "e"].append(y + np.float32(1) if batch["flag"] else y * np.float32(-3))
    s, go = y, bool(batch["go"])
    for _ in range(int(batch["trip"])):
        if not go:
            break
        seen["s_in"].append(s)
        h = s * np.float32(0.5)
        seen["h"].append(h)
        seen["g"].append(-h)
        s = h + np.float32(1)
    acc = np.zeros(C, np.float32)
    for row in x:
        seen["x_t"].append(row)
        acc = acc + row
        seen["v"].append(acc)
        seen["w"].append(row * np.float32(3))
    return seen


@pytest.mark.parametrize("bins", [None, BINS], ids=["extremes reduced in the graph", "histograms"])
def test_every_execution_of_every_body_value_is_observed(bins):
    batches = [_batch(1, True, 3), _batch(2, False, 2), _batch(3, True, 0)]
    got = collect_observers(_model(), NAMES, batches, histogram_bins=bins)
    want = {n: TensorObserver(bins) for n in NAMES}
    for batch in batches:
        for name, arrays in _reference(batch).items():
            if arrays:  # one observation per batch: all its executions together
                want[name].observe(np.concatenate([a.reshape(-1) for a in arrays]))
    for name in NAMES:
        assert got[name].state() == want[name].state(), name
    # Counted elements, as a check of the reference itself: the Loop ran 3 + 2 + 0 times over 5 × 4 values.
    assert got["h"].count == 5 * C * 5 and got["x_t"].count == 3 * 5 * C and got["e"].count == 5 * C


def test_a_body_that_never_runs_leaves_its_observer_empty():
    """flag always true: the else branch never runs; trip 0 and a false start condition: no Loop iteration."""
    got = collect_observers(_model(), NAMES, [_batch(1, True, 0), _batch(2, True, 4, go=False)])
    assert {n for n, o in got.items() if o.empty} == {"e", "s_in", "h", "g"}
    assert got["t"].count == 2 * 5 * C and got["w"].count == 2 * 5 * C


def test_the_model_given_is_not_changed():
    model = _model()
    before = ir.to_proto(model).SerializeToString()
    collect_observers(model, NAMES, [_batch(1, True, 2)])
    assert ir.to_proto(model).SerializeToString() == before


def _scan_with_branch() -> ir.Model:
    """A Scan over x's rows whose body negates a row in an If only where the row sums above 0: the value inside
    the If exists in some iterations and not in others."""
    then = helper.make_graph([helper.make_node("Neg", ["x_t"], ["neg"])], "then", [],
                             [helper.make_tensor_value_info("neg", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x_t"], ["same"])], "else", [],
                              [helper.make_tensor_value_info("same", TensorProto.FLOAT, None)])
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["x_t"], ["total"], keepdims=0),
         helper.make_node("Greater", ["total", "zero"], ["positive"]),
         helper.make_node("If", ["positive"], ["w"], then_branch=then, else_branch=other),
         helper.make_node("Identity", ["acc_in"], ["acc_out"])],
        "scan", [helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [C]),
                 helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [C])],
        [helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [C]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [C])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["zeros", "x"], ["acc", "w_all"], body=body, num_scan_inputs=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", C])],
        [helper.make_tensor_value_info("w_all", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.zeros(C, np.float32), "zeros"),
         numpy_helper.from_array(np.array(0, np.float32), "zero")])
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def test_a_scan_iteration_without_the_value_still_counts_right_in_the_graph_reduction():
    """Reduced per iteration to one element each (+inf / -inf / 0 where the branch did not run), the extremes are
    exact."""
    x = np.random.default_rng(0).normal(size=(6, C)).astype(np.float32)
    negated = -x[x.sum(axis=1) > 0]
    got = collect_observers(_scan_with_branch(), ["neg"], [{"x": x}])["neg"]
    assert (got.min, got.max, got.count) == (float(negated.min()), float(negated.max()), negated.size)
    assert 0 < negated.size < x.size  # the seed gives both kinds of iteration


def test_elements_that_change_size_across_scan_iterations_leave_the_value_unobserved(caplog):
    """Flattened, the value has 4 elements in some iterations and none in others: ORT's scan output refuses that,
    so calibration runs again without the bodies' values (their nodes go dynamic), says so, and goes on."""
    x = np.random.default_rng(0).normal(size=(6, C)).astype(np.float32)
    with caplog.at_level("WARNING", logger="onnxq.calibration.runner"):
        got = collect_observers(_scan_with_branch(), ["neg", "x"], [{"x": x}, {"x": x[:3]}], histogram_bins=BINS)
    assert got["neg"].empty and got["x"].count == 9 * C
    assert "rejects the bodies' values" in caplog.text and "trying none" in caplog.text


def _loop_with_branch(steps: int) -> ir.Model:
    """A Loop whose body negates the carried row in an If on even iterations only, and halves it every
    iteration."""
    then = helper.make_graph([helper.make_node("Neg", ["s_in"], ["neg"])], "then", [],
                             [helper.make_tensor_value_info("neg", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["s_in"], ["same"])], "else", [],
                              [helper.make_tensor_value_info("same", TensorProto.FLOAT, None)])
    body = helper.make_graph(
        [_const("half", 0.5), helper.make_node("Mod", ["i", "two"], ["parity"]),
         helper.make_node("Equal", ["parity", "zero"], ["even"]),
         helper.make_node("If", ["even"], ["unused"], then_branch=then, else_branch=other),
         helper.make_node("Mul", ["s_in", "half"], ["s_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "loop", *_loop_signature("unused"))
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", "", "x"], ["s_final", "all"], body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", C])],
        [helper.make_tensor_value_info("s_final", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(steps, np.int64), "trip"), numpy_helper.from_array(np.array(2), "two"),
         numpy_helper.from_array(np.array(0), "zero")])
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


@pytest.mark.parametrize("bins", [None, BINS], ids=["extremes reduced in the graph", "histograms"])
def test_a_loop_whose_iterations_differ_in_size_is_observed_through_an_accumulator(bins, caplog):
    """Stacked per iteration, the If's value has 4 elements on even steps and none on odd ones: ORT refuses the
    elements that way, and the Loop then carries an accumulator — exact all the same (reduced, every iteration is
    one element: stacking works)."""
    x = np.random.default_rng(1).normal(size=(5, C)).astype(np.float32)
    want = TensorObserver(bins)
    want.observe(np.concatenate([-(x * np.float32(0.5) ** step).reshape(-1) for step in (0, 2, 4)]))
    with caplog.at_level("WARNING", logger="onnxq.calibration.runner"):
        got = collect_observers(_loop_with_branch(5), ["neg"], [{"x": x}], histogram_bins=bins)["neg"]
    assert got.state() == want.state()
    assert ("trying carried" in caplog.text) == (bins is not None) and "trying none" not in caplog.text
