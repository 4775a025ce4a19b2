"""Data as real models need it: a recurrent state whose samples lie on axis 1, a scalar input held
constant, a fixed batch on the state's axis — inferred from the model's dimension names, or said in the config, on
the command line and to the API."""

import dataclasses

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model

import onnxq
from onnxq.data.axes import inferred_constants, inferred_sample_axes
from onnxq.data.batching import Holdout, concatenate, fixed_batch_size, samples_in, take
from onnxq.data.specs import input_specs, laid_out
from onnxq.cli.main import main
from onnxq.errors import CalibrationDataError, ConfigError
from onnxq.io import save_model


def _stateful(rng, batch: str | int = "batch", state_batch: str | int | None = None) -> ir.Model:
    """A cell like a voice-activity detector's: x [batch, 16], state [2, batch, 8], sr a scalar int64.
    new_state = state + x·W (broadcast over the 2 layers); y = new_state·V · (sr / 16000)."""
    state_batch = batch if state_batch is None else state_batch
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, [batch, 16])
    state = ir.val("state", ir.DataType.FLOAT, [2, state_batch, 8])
    sr = ir.val("sr", ir.DataType.INT64, [])
    w = tape.initializer(ir.tensor(rng.normal(0, 0.5, (16, 8)).astype(np.float32), name="w"))
    v = tape.initializer(ir.tensor(rng.normal(0, 0.5, (8, 4)).astype(np.float32), name="v"))
    new_state = tape.op("Add", [state, tape.op("MatMul", [x, w], name="input_proj")])
    new_state.name = "new_state"
    rate = tape.op("Div", [tape.op("Cast", [sr], attributes={"to": ir.DataType.FLOAT}),
                           tape.initializer(ir.tensor(np.array(16000.0, np.float32), name="base_rate"))])
    y = tape.op("Mul", [tape.op("MatMul", [new_state, v], name="output_proj"), rate])
    y.name = "y"
    return to_model(tape, [x, state, sr], [y, new_state])


def _data(rng, samples: int = 80) -> dict[str, np.ndarray]:
    return {"x": rng.normal(0, 1, (samples, 16)).astype(np.float32),
            "state": rng.normal(0, 1, (2, samples, 8)).astype(np.float32),
            "sr": np.array(16000, np.int64)}


def test_the_layout_is_inferred_from_the_dimension_names(rng):
    specs = {s.name: s for s in input_specs(_stateful(rng))}
    assert (specs["x"].sample_axis, specs["state"].sample_axis, specs["sr"].sample_axis) == (0, 1, None)
    # Without names nothing says where the state's samples are: axis 0, unless the config says otherwise.
    unnamed = {s.name: s.sample_axis for s in input_specs(_stateful(rng, batch="batch", state_batch="n"))}
    assert unnamed == {"x": 0, "state": 0, "sr": None}
    given = {s.name: s.sample_axis for s in input_specs(_stateful(rng, "batch", "n"), {"state": 1}, ["x"])}
    assert given == {"x": None, "state": 1, "sr": None}


def test_a_state_on_axis_1_and_a_constant_scalar_quantize_and_verify(rng):
    report = onnxq.quantize(_stateful(rng), _data(rng)).report
    # 80 samples, every 10th held back: the state's samples were counted and split on its axis 1.
    assert report.calibration_samples == 72 and report.verification.samples == 8
    assert sorted(e.name for e in report.quantized) == ["input_proj", "output_proj"]
    outputs = {o.name: o for o in report.verification.outputs}
    # Measured (seeded, AVX2): cosine 0.99987 (y), 0.99995 (new_state).
    assert outputs["y"].metrics.cosine_mean > 0.999 and outputs["new_state"].metrics.cosine_mean > 0.999
    assert report.passed


