"""GPTQ on weights shared by many nodes (an unrolled RNN): one Hessian per weight, summed over every node that reads
it, the weight quantized once and stored once; the Hessians held within a memory budget, a pass over the data per
chunk when they exceed it, with the same result."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from rnn_model import rnn_inputs, unrolled_rnn

import onnxq
import onnxq.calibration.moments as moments_module
from onnxq.errors import ConfigError
from onnxq.io.memory import memory_map
from onnxq.numerics.blockwise import pack_codes
from onnxq.numerics.gptq import gptq_blockwise

STEPS, WIDTH = 5, 64


def _quantize(calibration, **config):
    model = unrolled_rnn(STEPS, WIDTH)
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4", symmetric=True),
                               verify=onnxq.VerifyConfig(sensitivity_samples=0), **config)
    return onnxq.quantize(model, calibration, config=config, verify_data={"x": rnn_inputs(8, STEPS, WIDTH, seed=9)})


def _packed(model: ir.Model) -> dict[str, np.ndarray]:
    return {name: v.const_value.numpy() for name, v in model.graph.initializers.items() if name.endswith("_int4")}


def test_a_shared_weight_is_fitted_to_every_reader_and_stored_once():
    x = rnn_inputs(24, STEPS, WIDTH)
    result = _quantize({"x": x})
    ops = [n.op_type for n in result.model.graph]
    assert ops.count("MatMulNBits") == 4 * STEPS and "Gemm" not in ops
    packed = _packed(result.model)
    assert sorted(packed) == ["R_bwd_int4", "R_fwd_int4", "W_bwd_int4", "W_fwd_int4"]  # 4 weights, not 20 copies
    assert result.report.passed  # cosine measured 0.9951 on the held-out inputs

    # The Hessian of W_fwd is XᵀX / n over the rows of all 5 of its readers (x_0 … x_4), computed here by hand.
    rows = np.concatenate([x[:, t, :] for t in range(STEPS)]).astype(np.float64)
    hessian = rows.T @ rows / rows.shape[0]
    weight = onnx.numpy_helper.to_array(next(i for i in unrolled_rnn(STEPS, WIDTH).graph.initializer
                                             if i.name == "W_fwd"))
    expected = gptq_blockwise(weight, hessian, 32, True, act_order=True)
    codes = expected.codes.reshape(expected.n, -1)[:, :expected.k]
    np.testing.assert_array_equal(packed["W_fwd_int4"].reshape(WIDTH, -1), pack_codes(codes, 4))


@pytest.fixture
def made(monkeypatch) -> list:
    """Every WeightMoments the runs make, in order."""
    made = []
    original = moments_module.WeightMoments.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(moments_module.WeightMoments, "__init__", recording)
    return made


def test_over_the_budget_a_pass_per_chunk_gives_the_same_weights(monkeypatch, made):
    x = {"x": rnn_inputs(24, STEPS, WIDTH)}
    within = _quantize(x)
    monkeypatch.setattr(moments_module, "BUDGET_BYTES", WIDTH * WIDTH * 4)  # one packed XᵀX at a time, not two
    over = _quantize(lambda: iter([x]))  # re-readable: a callable
    (in_budget, chunked) = made
    assert (in_budget.chunks, in_budget.passes, in_budget.most_held) == (1, 1, 4)
    assert (chunked.chunks, chunked.passes, chunked.most_held) == (4, 4, 1)
    assert {k: v.tobytes() for k, v in _packed(within.model).items()} == \
        {k: v.tobytes() for k, v in _packed(over.model).items()}


def _three_readers(rng) -> ir.Model:
    """q, k and v read one activation (a decoder's attention input): their XᵀX is one matrix."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", WIDTH])
    outs = []
    for name in "qkv":
        w = tape.initializer(ir.tensor(rng.normal(0, 0.1, (WIDTH, WIDTH)).astype(np.float32), name=f"w_{name}"))
        outs.append(tape.op("MatMul", [x, w], name=name))
        outs[-1].name = f"out_{name}"
    return ir.Model(ir.Graph([x], outs, nodes=tape.nodes, initializers=tape.initializers, opset_imports={"": 17}),
                    ir_version=8)


def test_weights_reading_one_activation_share_one_matrix_and_round_as_before(rng, monkeypatch, made):
    model, data = _three_readers(rng), {"x": rng.normal(0, 1, (64, WIDTH)).astype(np.float32)}
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4", symmetric=True),
                               verify=onnxq.VerifyConfig(sensitivity_samples=0, fallback=False))
    shared = onnxq.quantize(model, data, config=config)
    held = [made[0]._held[(f"w_{n}", False)] for n in "qkv"]  # packed triangles (numerics.symmetric)
    assert held[0] is held[1] is held[2] and not held[0].flags.writeable
    monkeypatch.setattr(moments_module.WeightMoments, "_shared", lambda self, key: key)  # one matrix per weight
    apart = onnxq.quantize(model, data, config=config)
    assert made[1]._held[("w_q", False)] is not made[1]._held[("w_k", False)]
    assert len(_packed(shared.model)) == 3
    assert {k: v.tobytes() for k, v in _packed(shared.model).items()} == \
        {k: v.tobytes() for k, v in _packed(apart.model).items()}


