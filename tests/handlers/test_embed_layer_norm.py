"""com.microsoft EmbedLayerNormalization (ORT's transformer optimizer's fused embeddings + LayerNorm) →
QEmbedLayerNormalization: the word, position and segment tables, gamma and beta uint8 per tensor (the kernel's only
form, also when the config's weights are int8), the file's table a quarter of its float size, the output within
cosine 0.9999 of the float node's (measured 0.99995 on a random 1000-word table) and its mask index the same; a
node with position_ids stays float with why."""

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model

import onnxq
from onnxq.handlers import plan_model
from onnxq.io.model_sessions import make_session

VOCAB, SEQ, HIDDEN = 1000, 16, 64


def _embedding(rng, position_ids: bool = False) -> ir.Model:
    tape = ir.tape.Tape()
    ids, segments, mask = (ir.val(n, ir.DataType.INT32, ["batch", SEQ]) for n in ("ids", "segments", "mask"))
    positions = ir.val("positions", ir.DataType.INT32, ["batch", SEQ])

    def const(name, mean, std, shape):
        return tape.initializer(ir.tensor(rng.normal(mean, std, shape).astype(np.float32), name=name))
    inputs = [ids, segments, const("word", 0, 0.05, (VOCAB, HIDDEN)), const("position", 0, 0.02, (SEQ, HIDDEN)),
              const("segment", 0, 0.02, (2, HIDDEN)), const("gamma", 1, 0.1, (HIDDEN,)),
              const("beta", 0, 0.1, (HIDDEN,)), mask] + ([positions] if position_ids else [])
    y, mask_index = tape.op_multi_out("EmbedLayerNormalization", inputs, {"epsilon": 1e-12}, domain="com.microsoft",
                                      name="embed", num_outputs=2)
    y.name, mask_index.name = "y", "mask_index"
    model = to_model(tape, [ids, segments, mask] + ([positions] if position_ids else []), [y, mask_index])
    model.graph.opset_imports["com.microsoft"] = 1
    return model


def _feeds(seed, n):
    rng = np.random.default_rng(seed)
    mask = np.ones((n, SEQ), np.int32)
    mask[:, SEQ - 4:] = 0
    return {"ids": rng.integers(0, VOCAB, (n, SEQ)).astype(np.int32),
            "segments": rng.integers(0, 2, (n, SEQ)).astype(np.int32), "mask": mask}


@pytest.mark.parametrize("calibrated", [True, False])
def test_embeddings_become_uint8_tables_within_cosine(rng, tmp_path, calibrated):
    model = _embedding(rng)
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(sensitivity_samples=0, measure_speed=False,
                                                         check_kernels=False))
    result = onnxq.quantize(model, _feeds(1, 16) if calibrated else None, output=tmp_path / "q.onnx",
                            verify_data=_feeds(2, 16), config=config)
    assert [e.name for e in result.report.quantized] == ["embed"]
    quantized = ir.load(tmp_path / "q.onnx")
    assert [n.op_type for n in quantized.graph] == ["QEmbedLayerNormalization"]
    tables = [ir.convenience.get_const_tensor(v) for v in list(quantized.graph)[0].inputs[2:7]]
    assert [t.dtype for t in tables] == [ir.DataType.UINT8] * 5 and tables[0].shape == (VOCAB, HIDDEN)
    held = _feeds(3, 16)
    expected = make_session(model, optimize=False).run(None, held)
    got = make_session(quantized, optimize=True).run(None, held)
    cosine = float((expected[0] * got[0]).sum() / np.linalg.norm(expected[0]) / np.linalg.norm(got[0]))
    assert cosine >= 0.9999, cosine
    assert np.array_equal(expected[1], got[1])


def test_position_ids_keep_it_float_with_why(rng):
    plans, skips = plan_model(_embedding(rng, position_ids=True).graph, onnxq.QuantConfig(), "static")
    assert not plans and "no position_ids input" in skips[0].reason