def test_unnamed_dims_are_inferred_from_the_datas_lengths(rng, tmp_path, capsys):
    """A voice-activity detector's layout: nothing in the model says where the state's samples are, but its data
    does — 80 samples of x beside a state [2, 80, 8]: axis 1 is the only one of the state's axes holding 80 (and the
    model leaves it open)."""
    model = _stateful(rng, batch="batch", state_batch="n")
    report = onnxq.quantize(model, _data(rng)).report
    assert report.calibration_samples == 72 and report.verification.samples == 8
    assert any("sample axes inferred from the data's lengths: state=1" in n for n in report.notes)
    config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(sample_axes={"state": 1}))
    assert onnxq.quantize(model, _data(rng), config=config).report.calibration_samples == 72
    path, data, out = tmp_path / "cell.onnx", tmp_path / "data.npz", tmp_path / "q.onnx"
    save_model(model, path)
    np.savez(data, **_data(rng))
    assert main([str(path), "--calib", str(data), "-o", str(out), "-q"]) == 0
    assert main(["verify", str(path), str(out), "--data", str(data)]) == 0
    assert "verification on CPU, 80 samples" in capsys.readouterr().out


def test_an_ambiguous_layout_is_still_refused_with_the_flag_that_settles_it(rng):
    """A state [2, 80, 80] under a model's [2, n, m] has x's 80 on two open axes, and a state [2, 2, 8] has it on
    none: nothing is guessed, and data that does not fit is refused as before."""
    specs = input_specs(_stateful(rng, batch="batch", state_batch="n"))
    assert inferred_sample_axes(specs, {"x": (80, 16), "state": (2, 80, 8), "sr": ()}) == {"state": 1}
    open_state = [dataclasses.replace(s, shape=(2, "n", "m")) if s.name == "state" else s for s in specs]
    assert inferred_sample_axes(open_state, {"x": (80, 16), "state": (2, 80, 80), "sr": ()}) == {}
    model = _stateful(rng, batch="batch", state_batch="n")
    data = _data(rng)
    data["state"] = data["state"][:, :2]  # 2 on axis 1 too: no axis of the state holds x's 80
    hint = r"different numbers of samples \(x: 80, state: 2\)"
    with pytest.raises(CalibrationDataError, match=hint):
        onnxq.quantize(model, data)


def test_a_fixed_batch_is_read_on_the_samples_axis(rng):
    model = _stateful(rng, batch=4)  # x [4, 16], state [2, 4, 8]: the batch is 4, not the state's 2 layers
    specs = input_specs(model, {"state": 1})
    assert fixed_batch_size(specs) == 4
    report = onnxq.quantize(model, _data(rng, 80),
                            config=onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(sample_axes={"state": 1}))
                            ).report
    assert report.calibration_samples == 72 and report.verification.samples == 8 and report.passed


def test_batches_split_and_join_along_each_inputs_axis():
    batch = laid_out({"x": np.arange(6).reshape(3, 2), "state": np.arange(12).reshape(2, 3, 2), "sr": np.array(8)},
                     {"state": 1, "sr": None})
    assert samples_in(batch) == 3
    head = take(batch, slice(0, 2))
    assert head["x"].shape == (2, 2) and head["state"].shape == (2, 2, 2) and head["sr"] == 8
    held = take(batch, np.array([False, True, False]))
    np.testing.assert_array_equal(held["state"], batch["state"][:, 1:2])
    joined = concatenate([head, take(batch, slice(2, 3))])
    np.testing.assert_array_equal(joined["state"], batch["state"])
    holdout = Holdout(every=3, max_samples=10)
    kept = list(holdout.split([batch]))
    assert samples_in(kept[0]) == 2 and samples_in(holdout.held[0]) == 1 and holdout.held[0]["sr"] == 8


@pytest.mark.parametrize("calibration, message", [
    ({"sample_axes": {"h": 1}}, "name 'h', which is not an input of the model; its inputs are: x"),
    ({"sample_axes": {"state": 3}}, "gives input 'state' axis 3, but it has rank 3"),
    ({"sample_axes": {"state": 1}, "constant_inputs": ["state"]}, "both in calibration.sample_axes and in constant"),
    ({"sample_axes": {"state": -1}}, "an axis is an integer >= 0"),
])
def test_a_layout_the_model_cannot_have_is_refused(rng, calibration, message):
    with pytest.raises(ConfigError, match=message):
        onnxq.quantize(_stateful(rng), _data(rng), config=onnxq.QuantConfig.from_dict({"calibration": calibration}))


