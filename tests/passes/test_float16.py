"""passes.float16.compute: float16 compute with float32 kept where float16 cannot hold the values, the model's inputs and
outputs unchanged. Checked by running the rewritten model in ONNX Runtime (the CPU casts float16 operators it has
no kernel for to float32 and back: float16 storage, float32 arithmetic)."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
from conftest import to_model, weight

from onnxq.io import OrtModel
from onnxq.passes.float16.compute import to_float16
from onnxq.passes.float16.emulation import float16_emulation, holds_float16
from onnxq.passes.float16.plan import plan_float16

FLOAT, HALF = ir.DataType.FLOAT, ir.DataType.FLOAT16


def _constant(tape: ir.tape.Tape, name: str, value, dtype=np.float32) -> ir.Value:
    return tape.initializer(ir.tensor(np.asarray(value, dtype), name=name))


def _encoder_block(rng) -> ir.Model:
    """x [batch, 16] → MatMul → a layer norm written out (ReduceMean, Sub, Mul, ReduceMean, Add ε = 1e-12, Sqrt,
    Div), plus a mask (1 - m) × float32's lowest; the MatMul's output h is a graph output and is read on."""
    tape = ir.tape.Tape()
    x = ir.val("x", FLOAT, ["batch", 16])
    m = ir.val("m", FLOAT, ["batch", 16])
    h = tape.op("MatMul", [x, weight(tape, rng, "w", (16, 16))], name="mm")
    axes = _constant(tape, "axes", [-1], np.int64)
    centred = tape.op("Sub", [h, tape.op("ReduceMean", [h, axes], name="mean")], name="centre")
    var = tape.op("ReduceMean", [tape.op("Mul", [centred, centred], name="square"), axes], name="var")
    eps = tape.op("Add", [var, _constant(tape, "eps", 1e-12)], name="add_eps")
    normed = tape.op("Div", [centred, tape.op("Sqrt", [eps], name="sqrt")], name="normalize")
    mask = tape.op("Mul", [tape.op("Sub", [_constant(tape, "one", 1.0), m], name="invert"),
                           _constant(tape, "lowest", np.finfo(np.float32).min)], name="mask")
    y = tape.op("Add", [normed, mask], name="masked")
    h.name, y.name = "h", "y"
    return to_model(tape, [x, m], [y, h], opset=18)


def _run(model: ir.Model, feeds: dict) -> list[np.ndarray]:
    return OrtModel(model).session(ort.SessionOptions(), ["CPUExecutionProvider"]).run(None, feeds)


def test_what_float16_cannot_hold_stays_float32_and_the_rest_converts(rng):
    model = _encoder_block(rng)
    plan = plan_float16(model.graph, {"": 18})
    assert {name: kept.kind for name, kept in plan.kept.items()} == {
        "add_eps": "small constants float16 makes 0", "mask": "constants past float16's range"}
    assert {n.name for n in plan.converted} == {"mm", "mean", "centre", "square", "var", "sqrt", "normalize",
                                                 "invert", "masked"}


def test_inputs_outputs_and_results_are_kept(rng):
    """The rewritten model takes and gives float32 under the same names; its outputs are float's to float16's
    precision (the ε and the mask computed in float32: no 0 under the square root, no 0 × inf); the float model it
    was cloned from is untouched (clones share their type objects)."""
    model = _encoder_block(rng)
    original = model.clone()
    x = rng.normal(0, 1, (8, 16)).astype(np.float32)
    x[0] = 0.0  # a row whose variance is 0: ε decides it
    m = (rng.uniform(size=(8, 16)) > 0.3).astype(np.float32)
    want = _run(model, {"x": x, "m": m})
    result = to_float16(model)
    assert result.converted == 9 and set(result.kept) == {"add_eps", "mask"} and result.casts >= 3
    assert [(v.name, v.dtype) for v in model.graph.outputs] == [("y", FLOAT), ("h", FLOAT)]
    assert [(v.name, v.dtype) for v in model.graph.inputs] == [("x", FLOAT), ("m", FLOAT)]
    assert next(n for n in model.graph if n.name == "normalize").outputs[0].dtype == HALF
    assert next(n for n in model.graph if n.name == "mm").inputs[1].const_value.dtype == HALF
    assert all(v.dtype != HALF for n in original.graph for v in n.outputs)
    got = _run(model, {"x": x, "m": m})
    kept = m.astype(bool)
    assert np.all(np.isfinite(got[0][kept])) and np.all(got[0][~kept] < -1e30)
    np.testing.assert_allclose(got[0][kept], want[0][kept], atol=0.02)  # float16: 3 decimal digits
    np.testing.assert_allclose(got[1], want[1], rtol=2e-3, atol=2e-2)
    assert got[0][0, kept[0]].tolist() == [0.0] * int(kept[0].sum())  # 0 / sqrt(0 + ε), ε kept float32


def test_each_crossing_gets_one_cast_and_unread_float32_weights_go(rng):
    """A float32 value read by two float16 nodes is cast once; a weight only float16 nodes read is replaced by its
    float16 copy (the file does not hold both)."""
    tape = ir.tape.Tape()
    x = ir.val("x", FLOAT, ["batch", 8])
    w = weight(tape, rng, "w", (8, 8))
    a = tape.op("MatMul", [x, w], name="a")
    b = tape.op("MatMul", [x, w], name="b")
    y = tape.op("Add", [a, b], name="sum")
    y.name = "y"
    model = to_model(tape, [x], [y])
    result = to_float16(model)
    casts = [n for n in model.graph if n.op_type == "Cast"]
    assert result.casts == len(casts) == 2  # x in, y out
    assert list(model.graph.initializers) == ["w_fp16"]
    feeds = {"x": rng.normal(0, 1, (4, 8)).astype(np.float32)}
    want = feeds["x"] @ (2 * w.const_value.numpy())
    np.testing.assert_allclose(_run(model, feeds)[0], want, rtol=5e-3, atol=5e-2)


def test_activations_observed_past_float16_stay_float32(rng):
    """A product whose values reach 1e5 on the data (float16 holds 65504): without the data's magnitudes it
    overflows to inf in float16; with them (calibration.magnitudes) the nodes that make and read it stay float32
    and the output is float's. An empty value reads 0; a value holding -inf reads as infinite."""
    from onnxq.calibration.magnitudes import largest_magnitudes

    w = rng.uniform(-1, 1, (8, 8)) * 2e4

    def build() -> ir.Model:
        tape = ir.tape.Tape()
        x = ir.val("x", FLOAT, ["batch", 8])
        big = tape.op("MatMul", [x, _constant(tape, "w", w)], name="big")
        small = tape.op("Mul", [big, _constant(tape, "scale", 1e-4)], name="scale_down")
        y = tape.op("Add", [small, x], name="residual")
        big.name, small.name, y.name = "big", "scale_down", "y"
        return to_model(tape, [x], [y])

    feeds = {"x": rng.normal(0, 3, (16, 8)).astype(np.float32)}
    want = _run(build(), feeds)[0]
    blind = build()
    to_float16(blind)
    # 1e5 in float16 is inf, as CUDA stores it; the emulation rounds every float16 value (ORT's CPU, which drops
    # the casts it inserts between two operators it runs in float32, may not: a CPU run is no float16 check).
    assert not np.isfinite(_run(float16_emulation(blind), feeds)[0]).all()
    model = build()
    magnitudes = largest_magnitudes(model, ["big", "scale_down", "y"], [feeds])
    assert magnitudes["big"] > 65504 and magnitudes["y"] < 100
    result = to_float16(model, magnitudes)
    assert set(result.kept) == {"big", "scale_down"}
    assert result.kept["big"].kind == "activations past float16's range"
    np.testing.assert_allclose(_run(model, feeds)[0], want, rtol=2e-3, atol=2e-2)
    np.testing.assert_allclose(_run(float16_emulation(model), feeds)[0], want, rtol=2e-3, atol=2e-2)