def test_the_matrices_go_to_the_spill_file_before_the_rewrite_and_round_as_from_memory(rng, monkeypatch, made):
    """A large model's XᵀX are spilled before the rewrite (memory-mapped, shared ones written once; each paged out
    once GPTQ has used it): the rewrite's 4-bit weights and the 8-bit tier the fallback quantizes from them are the
    same as from memory."""
    import onnxq.io.spill as spill_module

    model, data = _three_readers(rng), {"x": rng.normal(0, 1, (64, WIDTH)).astype(np.float32)}
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4", symmetric=True),
                               verify=onnxq.VerifyConfig(tolerance=onnxq.Tolerance(min_cosine=0.9999)))
    in_memory = onnxq.quantize(model, data, config=config, verify_data=data)
    monkeypatch.setattr(spill_module, "SPILL_MIN_BYTES", 0)
    monkeypatch.setattr(spill_module, "SPILL_TENSOR_MIN_BYTES", 0)
    monkeypatch.setattr(spill_module, "SPILL_QUANTIZED_MIN_BYTES", 0)  # the rule for arrays outside a model
    spilled = onnxq.quantize(model, data, config=config, verify_data=data)
    held = [made[1]._held[(f"w_{n}", False)] for n in "qkv"]
    assert held[0] is held[1] is held[2] and memory_map(held[0]) is not None  # one map, shared
    assert in_memory.report.fallback is not None and in_memory.report.fallback.kept_int8  # the 8-bit tier ran
    assert {k: v.tobytes() for k, v in _packed(spilled.model).items()} == \
        {k: v.tobytes() for k, v in _packed(in_memory.model).items()}
    assert ir.to_proto(spilled.model).SerializeToString() == ir.to_proto(in_memory.model).SerializeToString()


def test_over_the_budget_a_one_shot_iterator_is_refused(monkeypatch):
    monkeypatch.setattr(moments_module, "BUDGET_BYTES", WIDTH * WIDTH * 4)
    with pytest.raises(ConfigError, match="one-shot iterator"):
        _quantize(iter([{"x": rnn_inputs(8, STEPS, WIDTH)}]))


def test_the_quantized_rnn_runs_and_tracks_the_float_one(tmp_path):
    x = rnn_inputs(24, STEPS, WIDTH)
    result = _quantize({"x": x})
    onnxq.io.save_model(result.model, tmp_path / "q.onnx")
    float_session = ort.InferenceSession(unrolled_rnn(STEPS, WIDTH).SerializeToString(),
                                         providers=["CPUExecutionProvider"])
    quant_session = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    probe = {"x": rnn_inputs(4, STEPS, WIDTH, seed=5)}
    expected, got = float_session.run(None, probe)[0], quant_session.run(None, probe)[0]
    cosine = (expected * got).sum() / np.linalg.norm(expected) / np.linalg.norm(got)
    assert cosine > 0.99, cosine
