"""AWQ's activation-aware scales for 4-bit blocks (onnxq.smoothing.awq): the scales, the search's error on an activation with
salient channels, and a decoder quantized with --weights int4 --smooth auto — scales absorbed by the norms and the
up projection, never an inserted Mul, the lm_head tied to the embeddings left alone, the float model unchanged."""

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnxq
from onnxq.smoothing.awq import BlockForm, _block_error, choose_awq
from onnxq.calibration.channels import ChannelStats
from onnxq.numerics.smoothing import awq_scales
from onnxq.passes.smoothing.graph import NOT_ABSORBED
from onnxq.smoothing.choice import Candidate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from decoder_model import genai_decoder, kv_decoder, sampled_windows, token_windows  # noqa: E402

FORM = BlockForm(size=32, bits=4, symmetric=True, int8_activations=False)


def test_awq_scales_follow_the_mean_magnitude_and_are_centred():
    means = np.array([0.0, 0.5, 2.0, 8.0], np.float32)
    s = awq_scales(means, 0.5)
    assert s[0] == 1.0  # a channel never active keeps its weights
    np.testing.assert_allclose(s[1:], np.sqrt(means[1:]) / np.sqrt(np.sqrt(0.5) * np.sqrt(8.0)), rtol=1e-6)
    np.testing.assert_array_equal(awq_scales(means, 0.0), np.ones(4, np.float32))
    with pytest.raises(ValueError):
        awq_scales(means, 1.5)


def _salient(rng, k=128, n=96, rows=256):
    """Rows [rows, k] whose 4 channels hold most of the energy (an LLM's outlier channels) and weights [k, n]."""
    x = rng.normal(0, 1, (rows, k)).astype(np.float32)
    x[:, :4] *= 30.0
    return x, rng.normal(0, 0.05, (k, n)).astype(np.float32)


@pytest.mark.parametrize("int8_activations", [False, True])
def test_scaling_the_salient_channels_lowers_the_block_error(rng, int8_activations):
    """Measured (seeded): the 4-bit blocks' relative output error falls from 7.0e-3 unscaled to 3.0e-3 at α = 0.3
    (float activations; 7.1e-3 → 3.0e-3 read as int8 blocks) — the salient channels' weights get finer steps."""
    x, w = _salient(rng)
    form = BlockForm(32, 4, True, int8_activations)
    plain = _block_error(x, [w], [x @ w], None, form)
    best = min(_block_error(x, [w], [x @ w], awq_scales(np.abs(x).mean(0), a), form) for a in (0.3, 0.5, 0.7))
    assert best < 0.6 * plain


def test_the_search_keeps_no_scaling_where_nothing_is_salient(rng):
    """Channels alike: no α beats leaving the weights as they are by much, and a fixed α is applied as given."""
    x = rng.normal(0, 1, (256, 64)).astype(np.float32)
    tape = ir.tape.Tape()
    act = ir.val("x", ir.DataType.FLOAT, ["n", 64])
    weight = tape.initializer(ir.tensor(rng.normal(0, 0.05, (64, 32)).astype(np.float32), name="w"))
    tape.op("MatMul", [act, weight], name="mm")
    from onnxq.handlers.plan import NodePlan, WeightSpec
    plan = NodePlan(tape.nodes[0], weights=(WeightSpec(1, 1),))
    stats = ChannelStats()
    stats.observe(x)
    groups, choices = choose_awq([Candidate(act, (plan,))], {"x": stats}, None, FORM)
    errors = choices[0].errors
    assert min(errors.values()) > 0.8 * errors[None]
    groups, choices = choose_awq([Candidate(act, (plan,))], {"x": stats}, 0.5, FORM)
    assert choices[0].alpha == 0.5 and len(groups) == 1


def _perplexity_ratio(report) -> float:
    return report.verification.outputs[0].metrics.perplexity_ratio


def test_a_decoder_takes_awq_scales_absorbed_exactly(rng, tmp_path):
    """--weights int4 --smooth auto on the Optimum-style decoder: each scaled activation's 1 / s goes into a norm's
    gain or the up projection's columns (the attention output, which nothing absorbs, is left unscaled rather than
    given a Mul), and the file has no Mul the float model did not."""
    model = kv_decoder()
    calibration, held_out = sampled_windows(model, rng, 48, 16), sampled_windows(model, rng, 8, 16)
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4"), smooth="auto",
                               verify=onnxq.VerifyConfig(sensitivity_samples=0, measure_speed=False))
    report = onnxq.quantize(model, calibration, output=tmp_path / "q.onnx", verify_data=held_out,
                            config=config).report
    taken = {s.activation: s.absorbed_by for s in report.smoothing}
    assert all(by == NOT_ABSORBED for name, by in taken.items() if "ctx" in name)
    assert any(by and "gain" in by for by in taken.values()) and "inserted Mul" not in taken.values()
    muls = sum(n.op_type == "Mul" for n in onnx.load(str(tmp_path / "q.onnx")).graph.node)
    assert muls == sum(n.op_type == "Mul" for n in model.graph.node)
    assert report.passed and _perplexity_ratio(report) < 1.05


def test_the_tied_lm_head_is_left_unscaled(rng, tmp_path):
    """The genai builder gathers its embeddings from Transpose(lm_head.weight): scaling lm_head would cost the
    file its one shared 4-bit table, so its group is not searched."""
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4"), smooth="auto",
                               verify=onnxq.VerifyConfig(sensitivity_samples=0, measure_speed=False))
    model = genai_decoder(vocab=1024)  # a table large enough to quantize
    report = onnxq.quantize(model, token_windows(rng, 32, 16, vocab=1024), output=tmp_path / "q.onnx",
                            verify_data=token_windows(rng, 8, 16, vocab=1024), config=config).report
    lm_head_input = next(n.input[0] for n in model.graph.node if n.name == "lm_head/MatMul")
    searched = {s.activation for s in report.smoothing}
    assert lm_head_input not in searched and "l0_act" in searched
    ops = [n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node]
    assert ops.count("GatherBlockQuantized") == 1 and report.quant_bytes < 0.2 * report.float_bytes


def test_4_bit_weights_take_smoothing_as_awq_and_still_refuse_activation_settings():
    assert onnxq.QuantConfig(weights=onnxq.QScheme("int4"), smooth="auto").weight_only
    with pytest.raises(onnxq.errors.ConfigError, match="per-token activations and recipe auto quantize activations"):
        onnxq.QuantConfig(weights=onnxq.QScheme("int4"), activation_granularity="per-token")
    with pytest.raises(onnxq.errors.ConfigError, match="target cuda with smoothing"):
        onnxq.QuantConfig(target="cuda", smooth="auto")
