"""SmoothQuant on the float graph: the smoothed model computes what the original does (max abs difference at most
1e-5 of the output's magnitude: float32 rounding of s · W and x / s), whatever absorbs 1 / s; the scales and the α
search are deterministic."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import node_named, to_model, weight

from onnxq import QuantConfig
from onnxq.calibration.channels import collect_channel_stats
from onnxq.handlers import plan_model
from onnxq.numerics.smoothing import smoothing_scales
from onnxq.passes.smoothing.graph import SmoothPass
from onnxq.smoothing.choice import choose_smoothing, smoothable_groups
from onnxq.io.model_sessions import make_session

K = 16


def _input(rng, shape=(2, 6, K)):
    x = rng.normal(0, 1, shape).astype(np.float32)
    x[..., 3] *= 25.0  # an outlier channel, the reason to smooth
    return x


def _smooth(model, x, alpha=0.5):
    plans, _ = plan_model(model.graph, QuantConfig(), "static")
    candidates = smoothable_groups(plans)
    stats = collect_channel_stats(model, {c.activation.name: c.channel_axis for c in candidates}, [{"x": x}])
    groups, choices = choose_smoothing(candidates, stats, alpha)
    return SmoothPass(groups)(model).absorbed, choices


def _assert_equivalent(original, smoothed, x):
    expected = make_session(original, optimize=False).run(None, {"x": x})
    got = make_session(smoothed, optimize=False).run(None, {"x": x})
    for e, g in zip(expected, got):
        assert np.abs(e - g).max() <= 1e-5 * np.abs(e).max()


def _layer_norm_qkv(rng, residual=False):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["b", "t", K])
    gamma, beta = weight(tape, rng, "gamma", (K,)), weight(tape, rng, "beta", (K,))
    normed = tape.op("LayerNormalization", [x, gamma, beta], {"axis": -1}, name="ln")
    outs = [tape.op("MatMul", [normed, weight(tape, rng, f"w_{n}", (K, 8))], name=n) for n in "qkv"]
    if residual:  # the normalized value also feeds a residual Add: the norm cannot take 1 / s
        outs.append(tape.op("Add", [normed, x], name="residual"))
    return to_model(tape, [x], outs)


def test_layer_norm_takes_the_scales_shared_by_q_k_v(rng):
    model, x = _layer_norm_qkv(rng), _input(rng)
    original = model.clone()
    absorbed, choices = _smooth(model, x)
    assert list(absorbed.values()) == ["LayerNormalization ln scale"]
    assert [c.alpha for c in choices] == [0.5]
    q, k = node_named(model, "q"), node_named(model, "k")
    assert q.inputs[0] is k.inputs[0] and q.inputs[0].producer().op_type == "LayerNormalization"
    assert "Mul" not in [n.op_type for n in model.graph]
    _assert_equivalent(original, model, x)


def _builder_norms(rng):
    """The genai builder's layer boundary: SkipSimplifiedLayerNormalization (com.microsoft) whose normalized output
    feeds gate / up and whose residual sum (output 3) feeds the next Add, then the ONNX-domain
    SimplifiedLayerNormalization it writes (ORT registers it there) feeding q / k / v."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["b", "t", K])
    skip = tape.op("Relu", [x], name="skip")
    outs = tape.op_multi_out("SkipSimplifiedLayerNormalization", [x, skip, weight(tape, rng, "g1", (K,))],
                             {"epsilon": 1e-5}, num_outputs=4, domain="com.microsoft", name="skip_norm")
    mlp = [tape.op("MatMul", [outs[0], weight(tape, rng, f"w_{n}", (K, 8))], name=n) for n in ("gate", "up")]
    residual = tape.op("Add", [outs[3], x], name="residual")
    normed = tape.op("SimplifiedLayerNormalization", [residual, weight(tape, rng, "g2", (K,))],
                     {"axis": -1, "epsilon": 1e-5}, name="norm")
    attn = [tape.op("MatMul", [normed, weight(tape, rng, f"w_{n}", (K, 8))], name=n) for n in "qkv"]
    graph = ir.Graph([x], [*mlp, *attn, residual], nodes=tape.nodes, initializers=tape.initializers,
                     opset_imports={"": 17, "com.microsoft": 1})
    return ir.Model(graph, ir_version=8)