def test_a_scalar_given_per_sample_says_it_is_held_constant(rng):
    data = _data(rng)
    data["sr"] = np.full(80, 16000, np.int64)
    with pytest.raises(CalibrationDataError, match="'sr' has shape .* held constant .* give the one value"):
        onnxq.quantize(_stateful(rng), data)


def _sliced(rng) -> ir.Model:
    """x [4, 16] (a fixed batch of 4) · w, then Slice by the inputs starts, ends, axes [1] each, then · v."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, [4, 16])
    bounds = [ir.val(name, ir.DataType.INT64, [1]) for name in ("starts", "ends", "axes")]
    w = tape.initializer(ir.tensor(rng.normal(0, 0.5, (16, 8)).astype(np.float32), name="w"))
    v = tape.initializer(ir.tensor(rng.normal(0, 0.5, (4, 2)).astype(np.float32), name="v"))
    h = tape.op("Slice", [tape.op("MatMul", [x, w], name="proj"), *bounds])
    y = tape.op("MatMul", [h, v], name="head")
    y.name = "y"
    return to_model(tape, [x, *bounds], [y])


def test_inputs_given_once_in_the_shape_the_model_fixes_are_held_constant(rng, tmp_path):
    # ONNX's own Slice / TopK / Reshape tests give starts [1], k [1], shape [3] once beside 240 samples of the data
    # they cut: refused before ("different numbers of samples (x: 40, starts: 1, …)"), held constant now.
    data = {"x": rng.normal(0, 1, (40, 16)).astype(np.float32), "starts": np.array([2]), "ends": np.array([6]),
            "axes": np.array([1])}
    model = _sliced(rng)
    report = onnxq.quantize(model, data, output=tmp_path / "q.onnx").report
    assert onnxq.verify(model, tmp_path / "q.onnx", data).passed  # python -m onnxq verify reads the data alike
    assert any(n.startswith("inputs given once, held constant with every batch: starts, ends, axes") for n in
               report.notes)
    assert [e.name for e in report.quantized] == ["proj", "head"] and report.passed
    assert report.calibration_samples == 36 and report.verification.samples == 4  # the 10th batch of 4 held back
    specs = input_specs(_sliced(rng), {}, ())
    assert inferred_constants(specs, {"x": (40, 16), "starts": (1,), "ends": (1,), "axes": (1,)}) == (
        "starts", "ends", "axes")
    assert inferred_constants(specs, {"x": (4, 16), "starts": (1,), "ends": (1,), "axes": (1,)}) == (
        "starts", "ends", "axes")  # beside one batch of the 4 the model fixes: the float input holds the samples
    assert inferred_constants(specs, {"x": (4, 16), "starts": (4,), "ends": (4,), "axes": (4,)}) == ()  # agree
    assert inferred_constants(specs, {"x": (40, 16), "starts": (2,), "ends": (1,), "axes": (1,)}) == ()  # starts off


def test_an_input_given_short_of_samples_is_refused_with_the_constant_input_flag(rng):
    # starts [2] where the model fixes [1]: not taken for one value given once, so the line names the flag.
    data = {"x": rng.normal(0, 1, (40, 16)).astype(np.float32), "starts": np.array([2, 2]), "ends": np.array([6]),
            "axes": np.array([1])}
    with pytest.raises(CalibrationDataError, match=r"if 'starts', 'ends', 'axes' are one value for every sample, "
                                                   r"pass --constant-input starts --constant-input ends "
                                                   r"--constant-input axes \(TOML \[calibration\] constant_inputs"):
        onnxq.quantize(_sliced(rng), data)
