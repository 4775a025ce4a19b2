"""Handler plans: which inputs, which axis, bias treatment, and the reasons for leaving nodes float."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import node_named, to_model, weight

from onnxq import QuantConfig
from onnxq.handlers import NodePlan, PlanContext, Skip, WeightSpec, handler_for, plan_model

STATIC = PlanContext(per_channel=True, mode="static", quantize_activation_matmul=False, gemm_bias="int32")


def _plan(node: ir.Node, ctx: PlanContext = STATIC):
    return handler_for(node)(node, ctx)


def _matmul_model(rng, weight_shape=(8, 5)):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 8])
    y = tape.op("MatMul", [x, weight(tape, rng, "w", weight_shape)], name="mm")
    return to_model(tape, [x], [y])


def test_matmul_weight_is_per_channel_on_output_features(rng):
    plan = _plan(node_named(_matmul_model(rng), "mm"))
    assert isinstance(plan, NodePlan)
    assert plan.activations == (0,)
    assert plan.weights == (WeightSpec(input_index=1, axis=1),)


def test_matmul_per_tensor_when_per_channel_is_off(rng):
    ctx = PlanContext(per_channel=False, mode="static", quantize_activation_matmul=False, gemm_bias="int32")
    assert _plan(node_named(_matmul_model(rng), "mm"), ctx).weights == (WeightSpec(1, None),)


def test_matmul_with_3d_constant_is_left_float_with_reason(rng):
    plan = _plan(node_named(_matmul_model(rng, (2, 8, 5)), "mm"))
    assert isinstance(plan, Skip) and "rank 3" in plan.reason


def _attention_model():
    tape = ir.tape.Tape()
    q = ir.val("q", ir.DataType.FLOAT, [2, 4, 8])
    k = ir.val("k", ir.DataType.FLOAT, [2, 8, 4])
    y = tape.op("MatMul", [q, k], name="scores")
    return to_model(tape, [q, k], [y])


def test_activation_matmul_switch():
    node = node_named(_attention_model(), "scores")
    skip = _plan(node)
    assert isinstance(skip, Skip) and skip.reason == "both inputs are activations (--quantize-attention quantizes them)"
    on = PlanContext(per_channel=True, mode="static", quantize_activation_matmul=True, gemm_bias="int32")
    plan = _plan(node, on)
    assert plan.activations == (0, 1) and plan.weights == ()
    dynamic = PlanContext(per_channel=True, mode="dynamic", quantize_activation_matmul=True, gemm_bias="int32")
    assert isinstance(_plan(node, dynamic), Skip)


def _gemm_model(rng, trans_b: int, bias_shape=(5,), alpha=1.0, beta=1.0):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 8])
    w = weight(tape, rng, "w", (5, 8) if trans_b else (8, 5))
    b = weight(tape, rng, "b", bias_shape)
    y = tape.op("Gemm", [x, w, b], {"transB": trans_b, "alpha": alpha, "beta": beta}, name="gemm")
    return to_model(tape, [x], [y])


@pytest.mark.parametrize("trans_b,axis", [(0, 1), (1, 0)])
def test_gemm_axis_follows_trans_b(rng, trans_b, axis):
    plan = _plan(node_named(_gemm_model(rng, trans_b), "gemm"))
    assert plan.weights == (WeightSpec(1, axis),)
    assert plan.bias_index == 2 and plan.bias_note is None


def test_gemm_bias_float_on_request_and_when_alpha_is_not_one(rng):
    node = node_named(_gemm_model(rng, 1), "gemm")
    as_float = PlanContext(per_channel=True, mode="static", quantize_activation_matmul=False, gemm_bias="float")
    plan = _plan(node, as_float)
    assert plan.bias_index is None and "requested" in plan.bias_note
    plan = _plan(node_named(_gemm_model(rng, 1, alpha=0.5), "gemm"))
    assert plan.bias_index is None and "alpha=0.5" in plan.bias_note


def test_gemm_bias_not_per_feature_stays_float(rng):
    plan = _plan(node_named(_gemm_model(rng, 1, bias_shape=(3, 5)), "gemm"))
    assert plan.bias_index is None and "one value per output feature" in plan.bias_note


def _gather_model(rng, rows: int):
    tape = ir.tape.Tape()
    ids = ir.val("ids", ir.DataType.INT64, ["batch", "seq"])
    y = tape.op("Gather", [weight(tape, rng, "table", (rows, 64)), ids], {"axis": 0}, name="embed")
    shape = tape.op("Shape", [y])
    dim = tape.op("Gather", [shape, tape.initializer(ir.tensor(np.array(0, np.int64), name="zero"))], name="dim")
    return to_model(tape, [ids], [y, dim])


def test_gather_on_constant_table_is_weight_only_per_row(rng):
    model = _gather_model(rng, 2048)
    plan = _plan(node_named(model, "embed"))
    assert plan.weight_only and plan.weights == (WeightSpec(0, 0),)
    assert _plan(node_named(model, "dim")) is None  # shape arithmetic: not even a candidate


def test_small_gather_table_is_left_float(rng):
    plan = _plan(node_named(_gather_model(rng, 16), "embed"))
    assert isinstance(plan, Skip) and "too small" in plan.reason


def test_planner_applies_exclusions_by_name_op_and_regex(rng):
    model = _gemm_model(rng, 1)
    for config, reason in [
        (QuantConfig(exclude_nodes=("gemm",)), "excluded by name"),
        (QuantConfig(exclude_op_types=("Gemm",)), "op type Gemm excluded"),
        (QuantConfig(exclude_regex="^ge"), "name matches exclude_regex '^ge'"),
    ]:
        plans, skips = plan_model(model.graph, config, "static")
        assert plans == [] and [s.reason for s in skips] == [reason]


def test_initializer_that_is_also_a_graph_input_is_not_constant(rng):
    model = _matmul_model(rng)
    model.graph.inputs.append(model.graph.initializers["w"])
    plan = _plan(node_named(model, "mm"))
    assert isinstance(plan, Skip) and "also a graph input" in plan.reason


@pytest.mark.parametrize("bad, found", [(np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")])
def test_one_non_finite_value_among_finite_ones_refuses_the_weight(rng, bad, found):
    """The weight's largest magnitude is read from its extremes (no copy of it): a single NaN or ±Inf still shows."""
    from onnxq.errors import UnsupportedModelError
    from onnxq.handlers.plan import unusable_weight

    model = _matmul_model(rng)
    node = node_named(model, "mm")
    values = rng.normal(0, 1, (8, 5)).astype(np.float32)
    values[3, 2] = bad
    with pytest.raises(UnsupportedModelError, match=f"holds {found}"):
        unusable_weight(node, node.inputs[1], ir.tensor(values))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_weight_of_tiny_values_of_either_sign_stays_float(rng, sign):
    from onnxq.handlers.plan import TINY_WEIGHT, unusable_weight

    model = _matmul_model(rng)
    node = node_named(model, "mm")
    values = np.zeros((8, 5), np.float32)
    values[1, 1] = sign * TINY_WEIGHT / 4
    assert "largest |weight| is 2.5e-31" in unusable_weight(node, node.inputs[1], ir.tensor(values))
    assert unusable_weight(node, node.inputs[1], ir.tensor(np.zeros((8, 5), np.float32))) is None
