"""Conv inputs' windows chosen by the output error they cost (calibration.error_choice, range_choice
"output-error"): the error per factor is the Convs' relative output error energy, checked against numpy on a 1×1
Conv (rtol 1e-4); where the window spans a few values far out (minmax over a normal bulk and rare ±8) a narrower
window wins, and the quantized model comes closer to float than with the saturation choice alone on held-out
data (SQNR ≥ 1 dB higher, seeded); off by default; a one-shot iterator skips it with a note."""

import numpy as np
import onnx_ir as ir
from conftest import to_model, weight

import onnxq
from onnxq.calibration.error_choice import SHRINKS, error_ranges
from onnxq.numerics import choose_qparams, dequantize, quantize
from onnxq.io.model_sessions import make_session

C = 16


def _model(rng) -> ir.Model:
    """x → 1×1 Conv → Relu → 3×3 Conv → y: x and the Relu's output are the Convs' inputs."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["b", C, 32, 32])
    first = tape.op("Conv", [x, weight(tape, rng, "w1", (C, C, 1, 1))], name="first")
    relu = tape.op("Relu", [first], name="relu")
    y = tape.op("Conv", [relu, weight(tape, rng, "w2", (C, C, 3, 3)), weight(tape, rng, "b2", (C,))],
                {"pads": [1, 1, 1, 1]}, name="second")
    return to_model(tape, [x], [y])


def _sparse(seed: int, samples: int) -> dict[str, np.ndarray]:
    """A normal bulk (σ 0.5) and, in one sample of 16, one value of 8 and one of −8: the window spans values so rare
    that clipping them costs less than the step they cost everything else."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 0.5, (samples, C, 32, 32)).astype(np.float32)
    x[::16, 0, 0, 0], x[::16, 1, 0, 0] = 8.0, -8.0
    return {"x": x}


def _config(choice: str) -> onnxq.QuantConfig:
    return onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(range_choice=choice, method="minmax"),
                             verify=onnxq.VerifyConfig(sensitivity_samples=0, fallback=False, measure_speed=False,
                                                       check_kernels=False))


def test_the_errors_are_the_convs_relative_output_error(rng):
    model = _model(rng)
    x = _sparse(3, 16)["x"]
    ranges = {"x": (float(x.min()), float(x.max()))}
    first = next(n for n in model.graph if n.name == "first")
    choices = error_ranges(model, {"x": [first]}, ranges, [{"x": x}], onnxq.QuantConfig())
    assert [c.name for c in choices] == ["x"]
    w = ir.convenience.get_const_tensor(first.inputs[1]).numpy()[:, :, 0, 0]
    conv = lambda v: np.einsum("oc,nchw->nohw", w.astype(np.float64), v.astype(np.float64))  # noqa: E731
    expected = []
    for factor in SHRINKS:
        qparams = choose_qparams(ranges["x"][0] * factor, ranges["x"][1] * factor, np.dtype(np.uint8), False)
        error = x - dequantize(quantize(x, qparams), qparams).astype(np.float32)
        expected.append(np.square(conv(error)).sum() / np.square(conv(x)).sum())
    np.testing.assert_allclose(choices[0].errors, expected, rtol=1e-4)
    best = SHRINKS[int(np.argmin(expected))]
    assert best < 1.0 and choices[0].after == (ranges["x"][0] * best, ranges["x"][1] * best)


def test_a_narrower_window_brings_the_model_closer_to_float(rng, tmp_path):
    model = _model(rng)
    data, held = _sparse(0, 32), _sparse(1, 16)
    expected = make_session(model, optimize=False).run(None, held)[0]
    sqnr, notes = {}, {}
    for choice in ("saturation", "output-error"):
        result = onnxq.quantize(model, data, output=tmp_path / f"{choice}.onnx", config=_config(choice))
        got = make_session(ir.load(tmp_path / f"{choice}.onnx"), optimize=False).run(None, held)[0]
        sqnr[choice] = 10 * np.log10((expected ** 2).sum() / ((expected - got) ** 2).sum())
        notes[choice] = " ".join(result.report.notes)
    assert "Conv input(s) narrowed" in notes["output-error"] and "Conv input(s) narrowed" not in notes["saturation"]
    assert sqnr["output-error"] >= sqnr["saturation"] + 1.0, sqnr


def test_a_one_shot_iterator_skips_it_with_a_note(rng, tmp_path):
    model = _model(rng)
    batches = iter([_sparse(0, 8), _sparse(2, 8)])
    result = onnxq.quantize(model, batches, output=tmp_path / "q.onnx", verify_data=_sparse(1, 4),
                            config=_config("output-error"))
    assert any("output-error window choice skipped" in n and "one-shot" in n for n in result.report.notes)


def test_auto_is_the_default_and_the_command_line_chooses_another():
    from onnxq.cli.main import build_parser
    from onnxq.cli.args import config_from_args
    parse = lambda *flags: config_from_args(build_parser().parse_args(["m.onnx", *flags]))  # noqa: E731
    assert parse().calibration.range_choice == "auto"  # output-error only where a failing check points
    assert parse("--range-choice", "output-error").calibration.range_choice == "output-error"
    assert parse("--range-choice", "saturation").calibration.range_choice == "saturation"
