"""Static Conv weights rounded by GPTQ on calibration data (weight_rounding = "gptq"; auto, the default, where a failing
check points: tests/steps/test_escalate.py): the second
moments of each Conv's im2col rows (calibration.moments), the same per-channel scales as rounding to nearest, a
smaller error on held-out inputs, and AVX2's pair limit kept."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

import onnxq
from correlated_cnn import correlated_inputs, two_conv_cnn
from onnxq.calibration.moments import WeightMoments
from onnxq.numerics.im2col import ConvGeometry, im2col
from onnxq.numerics.pairs import gemm_view, pair_sum_violations
from onnxq.io.model_sessions import make_session


@pytest.mark.parametrize("group", [1, 2])
def test_conv_moments_are_the_im2col_rows_second_moments(group):
    model, x = two_conv_cnn(group), correlated_inputs(np.random.default_rng(0), 6)
    moments = WeightMoments(model, {("w1", False): ["r"]}, lambda: [{"x": x[:4]}, {"x": x[4:]}], full=True)
    geometry = ConvGeometry((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), group)
    expected = []
    for g in range(group):
        rows = im2col(np.maximum(x, 0).astype(np.float64), geometry, 0, g)
        expected.append(rows.T @ rows / len(rows))
    got = moments.get(("w1", False))
    assert got.shape == ((72, 72) if group == 1 else (2, 36, 36))
    np.testing.assert_allclose(got, expected[0] if group == 1 else np.stack(expected), rtol=1e-5, atol=1e-6)


def test_a_sample_past_the_product_budget_sums_a_spread_subset_of_its_rows(monkeypatch):
    """A video ResNet's 3×3×3 Convs summed 75 G multiply-adds a clip; past the budget each sample gives a seeded subset
    of its rows, spread over its map: here 64 of 196 a sample (budget and floor lowered), the moments within 15 % of
    all rows' (relative Frobenius error; the subset's own sampling error) and the same on every run."""
    from onnxq.calibration import moments as moments_module

    monkeypatch.setattr(moments_module, "_SAMPLE_PRODUCT_MACS", 64 * 72 * 72)
    monkeypatch.setattr(moments_module, "_MIN_SAMPLE_ROWS", 16)
    model, x = two_conv_cnn(1), correlated_inputs(np.random.default_rng(0), 24)
    rows = im2col(np.maximum(x, 0).astype(np.float64), ConvGeometry((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1), 0, 0)
    full = rows.T @ rows / len(rows)

    def subset_moments() -> np.ndarray:
        moments = WeightMoments(model, {("w1", False): ["r"]}, lambda: [{"x": x[:12]}, {"x": x[12:]}], full=True)
        return moments.get(("w1", False))

    got = subset_moments()
    error = np.linalg.norm(got - full) / np.linalg.norm(full)
    assert 0 < error < 0.15
    assert np.array_equal(got, subset_moments())


def _weights(model: ir.Model) -> dict[str, np.ndarray]:
    return {v.name: v.const_value.numpy() for v in model.graph.initializers.values()}


@pytest.mark.parametrize("group", [1, 2])
def test_gptq_rounding_keeps_the_scales_and_lowers_the_error_on_held_outcorrelated_inputs(group):
    rng = np.random.default_rng(0)
    model, calibration, held_out = two_conv_cnn(group), {"x": correlated_inputs(rng, 64)}, correlated_inputs(rng, 32)
    want = make_session(model, optimize=False).run(None, {"x": held_out})[0]
    built, errors = {}, {}
    for rounding in ("nearest", "gptq"):
        config = onnxq.QuantConfig(weight_rounding=rounding, verify=onnxq.VerifyConfig(enabled=False))
        built[rounding] = onnxq.quantize(model, calibration, config=config).model
        got = make_session(built[rounding], optimize=False).run(None, {"x": held_out})[0]
        errors[rounding] = float(np.mean((got - want) ** 2))
    near, gptq = _weights(built["nearest"]), _weights(built["gptq"])
    scales = [n for n in near if n.endswith("_scale") and n.startswith("w")]
    assert scales and all(np.array_equal(near[n], gptq[n]) for n in scales)  # the same grid
    changed = [n for n in near if n.endswith("_quantized") and not np.array_equal(near[n], gptq[n])]
    assert changed  # the codes differ
    # Measured on this seed (weights and activations quantized): 0.050x nearest's squared error with one group,
    # 0.072x with two; the bar leaves room for other CPUs' kernels, not for a rounding that learned little.
    assert errors["gptq"] < 0.3 * errors["nearest"], errors
    for name in changed:  # the default target is portable: AVX2's pairs limited as im2col reads them
        assert not pair_sum_violations(gemm_view(gptq[name]), 1).any()


def test_the_command_line_chooses_the_rounding_and_the_report_says_which(tmp_path):
    import json

    from onnxq.cli.main import main

    model = tmp_path / "cnn.onnx"
    ir.save(two_conv_cnn(1), model)
    np.savez(tmp_path / "calib.npz", x=correlated_inputs(np.random.default_rng(0), 32))
    for rounding in ("auto", "nearest", "gptq"):  # auto: GPTQ only where a failing check points (none here)
        report = tmp_path / f"{rounding}.json"
        args = [str(model), "--calib", str(tmp_path / "calib.npz"), "-o", str(tmp_path / f"{rounding}.onnx"),
                "--report", str(report), "--no-verify"]
        assert main(args + ([] if rounding == "auto" else ["--weight-rounding", rounding])) == 0
        written = json.loads(report.read_text())
        assert written["config"]["weight_rounding"] == rounding
        assert any("rounded by GPTQ" in note for note in written["notes"]) == (rounding == "gptq")


@pytest.mark.parametrize("shapeless", [False, True], ids=["shaped", "shapeless"])
def test_a_conv_wider_than_gptqs_bound_is_rounded_to_nearest_and_the_note_says_so(tmp_path, monkeypatch, shapeless):
    """FCN-ResNet50's head (K = 18432) held 12 GB of float64 matrices in GPTQ: past GPTQ_MAX_K a Conv's weight is
    rounded to nearest, its XᵀX never collected, and the notes say how many and why (here the bound lowered to 71:
    conv1's K is 72, conv2's 16) — also where the weights' values carry no shape (PaddlePaddle's Constant nodes):
    K is read off the tensor."""
    from onnxq.steps import conv_methods

    monkeypatch.setattr(conv_methods, "GPTQ_MAX_K", 71)
    model, x = two_conv_cnn(1), correlated_inputs(np.random.default_rng(0), 32)
    if shapeless:
        for node in model.graph:
            if node.op_type == "Conv":
                node.inputs[1].shape = None
    result = onnxq.quantize(model, {"x": x[:24]}, output=tmp_path / "q.onnx", verify_data={"x": x[24:]},
                            config=onnxq.QuantConfig(weight_rounding="gptq"))
    notes = " | ".join(result.report.notes)
    assert "1 Conv weight(s) of K > 71 rounded to nearest" in notes
    assert "1 Conv weight(s) rounded by GPTQ" in notes
    onnxq.quantize(model, {"x": x[:24]}, output=tmp_path / "n.onnx", verify_data={"x": x[24:]},
                   config=onnxq.QuantConfig(weight_rounding="nearest"))
    weights, nearest_weights = _weights(ir.load(tmp_path / "q.onnx")), _weights(ir.load(tmp_path / "n.onnx"))
    conv1 = next(name for name in weights if name.startswith("w1") and weights[name].dtype == np.int8)
    conv2 = next(name for name in weights if name.startswith("w2") and weights[name].dtype == np.int8)
    assert np.array_equal(weights[conv1], nearest_weights[conv1])
    assert not np.array_equal(weights[conv2], nearest_weights[conv2])