def test_the_builders_norms_take_the_scales_and_keep_their_residual_sum(rng):
    """Their γ takes 1 / s; the residual sum, which γ does not touch, keeps its readers (it used to block the
    absorption, costing a genai model an inserted Mul per norm)."""
    model, x = _builder_norms(rng), _input(rng)
    original = model.clone()
    absorbed, _ = _smooth(model, x)
    assert sorted(absorbed.values()) == ["SimplifiedLayerNormalization norm scale",
                                         "SkipSimplifiedLayerNormalization skip_norm scale"]
    assert "Mul" not in [n.op_type for n in model.graph]
    _assert_equivalent(original, model, x)


def test_inserted_mul_when_the_norm_output_has_other_readers(rng):
    model, x = _layer_norm_qkv(rng, residual=True), _input(rng)
    original = model.clone()
    absorbed, _ = _smooth(model, x)
    assert list(absorbed.values()) == ["inserted Mul"]
    mul = node_named(model, "q").inputs[0].producer()
    assert mul.op_type == "Mul" and node_named(model, "residual").inputs[0].producer().op_type == "LayerNormalization"
    _assert_equivalent(original, model, x)


def _decomposed_rmsnorm_swiglu(rng):
    """Pow → ReduceMean → Add → Sqrt → Div → Mul → Mul by γ (as exporters emit RMSNorm), then gate/up, SiLU(gate)·up
    and down: the LLaMA MLP."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["b", "t", K])

    def const(name, value):
        return tape.initializer(ir.tensor(np.array(value, np.float32), name=name))

    mean = tape.op("ReduceMean", [tape.op("Pow", [x, const("two", 2.0)])], {"axes": [-1], "keepdims": 1})
    inverse = tape.op("Div", [const("one", 1.0), tape.op("Sqrt", [tape.op("Add", [mean, const("eps", 1e-6)])])])
    normed = tape.op("Mul", [weight(tape, rng, "gamma", (K,)), tape.op("Mul", [x, inverse])], name="gamma_mul")
    gate = tape.op("MatMul", [normed, weight(tape, rng, "w_gate", (K, 32))], name="gate")
    up = tape.op("MatMul", [normed, weight(tape, rng, "w_up", (K, 32))], name="up")
    act = tape.op("Mul", [gate, tape.op("Sigmoid", [gate])], name="silu")
    down = tape.op("MatMul", [tape.op("Mul", [act, up], name="glu"), weight(tape, rng, "w_down", (32, K))],
                   name="down")
    return to_model(tape, [x], [down])


def test_decomposed_rmsnorm_gamma_and_up_projection_columns_take_the_scales(rng):
    model, x = _decomposed_rmsnorm_swiglu(rng), _input(rng)
    original = model.clone()
    absorbed, choices = _smooth(model, x)
    assert sorted(absorbed.values()) == ["MatMul up output columns", "Mul gamma_mul constant"]
    assert len(choices) == 2  # {gate, up} share one s; down has its own
    assert not any(n.op_type == "Mul" and n.name.endswith("_smooth_Mul") for n in model.graph)
    _assert_equivalent(original, model, x)


def test_matmul_with_bias_takes_the_scales_of_the_next_matmul(rng):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["b", "t", K])
    hidden = tape.op("Add", [tape.op("MatMul", [x, weight(tape, rng, "w1", (K, 24))], name="first"),
                             weight(tape, rng, "b1", (24,))], name="bias")
    y = tape.op("MatMul", [hidden, weight(tape, rng, "w2", (24, 8))], name="second")
    model, x_data = to_model(tape, [x], [y]), _input(rng)
    x_data = x_data @ rng.normal(0, 1, (K, K)).astype(np.float32)
    original = model.clone()
    absorbed, _ = _smooth(model, x_data)
    # `first` reads the graph input x: nothing can take its scales but an inserted Mul.
    assert "MatMul first output columns and Add bias bias" in absorbed.values()
    assert "inserted Mul" in absorbed.values()
    _assert_equivalent(original, model, x_data)


def test_smoothing_scales_formula_and_guards():
    s = smoothing_scales(np.array([4.0, 9.0, 0.0, 1.0]), np.array([1.0, 4.0, 2.0, 0.0]), 0.5)
    np.testing.assert_allclose(s, [2.0, 1.5, 1.0, 1.0], rtol=1e-7)  # √4/√1, √9/√4; zero channels keep 1
    assert smoothing_scales(np.array([1e12]), np.array([1e-12]), 0.9)[0] == pytest.approx(1e4)  # clipped
    with pytest.raises(ValueError):
        smoothing_scales(np.ones(2), np.ones(2), 1.5)


def test_alpha_search_is_deterministic_and_prefers_smoothing_for_outlier_channels(rng):
    x = _input(rng, (4, 32, K))
    x[..., 7] *= 40.0
    first = _decomposed_rmsnorm_swiglu(rng)
    second = first.clone()
    _, choices_a = _smooth(first, x, alpha=None)
    _, choices_b = _smooth(second, x, alpha=None)
    assert [(c.alpha, c.errors) for c in choices_a] == [(c.alpha, c.errors) for c in choices_b]
    gate_up = choices_a[0]
    # With two outlier channels (×25, ×40) per-tensor activations lose most rows: some α must beat no smoothing.
    assert gate_up.alpha is not None and gate_up.errors[gate_up.alpha] < 0.5 * gate_up.errors[None]


def test_the_calibration_cache_holds_smoothing_statistics_of_the_float_model(samples_dir, tmp_path):
    import onnxq
    from onnxq.errors import CalibrationDataError

    model, data = samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz"
    off = onnxq.VerifyConfig(enabled=False)
    per_token = onnxq.QuantConfig(activation_granularity="per-token", smooth="auto", verify=off)
    direct = onnxq.quantize(model, data, config=per_token).report
    cache = tmp_path / "cache.json"
    written = onnxq.quantize(model, data, config=per_token, calibration_cache=cache).report
    # Per token needs no ranges: the cache alone smooths, with the same α per activation as the data did.
    from_cache = onnxq.quantize(model, None, config=per_token, calibration_cache=cache).report
    assert [(a.activation, a.alpha) for a in from_cache.smoothing] == \
        [(a.activation, a.alpha) for a in direct.smoothing] == [(a.activation, a.alpha) for a in written.smoothing]
    assert any("smoothing statistics from calibration cache" in n for n in from_cache.notes)
    # The cache describes the float model: an unsmoothed static run reads its ranges.
    plain = onnxq.quantize(model, data, config=onnxq.QuantConfig(verify=off)).report
    cached = onnxq.quantize(model, None, config=onnxq.QuantConfig(verify=off), calibration_cache=cache).report
    assert cached.ranges == plain.ranges
    # Static ranges after smoothing come from the smoothed graph: the cache cannot supply them.
    with pytest.raises(onnxq.errors.ConfigError, match="static ranges after smoothing"):
        onnxq.quantize(model, None, config=onnxq.QuantConfig(smooth=0.5, verify=off), calibration_cache=cache)
    # A cache written without smoothing has no statistics for it.
    bare = tmp_path / "bare.json"
    onnxq.calibrate(model, data).save(bare)
    with pytest.raises(CalibrationDataError, match="no smoothing statistics"):
        onnxq.quantize(model, data, config=per_token, calibration_cache=bare)


def test_smoothing_statistics_of_shards_merge_to_those_of_all_the_data(samples_dir):
    import onnxq

    model = samples_dir / "tiny_transformer.onnx"
    data = dict(np.load(samples_dir / "tiny_transformer_calib.npz"))
    config = onnxq.QuantConfig(smooth="auto")
    halves = [{k: v[:64] for k, v in data.items()}, {k: v[64:] for k, v in data.items()}]
    merged = onnxq.merge_calibrations([onnxq.calibrate(model, half, config=config) for half in halves])
    whole = onnxq.calibrate(model, data, config=config)
    assert set(merged.channels) == set(whole.channels) and len(whole.channels) == 4
    for name, stats in whole.channels.items():
        np.testing.assert_array_equal(merged.channels[name].absmax, stats.absmax)  # exact
        assert merged.channels[name].seen == stats.seen and merged.channels[name].rows.shape == stats.rows.shape
    assert merged.copy().channels.keys() == merged.channels.keys()  # through JSON and back


@pytest.mark.parametrize("piece_bytes", [8 << 20, 300 << 10], ids=["whole", "pieces"])
def test_scaled_weights_go_to_the_spill_file_as_they_are_made(rng, monkeypatch, piece_bytes):
    """A large model's scaled weights (a second copy of its products') are written to the run's spill file one by
    one, a piece of rows at a time (300 kB: seven pieces of each 2 MiB weight), not held until the next spill; the
    model computes exactly what the in-memory smoothing gives."""
    import onnxq.passes.smoothing.graph as smooth_module
    from onnxq.io.spill import SPILL_TENSOR_MIN_BYTES, SpillFile

    monkeypatch.setattr(smooth_module, "_PIECE_BYTES", piece_bytes)

    width = 512  # 512 × 1024 float32 weights: 2 MiB each, over the spill file's per-tensor minimum
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["b", width])
    gamma, beta = weight(tape, rng, "gamma", (width,)), weight(tape, rng, "beta", (width,))
    normed = tape.op("LayerNormalization", [x, gamma, beta], {"axis": -1}, name="ln")
    outs = [tape.op("MatMul", [normed, weight(tape, rng, f"w_{n}", (width, 2 * width))], name=n) for n in "qk"]
    model = to_model(tape, [x], outs)
    sample = rng.normal(0, 1, (8, width)).astype(np.float32)
    sample[:, 5] *= 30.0
    plans, _ = plan_model(model.graph, QuantConfig(), "static")
    candidates = smoothable_groups(plans)
    stats = collect_channel_stats(model, {c.activation.name: c.channel_axis for c in candidates}, [{"x": sample}])
    groups, _ = choose_smoothing(candidates, stats, 0.5)
    in_memory, spilled, spill = model.clone(), model.clone(), SpillFile()
    SmoothPass(_rebound(groups, in_memory))(in_memory)
    SmoothPass(_rebound(groups, spilled), stored_rows=spill.stored_rows)(spilled)
    try:
        scaled = [v for n, v in spilled.graph.initializers.items() if n.endswith("_smoothed")
                  and v.const_value.nbytes >= SPILL_TENSOR_MIN_BYTES]
        assert len(scaled) == 2 and all(isinstance(v.const_value, ir.ExternalTensor) for v in scaled)
        for name, value in in_memory.graph.initializers.items():
            np.testing.assert_array_equal(spilled.graph.initializers[name].const_value.numpy(),
                                          value.const_value.numpy())
    finally:
        spill.close(None)


@pytest.mark.parametrize("op,shape,attributes", [
    ("MatMul", (K, 40), {}),
    ("Gemm", (40, K), {"transB": 1}),
    ("Conv", (12, K // 4, 3, 3), {"group": 4}),
], ids=["matmul", "gemm-transB", "grouped-conv"])
def test_a_weight_scaled_in_pieces_is_the_weight_scaled_whole(rng, op, shape, attributes):
    """scaled_pieces: the rows of s · W a few at a time (3 rows' bytes a piece), concatenated, bit for bit the
    whole product — each piece takes the factor of its own rows (MatMul's K, a Conv's output channels) or all of
    it (Gemm transB's K along the columns)."""
    from onnxq.passes.smoothing.weights import scale_input_channels, scaled_pieces

    w = rng.normal(0, 1, shape).astype(np.float32)
    node = ir.node(op, [ir.val("x"), ir.Value(name="w", const_value=ir.tensor(w))], attributes)
    s = rng.uniform(0.5, 4.0, K).astype(np.float32)
    row_bytes = 4 * int(np.prod(shape[1:]))
    pieces = list(scaled_pieces(node, w, s, 3 * row_bytes))
    assert [len(p) for p in pieces] == [3] * (shape[0] // 3) + ([shape[0] % 3] if shape[0] % 3 else [])
    np.testing.assert_array_equal(np.concatenate(pieces), scale_input_channels(node, w, s))


_REFUSING_DISK_CHILD = """
import resource, signal, sys
import numpy as np
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (3 << 20, 3 << 20))
import onnx_ir as ir
from onnxq.io.spill import SpillFile
rows = np.arange(4 << 18, dtype=np.float32).reshape(1024, 1024)  # 4 MiB, written 1 MiB a piece
spill = SpillFile()
try:
    first = spill.stored_rows("w", rows.shape, iter(np.split(rows, 4)))  # the fourth MiB is refused
    second = spill.stored_rows("v", (256, 1024), iter([rows[:256] + 1]))  # 1 MiB where the first began: fits
    assert type(first) is ir.Tensor and type(second) is ir.ExternalTensor, (type(first), type(second))
    np.testing.assert_array_equal(first.numpy(), rows)
    np.testing.assert_array_equal(second.numpy(), rows[:256] + 1)
    assert first.name == "w" and first.shape == ir.Shape([1024, 1024])
finally:
    spill.close(None)
print("ok")
"""


def test_a_weight_the_disk_refuses_midway_stays_in_memory_whole(tmp_path):
    """stored_rows on a disk that fills after three of four pieces: the tensor is in memory, its pieces written so
    far read back, the rest as they come — the same values; the next weight is written where the refused one
    began."""
    import subprocess
    import sys
    from pathlib import Path

    run = subprocess.run([sys.executable, "-c", _REFUSING_DISK_CHILD], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2], env={**__import__("os").environ,
                                                                       "TMPDIR": str(tmp_path)})
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def _rebound(groups, model):
    """The groups with their activation and nodes looked up by name in `model` (a clone of the one planned)."""
    from onnxq.passes.smoothing.graph import SmoothGroup

    values = {v.name: v for n in model.graph for v in n.outputs}
    nodes = {n.name: n for n in model.graph}
    return [SmoothGroup(values[g.activation.name], tuple(nodes[n.name] for n in g.nodes), g.scales) for g in groups]


def test_the_alpha_search_error_is_the_same_a_slice_of_channels_at_a_time(rng, monkeypatch):
    """The output error of a choice, summed over slices of output channels (each its own scale), equals the error
    of the whole weight at once (float32 sums in another order: within 1e-5 relative)."""
    import onnxq.smoothing.choice as smoothing

    model, x = _layer_norm_qkv(rng), _input(rng)
    plans, _ = plan_model(model.graph, QuantConfig(), "static")
    candidates = smoothable_groups(plans)
    stats = collect_channel_stats(model, {c.activation.name: c.channel_axis for c in candidates}, [{"x": x}])
    _, whole = choose_smoothing(candidates, stats, None)
    monkeypatch.setattr(smoothing, "_SLICE_BYTES", K * 4 * 3)  # 3 output channels a slice (of 8)
    _, sliced = choose_smoothing(candidates, stats, None)
    assert [c.alpha for c in sliced] == [c.alpha for c in whole]
    for a, b in zip(whole, sliced):
        for alpha, error in a.errors.items():
            assert b.errors[alpha] == pytest.approx(error, rel=1e-5)
