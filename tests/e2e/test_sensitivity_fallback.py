"""Per-layer sensitivity and accuracy-aware fallback, on the samples and on MiniLM."""

import dataclasses
import json
import math

import numpy as np
import pytest

import onnxq
import onnxq.steps.sensitivity
from onnxq.cli.main import main
from onnxq.report.summary import format_summary


def _config(**verify):
    return onnxq.QuantConfig(verify=onnxq.VerifyConfig(**verify))


RANKED = _config(sensitivity="always")  # ranked on a passing run too, for the report


def test_sensitivity_ranks_every_quantized_node_deterministically(samples_dir):
    model, data = samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz"
    first = onnxq.quantize(model, data, config=RANKED).report.sensitivity
    again = onnxq.quantize(model, data, config=RANKED).report.sensitivity
    assert len(first.nodes) == 7 and first.samples == 12  # the held-out samples, all 12 (<= 16)
    harms = [n.harm for n in first.nodes]
    assert harms == sorted(harms, reverse=True)
    assert [(n.name, n.harm) for n in first.nodes] == [(n.name, n.harm) for n in again.nodes]


def test_sensitivity_predicts_the_real_one_node_quantization(samples_dir):
    """The switch model's figure for a node equals quantizing that node alone for real (same samples)."""
    model, data = samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz"
    verify_on = {"input_ids": np.load(data)["input_ids"][:16]}
    result = onnxq.quantize(model, data, verify_data=verify_on, config=RANKED)
    names = [e.name for e in result.report.quantized]
    for node in result.report.sensitivity.nodes[:3]:
        alone = onnxq.QuantConfig(exclude_nodes=tuple(n for n in names if n != node.name),
                                  verify=onnxq.VerifyConfig(sensitivity_samples=0))
        real = onnxq.quantize(model, data, verify_data=verify_on, config=alone).report.verification
        predicted = node.outputs["last_hidden_state"].cosine_mean
        measured = real.outputs[0].metrics.cosine_mean
        # The simulation runs unfused QDQ float arithmetic; ORT runs integer kernels: equal to ~1e-5.
        assert abs((1 - predicted) - (1 - measured)) <= 2e-5 + 0.05 * (1 - measured), node.name


def test_fallback_meets_a_tighter_tolerance_with_the_fewest_nodes(samples_dir, tmp_path, capsys):
    model, data = str(samples_dir / "mlp.onnx"), str(samples_dir / "mlp_calib.npz")
    # Default (portable) target, measured on AVX2 and as exact quantization: 33.9 dB with every node int8,
    # 34.9 / 35.1 / 36.5 dB with one node float; 36 dB needs exactly one node float (fc2).
    # Numeric bars only: the sample MLP's random weights leave a held-out near tie that int8 flips (top-1 0.96),
    # which the default top-1 gate would restore first (tests/e2e/test_task_gate.py).
    numeric = _config(tolerance=onnxq.Tolerance(task="numeric"))
    plain = onnxq.quantize(model, data, config=numeric).report.verification.outputs[0].metrics.sqnr_db
    assert plain < 36
    runs = []
    for i in range(2):
        code = main([model, "--calib", data, "--tolerance", "sqnr=36", "--task-metric", "numeric",
                     "-o", str(tmp_path / f"q{i}.onnx"),
                     "--report", str(tmp_path / f"r{i}.json")])
        assert code == 0
        runs.append(json.loads((tmp_path / f"r{i}.json").read_text()))
    first, second = runs
    kept = [n["name"] for n in first["fallback"]["kept_float"]]
    assert first["fallback"]["met"] and 1 <= len(kept) < 3
    assert kept == [n["name"] for n in second["fallback"]["kept_float"]]  # deterministic
    assert first["fallback"]["before"]["logits"]["sqnr_db"] < 36 <= first["fallback"]["after"]["logits"]["sqnr_db"]
    assert {e["name"] for e in first["left_float"]} == set(kept)
    assert all("kept float by fallback" in e["detail"] for e in first["left_float"])
    assert first["verification"]["passed"] and first["passed"]
    out = capsys.readouterr().out
    assert f"fallback: kept {len(kept)} node(s) float" in out