def test_magnitudes_of_empty_and_infinite_values():
    from onnxq.calibration.magnitudes import largest_magnitudes

    tape = ir.tape.Tape()
    x = ir.val("x", FLOAT, ["n"])
    log = tape.op("Log", [x], name="log")
    log.name = "log_x"
    model = to_model(tape, [x], [log])
    found = largest_magnitudes(model, ["log_x"], [{"x": np.zeros(0, np.float32)}])
    assert found == {"log_x": 0.0}
    assert largest_magnitudes(model, ["log_x"], [{"x": np.array([0.0, 1.0], np.float32)}]) == {"log_x": np.inf}


def test_the_emulation_rounds_each_float16_value_and_is_float32(rng):
    """Every float16 value of the model is rounded where it is made: the emulation's outputs equal a numpy
    float16 model of the same graph (float32 arithmetic, float16 storage after each node) to float32 rounding."""
    model = _encoder_block(rng)
    to_float16(model)
    emulation = float16_emulation(model)
    assert holds_float16(model)
    assert all(v.dtype != HALF for n in emulation.graph if n.op_type != "Cast" for v in n.outputs)
    assert all(v.const_value.dtype != HALF for v in emulation.graph.initializers.values())
    x = rng.normal(0, 1, (4, 16)).astype(np.float32)
    m = np.ones((4, 16), np.float32)
    h = np.float16(x.astype(np.float16).astype(np.float32) @ model.graph.initializers["w_fp16"].const_value.numpy()
                   .astype(np.float32)).astype(np.float32)
    got = _run(emulation, {"x": x, "m": m})
    np.testing.assert_allclose(got[1], h, rtol=1e-6)


