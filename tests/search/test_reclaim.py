"""The fallback's reclaim: every float node of the bisection's prefix tried quantized again, costliest first, kept
quantized where the check still passes; and the multiply-adds that order the tries, from shape inference."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
import pytest

from onnxq.search.compute import product_costs
from onnxq.search.reclaim import reclaim


@dataclasses.dataclass(frozen=True)
class _Candidate:
    excluded: tuple[str, ...]
    passed: bool


def _needs(*sets: set[str]):
    """A check that passes when every node of some set is float, recording what it was asked."""
    asked = []

    def attempt(excluded: tuple[str, ...]) -> _Candidate:
        asked.append(excluded)
        return _Candidate(excluded, any(s <= set(excluded) for s in sets))
    return attempt, asked


def test_nodes_the_others_do_not_need_float_are_quantized_again_costliest_first():
    chosen = _Candidate(("a", "b", "c", "d"), True)  # the ranking's prefix: only b and d are needed float
    attempt, asked = _needs({"b", "d"})
    costs = {"a": 1.0, "b": 50.0, "c": 9.0, "d": 3.0}
    found = reclaim(chosen, costs, attempt, max_tries=64)
    assert asked == [("a", "c", "d"), ("a", "b", "d"), ("a", "b"), ("b", "d")]  # b, c, d, a by cost
    assert found.nodes == ("c", "a") and found.chosen.excluded == ("b", "d") and found.tries == 4


def test_of_two_sufficient_sets_the_greedy_search_keeps_the_cheaper_float():
    chosen = _Candidate(("big", "small1", "small2"), True)
    attempt, _ = _needs({"big"}, {"small1", "small2"})
    found = reclaim(chosen, {"big": 100.0, "small1": 1.0, "small2": 1.0}, attempt, max_tries=64)
    assert found.chosen.excluded == ("small1", "small2") and found.nodes == ("big",)


def test_tries_are_bounded_and_zero_changes_nothing():
    chosen = _Candidate(("a", "b", "c"), True)
    attempt, asked = _needs(set())
    assert reclaim(chosen, {}, attempt, max_tries=0).chosen is chosen and not asked
    found = reclaim(chosen, {}, attempt, max_tries=2)  # equal costs: the least harmful (last ranked) first
    assert asked == [("a", "b"), ("a",)] and found.nodes == ("c", "b") and found.tries == 2


def _conv_matmul_model() -> ir.Model:
    rng = np.random.default_rng(0)
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["N", 3, "H", "W"]))
    conv_w = ir.Value(name="conv_w", const_value=ir.tensor(rng.standard_normal((8, 3, 3, 3)).astype(np.float32)))
    conv = ir.node("Conv", [x, conv_w], attributes={"pads": [1, 1, 1, 1]}, name="conv")
    pool = ir.node("GlobalAveragePool", [conv.outputs[0]], name="pool")
    flat = ir.node("Flatten", [pool.outputs[0]], name="flat")
    fc_w = ir.Value(name="fc_w", const_value=ir.tensor(rng.standard_normal((8, 5)).astype(np.float32)))
    fc = ir.node("MatMul", [flat.outputs[0], fc_w], name="fc")
    fc.outputs[0].name = "y"
    graph = ir.Graph([x], [fc.outputs[0]], nodes=[conv, pool, flat, fc], initializers=[conv_w, fc_w],
                     opset_imports={"": 17})
    return ir.Model(graph, ir_version=8)


def test_multiply_adds_follow_the_batch_s_shapes_and_leave_the_model_alone():
    model = _conv_matmul_model()
    costs = product_costs(model, {"x": (2, 3, 10, 12)}, ["conv", "fc"])
    assert costs["conv"] == pytest.approx(2 * 8 * 10 * 12 * 3 * 3 * 3)  # every output position × Cin·kh·kw
    assert costs["fc"] == pytest.approx(2 * 5 * 8)
    assert [d if isinstance(d, int) else str(d) for d in model.graph.inputs[0].shape] == ["N", 3, "H", "W"]
    assert model.graph.node("conv").outputs[0].shape is None


def test_a_node_without_inferred_shapes_is_estimated_from_its_weight():
    model = _conv_matmul_model()
    costs = product_costs(model, {}, ["conv", "fc"])  # no shapes: both estimated, weight × typical positions (1)
    assert costs == {"conv": pytest.approx(8 * 3 * 3 * 3), "fc": pytest.approx(8 * 5)}