def test_fallback_reasons_outlive_the_speed_checks_build(samples_dir, monkeypatch):
    """--check-speed after the fallback builds the model again (the planner then sees the fallback's nodes as
    excluded by name): each float node still says which search kept it and why. Given timings: Gemm is slower
    quantized, so every Gemm the fallback left quantized goes float too."""
    from onnxq.search import speed
    monkeypatch.setattr(speed, "_timed", lambda quantized, floating, batch, provider, rounds: (2.0, 1.0))
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(
        tolerance=onnxq.Tolerance(min_sqnr_db=36.0), fallback=True, check_speed=True))
    result = onnxq.quantize(str(samples_dir / "mlp.onnx"), str(samples_dir / "mlp_calib.npz"), config=config)
    report = result.report.to_dict()
    kept = {n["name"] for n in report["fallback"]["kept_float"]}
    reasons = {e["name"]: e["detail"] for e in report["left_float"]}
    assert kept and set(reasons) == {"/fc0/Gemm", "/fc1/Gemm", "/fc2/Gemm"} and not report["quantized"]
    for name, detail in reasons.items():
        assert detail.startswith("kept float by fallback" if name in kept else "kept float by --check-speed"), detail
    assert "quantized:   none (every node kept float: see below)" in format_summary(result.report)
    assert not any(n.startswith("SPEED:") for n in report["notes"])  # float against float says nothing


def test_fallback_that_cannot_meet_the_tolerance_exits_1(samples_dir, tmp_path, capsys):
    model, data = str(samples_dir / "mlp.onnx"), str(samples_dir / "mlp_calib.npz")
    assert main([model, "--calib", data, "--tolerance", "max_abs=0", "-o", str(tmp_path / "q.onnx")]) == 1
    out = capsys.readouterr().out
    assert "the tolerance cannot be met" in out and "OUT OF TOLERANCE" in out


def test_tolerance_without_fallback_only_gates(samples_dir):
    config = _config(tolerance=onnxq.Tolerance(min_sqnr_db=40.0), fallback=False)
    report = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz", config=config).report
    assert report.fallback is None and report.passed is False


@pytest.mark.shared_models
@pytest.mark.real_models
def test_minilm_sensitivity_and_fallback(shared_models):
    """MinMax, uint8 activations, per-channel int8 weights, tolerance on the sentence embedding."""
    m = shared_models / "minilm"
    evaluation = dict(np.load(m / "eval_sentences.npz"))
    verify_on = {k: v[:64] for k, v in evaluation.items()}
    tolerance = {"sentence_embedding": onnxq.Tolerance(min_cosine=0.996)}
    config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(method="minmax"),
                               verify=onnxq.VerifyConfig(output_tolerances=tolerance, fallback=True))
    reports = [onnxq.quantize(m / "all-MiniLM-L6-v2.onnx", m / "calib_docs.npz", verify_data=verify_on,
                              config=config).report for _ in range(2)]
    report = reports[0]
    sensitivity = report.sensitivity
    # Measured independently (each group quantized alone, for real, 500 sentences): the FFN output projections
    # cost the most (0.9966), then the FFN inputs (0.9979), then the rest (>= 0.9988).
    assert sensitivity.groups[0].pattern == "/encoder/layer.*/output/dense/MatMul"
    # And node by node (each quantized alone for real): layers 0, 2, 1 of the FFN output projection lead.
    assert [n.name for n in sensitivity.nodes[:3]] == [
        f"/encoder/layer.{i}/output/dense/MatMul" for i in (0, 2, 1)]
    fallback = report.fallback
    assert fallback.met and report.passed
    kept = [name for name, _ in fallback.kept_float]
    assert kept == [name for name, _ in reports[1].fallback.kept_float]  # same k, same nodes
    assert kept[0] == "/encoder/layer.0/output/dense/MatMul" and 1 <= len(kept) <= 6
    before = {o.name: o.metrics.cosine_mean for o in fallback.before.outputs}["sentence_embedding"]
    after = {o.name: o.metrics.cosine_mean for o in fallback.after.outputs}["sentence_embedding"]
    assert before < 0.996 <= after


def test_large_models_rank_groups_only_by_default(samples_dir):
    config = _config(sensitivity_max_nodes=2, tolerance=onnxq.Tolerance(task="numeric"),  # see above: near tie
                     sensitivity="always")
    report = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz", config=config).report
    assert report.sensitivity.nodes == ()
    [group] = report.sensitivity.groups
    assert group.pattern == "/fc*/Gemm" and group.members == ("/fc0/Gemm", "/fc1/Gemm", "/fc2/Gemm")
    assert any("groups ranked, not single nodes" in n for n in report.notes)


