"""Ranges clipped where what reads the tensor saturates (calibration.elementwise, calibration.range_choice): the
per-element chain after a Conv (a scalar affine, then a hardswish written as Add / Clip / Mul / Div, as PaddleOCR's
exports write it) is found and evaluated as the model defines it; the reader's outputs are bit-identical with the
clipped tensor; its step at least halves and the quantized model comes closer to float than with the method's
window (SQNR ≥ 1 dB higher, seeded: the hardswish's output is quantized again on its own unchanged range, so the
Conv output's halved step — 6 dB less noise there — shows only in part); a tensor also read as it is (a residual)
keeps its window; range_choice "method" turns it off."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model, weight

import onnxq
from onnxq.calibration.elementwise import elementwise_reader
from onnxq.io.model_sessions import make_session

C = 8


def _model(rng, residual: bool = False) -> ir.Model:
    """x → Conv (biases pushing half the values below the hardswish's knee) → ·1.5 + 0.5 → hardswish → Conv → y
    (and y + the first Conv's output, when residual)."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["b", 3, 10, 10])
    bias = np.linspace(-12.0, 2.0, C).astype(np.float32)
    conv = tape.op("Conv", [x, weight(tape, rng, "w1", (C, 3, 3, 3)), tape.initializer(ir.tensor(bias, name="b1"))],
                   {"pads": [1, 1, 1, 1]}, name="first")
    scalar = lambda v, n: tape.initializer(ir.tensor(np.array([v], np.float32), name=n))  # noqa: E731
    z = tape.op("Add", [tape.op("Mul", [conv, scalar(1.5, "a")], name="affine_mul"), scalar(0.5, "b")],
                name="affine_add")
    gate = tape.op("Clip", [tape.op("Add", [z, scalar(3.0, "three")], name="plus3"),
                            tape.initializer(ir.tensor(np.array(0.0, np.float32), name="zero")),
                            tape.initializer(ir.tensor(np.array(6.0, np.float32), name="six"))], name="clip")
    hswish = tape.op("Div", [tape.op("Mul", [z, gate], name="times"), scalar(6.0, "six_d")], name="div")
    y = tape.op("Conv", [hswish, weight(tape, rng, "w2", (C, C, 1, 1)), weight(tape, rng, "b2", (C,))], name="second")
    if residual:
        y = tape.op("Add", [y, conv], name="residual")
    return to_model(tape, [x], [y])


def _quantize(model, data, tmp_path, choice, method="percentile"):
    config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(range_choice=choice, method=method),
                               verify=onnxq.VerifyConfig(sensitivity_samples=0, fallback=False, measure_speed=False,
                                                         check_kernels=False))
    return onnxq.quantize(model, data, output=tmp_path / f"{choice}.onnx", config=config)


def test_the_reader_is_the_affine_and_hardswish_and_saturates_exactly(rng):
    model = _model(rng)
    conv = next(n for n in model.graph if n.name == "first").outputs[0]
    reader = elementwise_reader(model.graph, conv, set())
    assert [n.op_type for n in reader.nodes] == ["Mul", "Add", "Add", "Clip", "Mul", "Div"]
    assert reader.outputs == (reader.nodes[-1].outputs[0].name,) and reader.nonlinear
    f = reader.function(dict(model.opset_imports))
    values = np.linspace(-20.0, 10.0, 3001, dtype=np.float32)
    z = values * np.float32(1.5) + np.float32(0.5)
    np.testing.assert_allclose(f(values)[0], z * np.clip(z + 3, 0, 6) / 6, rtol=1e-6, atol=1e-6)
    # Below (-3 - 0.5) / 1.5 every value reads 0: clipped there, the outputs are bit-identical.
    clipped = np.maximum(values, np.float32(-3.5 / 1.5))
    assert np.array_equal(f(values)[0], f(clipped)[0])


@pytest.mark.parametrize("method", ["percentile", "minmax"])  # with histograms and without
def test_saturation_clips_and_the_model_gets_closer_to_float(rng, tmp_path, method):
    model = _model(rng)
    data = {"x": rng.normal(0, 1, (32, 3, 10, 10)).astype(np.float32)}
    held = {"x": np.random.default_rng(1).normal(0, 1, (16, 3, 10, 10)).astype(np.float32)}
    results = {c: _quantize(model, data, tmp_path, c, method) for c in ("saturation", "method")}
    assert any("clipped where what reads them saturates" in n for n in results["saturation"].report.notes)
    assert not any("saturates" in n for n in results["method"].report.notes)
    expected = make_session(model, optimize=False).run(None, held)[0]
    sqnr, step = {}, {}
    for choice in results:
        quantized = ir.load(tmp_path / f"{choice}.onnx")
        got = make_session(quantized, optimize=False).run(None, held)[0]
        sqnr[choice] = 10 * np.log10((expected ** 2).sum() / ((expected - got) ** 2).sum())
        first = next(n for n in quantized.graph if n.name == "first").outputs[0]
        q = next(c for c in first.consumers() if c.op_type == "QuantizeLinear")
        step[choice] = float(ir.convenience.get_const_tensor(q.inputs[1]).numpy())
    assert step["saturation"] <= 0.5 * step["method"], step
    assert sqnr["saturation"] >= sqnr["method"] + 1.0, sqnr


@pytest.mark.parametrize("residual", [True])
def test_a_tensor_also_read_as_it_is_keeps_its_window(rng, tmp_path, residual):
    model = _model(rng, residual=residual)
    data = {"x": rng.normal(0, 1, (16, 3, 10, 10)).astype(np.float32)}
    result = _quantize(model, data, tmp_path, "saturation")
    assert not any("saturates" in n for n in result.report.notes)


def test_the_command_line_chooses_the_method_window():
    from onnxq.cli.main import build_parser
    from onnxq.cli.args import config_from_args
    parse = lambda *flags: config_from_args(build_parser().parse_args(["m.onnx", *flags]))  # noqa: E731
    assert parse().calibration.range_choice == "auto"
    assert parse("--range-choice", "method").calibration.range_choice == "method"
