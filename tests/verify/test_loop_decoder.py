"""A decoder whose steps run inside an ONNX Loop for as long as the data needs (a table recognizer's structure
decoder): its outputs are as long as the slowest sample of a batch. A quantized form that moves a sample's pace
runs another number of steps; such outputs are compared as sequences — each sample's tokens to its end token — never
refused as "an output has shape (8, 69, 8) in the float model but (8, 188, 8) in the quantized one — pass the float
model and its own quantized form", which blames the user for onnxq's own file."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from loop_decoder_model import decoder, features

import onnxq
from onnxq.cli.main import main
from onnxq.errors import UnsupportedModelError
from onnxq.verify.tasks.types import TASK_BARS

COARSE_PACE = 0.25  # a pace weight's int8 scale that moves every sample's pace: 17 steps where float runs 16


def _to_end(model: onnx.ModelProto, x: np.ndarray) -> list[tuple[int, ...]]:
    """Each sample run alone: its tokens up to and including the end token (class 0)."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    found = []
    for sample in x:
        tokens = np.argmax(session.run(["structure_probs"], {"x": sample[None]})[0][0], axis=-1)
        found.append(tuple(tokens[:int(np.flatnonzero(tokens == 0)[0]) + 1]))
    return found


def test_steps_that_differ_are_compared_as_sequences_not_refused(tmp_path, capsys):
    x = features(np.random.default_rng(0), 64)
    float_model, quantized = decoder(), decoder(quantized_pace=COARSE_PACE)
    lengths = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["structure_probs"], {"x": x[:8]})[0].shape[1] for m in (float_model, quantized)]
    assert lengths == [16, 17]  # outputs of different lengths: compared, not refused
    verification = onnxq.verify(float_model, quantized, {"x": x})
    tasks = verification.tasks
    assert tasks["structure_probs"].kind == "decoded" and tasks["structure_probs"].open_lengths
    assert tasks["loc_preds"].kind == "numeric" and tasks["loc_preds"].open_lengths
    check = next(o for o in verification.outputs if o.name == "structure_probs")
    same = sum(a == b for a, b in zip(_to_end(float_model, x), _to_end(quantized, x)))
    assert check.metrics.task_units == 64 and check.metrics.task_agreement == pytest.approx(same / 64, abs=1e-9)
    assert same < 64 and check.bar == TASK_BARS["decoded"] and check.failed  # measured below 0.97
    onnx.save(float_model, tmp_path / "f.onnx")
    onnx.save(quantized, tmp_path / "q.onnx")
    np.savez(tmp_path / "d.npz", x=x)
    code = main(["verify", str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), "--data", str(tmp_path / "d.npz")])
    assert code == 1 and "result: OUT OF TOLERANCE" in capsys.readouterr().out


def test_declared_sizes_that_differ_are_two_different_models():
    """A fixed size differs (4 classes where the float model declares 8): refused before anything runs."""
    other = decoder(quantized_pace=COARSE_PACE)
    other.graph.output[0].type.tensor_type.shape.dim[2].dim_value = 4
    with pytest.raises(UnsupportedModelError, match=r"structure_probs is declared .*8.* in the float model but "
                                                    r".*4.* in the quantized one"):
        onnxq.verify(decoder(), other, {"x": features(np.random.default_rng(0), 8)})


def test_the_loop_body_s_matmuls_are_quantized_and_verified():
    """The body's MatMuls read the main graph's weights: planned in the body, calibrated through it (the Loop's
    steps threaded out), int8 inside it; the run verifies without a refusal whatever steps the quantized model
    takes."""
    rng = np.random.default_rng(0)
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(measure_speed=False, sensitivity_samples=0,
                                                         fallback=False))
    result = onnxq.quantize(decoder(), {"x": features(rng, 256)}, config=config)
    quantized = {e.name: e.detail for e in result.report.quantized}
    assert {"body_step", "body_classes", "body_box"} <= set(quantized)
    assert all("inside" in quantized[n] for n in ("body_step", "body_classes", "body_box"))
    body = next(a.value for n in result.model.graph if n.op_type == "Loop" for a in n.attributes.values())
    assert sum(n.op_type == "DequantizeLinear" for n in body) >= 3
    check = next(o for o in result.report.verification.outputs if o.name == "structure_probs")
    assert check.metrics.task == "decoded" and check.metrics.task_units == 128
    assert result.report.verdict in ("within tolerance", "not shown", "out of tolerance")