def test_a_nan_sensitivity_fails_the_gate_with_the_reason(samples_dir, tmp_path, monkeypatch, capsys):
    """Quantizing one node alone makes an output NaN (here forced, as an overflowing layer would): the run does not
    end "within tolerance", and the summary says which node and why."""
    real = onnxq.steps.sensitivity.layer_sensitivity

    def with_nan(*args, **kwargs):
        result = real(*args, **kwargs)
        first = result.nodes[0]
        broken = {k: dataclasses.replace(m, nonfinite=3) for k, m in first.outputs.items()}
        nodes = (dataclasses.replace(first, outputs=broken, harm=math.inf), *result.nodes[1:])
        return dataclasses.replace(result, nodes=nodes)

    monkeypatch.setattr(onnxq.steps.sensitivity, "layer_sensitivity", with_nan)
    code = main([str(samples_dir / "mlp.onnx"), "--calib", str(samples_dir / "mlp_calib.npz"), "-o",
                 str(tmp_path / "q.onnx"), "--sensitivity"])
    out = capsys.readouterr().out
    assert code == 1
    assert "alone makes an output NaN or inf" in out and "result: OUT OF TOLERANCE" in out


@pytest.mark.parametrize("target", ["portable", "x86-vnni", "arm64"])
def test_sensitivity_ranks_on_the_deployed_kernels_only_where_they_are_the_target_s(samples_dir, target):
    """This CPU's kernels stand for the target only when this CPU is one the target covers (an AVX2 machine
    quantizing for x86-vnni would rank its own int16 saturation); otherwise the exact quantization is ranked."""
    from onnxq.targets import covered_targets

    report = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz",
                            config=onnxq.QuantConfig(target=target, verify=RANKED.verify)).report
    here = report.verification.coverage.platform["cpu_target"]
    sensitivity = report.sensitivity
    if here in covered_targets(target):
        assert sensitivity.kernels == "deployed", sensitivity.kernels_reason
    else:
        assert sensitivity.kernels == "exact" and f"not target {target}'s" in sensitivity.kernels_reason
    assert len(sensitivity.nodes) == 3 and all(n.harm >= 0 for n in sensitivity.nodes)


def test_a_model_over_the_weight_limit_ranks_on_the_exact_quantization(samples_dir, monkeypatch):
    """A deployed session would copy every weight of the switch model; above the limit the exact one, which computes
    on the weights in place, ranks (tests/e2e/test_large_model.py holds a 2.3 GB model's peak within 1.5x)."""
    monkeypatch.setattr(onnxq.steps.sensitivity, "DEPLOYED_MAX_WEIGHT_BYTES", 1000)  # mlp's weights: ~100 kB
    report = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz", config=RANKED).report
    assert report.sensitivity.kernels == "exact" and "would hold their own copy" in report.sensitivity.kernels_reason


def test_over_the_node_limit_the_fallback_bisects_the_groups_ranking(samples_dir):
    """Over verify.sensitivity_max_nodes the fallback no longer ranks every node alone on every sample (SmolLM2:
    152 products on 48 windows, unfinished in 45 minutes): the group's members share its harm, worst own error
    first, and the bisection meets the tolerance from that ranking."""
    config = _config(sensitivity_max_nodes=2, tolerance=onnxq.Tolerance(min_sqnr_db=36.0, task="numeric"))
    report = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz", config=config).report
    sensitivity, fallback = report.sensitivity, report.fallback
    assert not sensitivity.per_node and sensitivity.nodes == () and len(sensitivity.groups) == 1
    assert set(sensitivity.local_sqnr_db) == {"/fc0/Gemm", "/fc1/Gemm", "/fc2/Gemm"}
    assert fallback.met and report.passed and 1 <= len(fallback.kept_float) <= 2
    worst_first = sorted(sensitivity.local_sqnr_db, key=sensitivity.local_sqnr_db.get)
    assert [name for name, _ in fallback.kept_float] == worst_first[:len(fallback.kept_float)]


def test_the_groups_ranking_shares_each_group_s_harm_beside_the_nodes_alone():
    from onnxq.search.fallback import fallback_ranking
    from onnxq.search.sensitivity import GroupSensitivity, NodeSensitivity, Sensitivity

    head = NodeSensitivity("lm_head", "MatMul", {}, 30.0, 0.5)
    groups = (GroupSensitivity("l*/down", ("l0/down", "l1/down", "l2/down"), {}, 0.9),
              GroupSensitivity("l*/up", ("l0/up", "l1/up"), {}, 0.2))
    local = {"l0/down": 25.0, "l1/down": 18.0, "l2/down": math.nan, "l0/up": 40.0, "l1/up": 35.0, "lm_head": 30.0}
    sensitivity = Sensitivity(8, (head,), groups, per_node=False, local_sqnr_db=local)
    assert fallback_ranking(sensitivity) == [("lm_head", 0.5), ("l1/down", 0.3), ("l0/down", 0.3),
                                             ("l2/down", 0.3), ("l1/up", 0.1), ("l0/up", 0.1)]
    assert fallback_ranking(dataclasses.replace(sensitivity, per_node=True)) == [("lm_head", 0.5)]