def test_a_value_of_unknown_type_keeps_its_partners_float32(rng):
    """ConstantOfShape takes its element type from an attribute, which no schema binds: its output is untyped, and
    the Add binding it to a float value under one type variable cannot be float16 alone: it stays float32, and ORT
    runs the model."""
    tape = ir.tape.Tape()
    x = ir.val("x", FLOAT, [4, 8])
    ones = tape.op("ConstantOfShape", [_constant(tape, "shape", [4, 8], np.int64)],
                   attributes={"value": ir.tensor(np.array([1.0], np.float32))}, name="ones")
    scaled = tape.op("Mul", [x, _constant(tape, "two", 2.0)], name="scaled")
    y = tape.op("Add", [ones, scaled], name="sum")
    y.name = "y"
    model = to_model(tape, [x], [y])
    feeds = {"x": rng.normal(0, 1, (4, 8)).astype(np.float32)}
    want = _run(model, feeds)[0]
    result = to_float16(model)
    assert set(result.kept) == {"sum"} and result.converted == 1  # the Mul
    np.testing.assert_allclose(_run(model, feeds)[0], want, rtol=2e-3, atol=2e-2)


def test_operators_onnx_does_not_define_are_typed_by_onnxruntime_s_schemas(rng):
    """onnxruntime-genai's builder writes SimplifiedLayerNormalization (ONNX domain, ORT's) before every product:
    typed by ORT's schema, it and the MatMulNBits reading it go float16 together (typed by onnx.defs alone, the
    norm's output was unknown, the MatMulNBits' scales went float16 without its input, and ORT refused the file:
    T1 bound to float and float16)."""
    tape = ir.tape.Tape()
    x = ir.val("x", FLOAT, ["batch", 32])
    normed = tape.op("SimplifiedLayerNormalization", [x, _constant(tape, "gamma", np.ones(32))],
                     attributes={"axis": -1, "epsilon": 1e-6}, name="norm")
    packed = tape.initializer(ir.tensor(rng.integers(0, 255, (16, 1, 32), dtype=np.uint8), name="packed"))
    scales = _constant(tape, "scales", rng.uniform(0.01, 0.02, 16))
    y = tape.op("MatMulNBits", [normed, packed, scales], domain="com.microsoft", name="product",
                attributes={"K": 32, "N": 16, "bits": 8, "block_size": 32})
    y.name = "y"
    model = to_model(tape, [x], [y])
    model.opset_imports["com.microsoft"] = 1
    feeds = {"x": rng.normal(0, 1, (4, 32)).astype(np.float32)}
    want = _run(model, feeds)[0]
    result = to_float16(model)
    assert result.kept == {} and result.converted == 2
    assert model.graph.node("product").inputs[0].dtype == HALF
    np.testing.assert_allclose(_run(model, feeds)[0], want, rtol=2e-2, atol=2e-2)


def test_a_cast_from_float_to_bool_reads_float16_and_still_makes_bool(rng):
    """A mask made by casting a float difference to bool (onnxruntime-genai's float16 CPU export: Sub → Cast(to=bool)
    for MultiHeadAttention): its float input goes float16, its `to` stays bool — it was rewritten to float16, and ORT
    refused the file ("Type (tensor(bool)) of output arg … does not match expected type (tensor(float16))")."""
    tape = ir.tape.Tape()
    x = ir.val("x", FLOAT, [4, 8])
    shifted = tape.op("Sub", [x, _constant(tape, "half", 0.5)], name="shift")
    mask = tape.op("Cast", [shifted], attributes={"to": ir.DataType.BOOL.value}, name="to_bool")
    mask.dtype = ir.DataType.BOOL
    y = tape.op("Where", [mask, x, _constant(tape, "zero", 0.0)], name="select")
    y.name = "y"
    model = to_model(tape, [x], [y])
    feeds = {"x": rng.normal(0, 1, (4, 8)).astype(np.float32)}
    want = _run(model, feeds)[0]
    result = to_float16(model)
    assert "to_bool" not in result.kept and result.converted >= 2
    cast = next(n for n in model.graph if n.name == "to_bool")
    assert cast.attributes["to"].as_int() == ir.DataType.BOOL.value and cast.inputs[0].dtype == HALF
    np.testing.assert_allclose(_run(model, feeds)[0], want, rtol=2e-3, atol=2e-3)
