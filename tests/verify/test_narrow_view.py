"""A wide MatMulNBits in the exact quantization runs as slices along N (ORT_DISABLE_ALL dequantizes a whole weight
each run: a language model's lm_head, 113 MB of float32 for SmolLM2-135M's): the outputs bit for bit the whole
product's, on every kind of input the product reads — 4 and 8 bits, zero points, float16 scales behind a Cast, a
bias — and a whole run's figures the same with the slices as without. The sensitivity keeps the product whole: its
peak is elsewhere (SmolLM2's 4-bit sensitivity peaked no lower with slices)."""

import importlib

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model, weight

import onnxq
from onnxq.verify.kernels.narrow_view import narrow_view
from onnxq.io.model_sessions import make_session

narrow_module = importlib.import_module("onnxq.verify.kernels.narrow_view")

K, N = 64, 1000


def _wide_model(rng, bias: bool) -> ir.Model:
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", K])
    w = weight(tape, rng, "w", (K, N))
    if bias:
        c = tape.initializer(ir.tensor(rng.normal(0, 1, N).astype(np.float32), name="c"))
        y = tape.op("Gemm", [x, w, c], name="head")
    else:
        y = tape.op("MatMul", [x, w], name="head")
    y.name = "y"
    return to_model(tape, [x], [y])


def _quantized(rng, bits: int, symmetric: bool, plain: bool) -> ir.Model:
    """plain: float32 scales read directly (not float16 behind a Cast) and a bias input of the product's own."""
    blocks = onnxq.BlockConfig(vocabulary_bits=None) if bits == 4 else onnxq.BlockConfig(int8_nodes=("head",))
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4" if symmetric else "uint4", symmetric=symmetric),
                               blocks=blocks, verify=onnxq.VerifyConfig(enabled=False))
    model = onnxq.quantize(_wide_model(rng, bias=False), None, config=config).model
    if plain:
        (node,) = [n for n in model.graph if n.op_type == "MatMulNBits"]
        cast = node.inputs[2].producer()
        scales = ir.Value(name="scales32", const_value=ir.tensor(
            cast.inputs[0].const_value.numpy().astype(np.float32), name="scales32"))
        bias = ir.Value(name="bias", const_value=ir.tensor(rng.normal(0, 1, N).astype(np.float32), name="bias"))
        for value in (scales, bias):
            model.graph.register_initializer(value)
        node.replace_input_with(2, scales)
        node.resize_inputs(6)
        node.replace_input_with(5, bias)
        model.graph.remove(cast, safe=True)
    return model


def _outputs(model: ir.Model, x: np.ndarray) -> np.ndarray:
    return make_session(model, optimize=False).run(None, {"x": x})[0]


@pytest.mark.parametrize("bits, symmetric, plain", [(4, False, False), (4, True, True), (8, True, False)])
def test_the_slices_compute_the_whole_product_bit_for_bit(bits, symmetric, plain):
    rng = np.random.default_rng(bits + symmetric + 2 * plain)
    model = _quantized(rng, bits, symmetric, plain)
    (whole,) = [n for n in model.graph if n.op_type == "MatMulNBits"]
    assert whole.attributes["bits"].value == bits
    view = narrow_view(model, narrow_bytes=K * 4 * 300)  # 300 columns a slice
    parts = [n for n in view.graph if n.op_type == "MatMulNBits"]
    assert [p.attributes["N"].value for p in parts] == [300, 300, 300, 100]
    assert [v is None for v in parts[0].inputs] == [v is None for v in whole.inputs]  # each input sliced
    zero_points = len(whole.inputs) > 3 and whole.inputs[3] is not None
    assert zero_points == (not symmetric) and (len(whole.inputs) == 6) == plain
    assert sum(n.op_type == "Cast" for n in view.graph) == (0 if plain else 4)  # a Cast of each slice's scales
    x = rng.normal(0, 1, (7, K)).astype(np.float32)
    np.testing.assert_array_equal(_outputs(view, x), _outputs(model, x))
    assert narrow_view(model) is model  # 256 KB of float32 weight: under NARROW_BYTES, left whole


def test_a_whole_run_reads_the_same_with_slices(monkeypatch):
    rng = np.random.default_rng(5)
    data = [{"x": rng.normal(0, 1, (16, K)).astype(np.float32)}]
    verify = {"x": rng.normal(0, 1, (8, K)).astype(np.float32)}
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4", symmetric=True))

    def run():
        result = onnxq.quantize(_wide_model(np.random.default_rng(6), True), data, config=config, verify_data=[verify])
        report = result.report.to_dict()
        return report["verification"], report["sensitivity"]

    whole = run()
    made = []
    original = narrow_module._split
    monkeypatch.setattr(narrow_module, "_split", lambda *a: made.append(1) or original(*a))
    monkeypatch.setattr(narrow_module, "NARROW_BYTES", K * 4 * 128)
    sliced = run()
    assert len(made) == 1  # the verification's exact quantization ran the product in slices
    assert sliced == whole
