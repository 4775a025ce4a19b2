"""--check-speed per node kind: kinds, the decision rule on given timings, and a real run end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxq
from onnxq.search import speed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "handlers"))
from test_conv import _cnn  # noqa: E402


def _model(tmp_path, rng) -> tuple[Path, dict]:
    """x → Conv 3×3 → Relu → depthwise Conv → Relu → Conv 1×1 → GlobalAveragePool → Flatten → MatMul."""
    model, data = _cnn((2, 8, 16, 16), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, rng, pool=False)
    graph = model.graph
    conv2 = next(n for n in graph.node if n.name == "conv2")
    conv2.input[0] = "d1"
    graph.initializer.append(onnx.numpy_helper.from_array(rng.normal(0, 0.3, (16, 1, 3, 3)).astype(np.float32),
                                                          "wd"))
    graph.node.insert(2, onnx.helper.make_node("Conv", ["r1", "wd"], ["dw"], name="depthwise", group=16,
                                               pads=[1, 1, 1, 1]))
    graph.node.insert(3, onnx.helper.make_node("Relu", ["dw"], ["d1"], name="relu_dw"))
    y = graph.output[0].name
    gap = next(n for n in graph.node if n.output[0] == y)
    gap.output[0] = "pooled"
    graph.node.extend([onnx.helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
                       onnx.helper.make_node("MatMul", ["flat", "wf"], [y], name="fc")])
    graph.initializer.append(onnx.numpy_helper.from_array(rng.normal(0, 0.3, (5, 4)).astype(np.float32), "wf"))
    path = tmp_path / "kinds.onnx"
    onnx.save(model, path)
    return path, data


def test_kinds(tmp_path, rng):
    path, data = _model(tmp_path, rng)
    result = onnxq.quantize(path, data, config=onnxq.QuantConfig(verify=onnxq.VerifyConfig(enabled=False)))
    from onnxq.handlers import plan_model

    plans, _ = plan_model(onnxq.io.load_model(path).graph, onnxq.QuantConfig(), "static")
    assert {p.node.name: speed.node_kind(p, p.node) for p in plans} == {
        "conv1": "Conv kxk", "depthwise": "Conv depthwise", "conv2": "Conv 1x1", "fc": "MatMul"}
    assert {n.name for n in result.model.graph if n.op_type == "Conv"} >= {"conv1", "depthwise", "conv2"}


def _int8_weights(model):
    """The nodes whose weight comes out of a DequantizeLinear."""
    return {n.name for n in model.graph if n.op_type in ("Conv", "MatMul") and n.inputs[1].producer() is not None
            and n.inputs[1].producer().op_type == "DequantizeLinear"}


def test_a_slower_kind_is_kept_float_after_two_measurements(tmp_path, rng, monkeypatch):
    """Given timings (our own timer replaced, ORT untouched): the depthwise kind is slower quantized in both
    measurements and goes float; the 1×1 kind is slower once only (noise) and stays quantized. The chosen model is
    verified, reported and saved."""
    path, data = _model(tmp_path, rng)
    calls: dict[str, int] = {}

    def timed(quantized, floating, batch, provider, rounds):
        if not _int8_weights(floating):  # the whole model against every kind float: faster
            calls["whole"] = calls.get("whole", 0) + 1
            return 1.0, 1.5
        (kind,) = _int8_weights(quantized) - _int8_weights(floating)
        calls[kind] = calls.get(kind, 0) + 1
        if kind == "depthwise" or (kind == "conv2" and calls[kind] == 1):
            return 2.0, 1.0
        return 1.0, 1.5

    monkeypatch.setattr(speed, "_timed", timed)
    result = onnxq.quantize(path, data, output=tmp_path / "q.onnx",
                            config=onnxq.QuantConfig(verify=onnxq.VerifyConfig(check_speed=True)))
    report = result.report.to_dict()
    section = report["speed_by_kind"]
    decided = {k["kind"]: k["kept_float"] for k in section["kinds"]}
    assert decided == {"Conv kxk": False, "Conv depthwise": True, "Conv 1x1": False, "MatMul": False}
    assert calls == {"conv1": 1, "depthwise": 2, "conv2": 2, "fc": 1, "whole": 1}
    assert section["whole_model"] == {"quantized_ms": 1.0, "float_ms": 1.5, "kept_float": [], "first": None,
                                      "measured_faster": []}
    assert section["float_nodes"] == ["depthwise"]
    assert "depthwise" not in {e["name"] for e in report["quantized"]}
    assert [(e["name"], e["detail"]) for e in report["left_float"]] == [
        ("depthwise", "kept float by --check-speed: slower quantized than float on this CPU, measured")]
    assert any(n.startswith("speed: Conv depthwise kept float") for n in report["notes"])
    assert report["verification"]["passed"]
    saved = onnx.load(tmp_path / "q.onnx")
    depthwise = next(n for n in saved.graph.node if n.name == "depthwise")
    assert not any(p.op_type == "DequantizeLinear" for p in saved.graph.node if p.output[0] == depthwise.input[1])


def test_kinds_within_the_noise_go_float_while_the_whole_model_is_slower(tmp_path, rng, monkeypatch):
    """Given timings: each kind alone is within MARGIN of float (stays quantized), but the model as a whole is slower
    than every kind float while two or more kinds are quantized. The kinds that stayed go float, least measured gain
    first (the 1×1 Conv: 1.04 vs 1.00, then the k×k: 1.03 vs 1.00), until the whole model is not slower; each
    whole-model verdict of "slower" is measured twice."""
    path, data = _model(tmp_path, rng)
    gains = {"conv1": (1.03, 1.0), "depthwise": (1.0, 1.2), "conv2": (1.04, 1.0), "fc": (1.0, 1.01)}
    whole: list[int] = []

    def timed(quantized, floating, batch, provider, rounds):
        if not _int8_weights(floating):
            whole.append(len(_int8_weights(quantized)))
            return (1.2, 1.0) if whole[-1] > 2 else (0.9, 1.0)
        (kind,) = _int8_weights(quantized) - _int8_weights(floating)
        return gains[kind]

    monkeypatch.setattr(speed, "_timed", timed)
    report = onnxq.quantize(path, data, config=onnxq.QuantConfig(
        verify=onnxq.VerifyConfig(check_speed=True))).report.to_dict()
    section = report["speed_by_kind"]
    assert not any(k["kept_float"] for k in section["kinds"])
    assert section["whole_model"] == {"quantized_ms": 0.9, "float_ms": 1.0, "kept_float": ["Conv 1x1", "Conv kxk"],
                                      "first": [1.2, 1.0], "measured_faster": []}
    assert whole == [4, 4, 3, 3, 2]
    assert sorted(section["float_nodes"]) == ["conv1", "conv2"]
    assert {e["name"] for e in report["quantized"]} == {"depthwise", "fc"}
    assert any(n.startswith("speed: Conv 1x1, Conv kxk kept float (2 node(s))") for n in report["notes"])


def test_a_kind_measured_faster_stays_quantized_whatever_the_whole_models_timing(tmp_path, rng, monkeypatch):
    """Given timings: the k×k Conv ran clearly faster quantized (1.0 vs 1.3 ms), the 1×1 within the noise (1.04 vs
    1.0); the whole model is measured slower than every kind float however many kinds are quantized (a timing that
    swung on a busy machine). The 1×1 kind goes float, the k×k stays quantized: never against its own measurement,
    and the section and its line say so."""
    path, data = _model(tmp_path, rng)
    gains = {"conv1": (1.0, 1.3), "depthwise": (1.0, 1.2), "conv2": (1.04, 1.0), "fc": (1.0, 1.01)}

    def timed(quantized, floating, batch, provider, rounds):
        if not _int8_weights(floating):
            return 1.2, 1.0
        (kind,) = _int8_weights(quantized) - _int8_weights(floating)
        return gains[kind]

    monkeypatch.setattr(speed, "_timed", timed)
    report = onnxq.quantize(path, data, config=onnxq.QuantConfig(
        verify=onnxq.VerifyConfig(check_speed=True))).report
    section = report.to_dict()["speed_by_kind"]
    assert section["whole_model"]["kept_float"] == ["Conv 1x1", "MatMul"]
    assert section["whole_model"]["measured_faster"] == ["Conv kxk", "Conv depthwise"]
    assert sorted(section["float_nodes"]) == ["conv2", "fc"]
    assert {"conv1", "depthwise"} <= {e.name for e in report.quantized}
    line = next(t for t in report.section("speed_by_kind").text() if "as a whole" in t)
    assert "Conv kxk, Conv depthwise kept quantized: faster by its own timing" in line and "then 1.20 vs 1.00" in line


def test_a_float_conv_between_quantized_ones_is_not_a_quantized_node(tmp_path, rng):
    """The depthwise Conv kept float (as --check-speed keeps it) reads its neighbour's requantized output through a
    DequantizeLinear: the placement does not count it as a quantized node "not found in the executed graph" (the
    classifier's --check-speed run said so), and every quantized node runs on an integer kernel."""
    path, data = _model(tmp_path, rng)
    config = onnxq.QuantConfig(exclude_nodes=("depthwise",), verify=onnxq.VerifyConfig(sensitivity_samples=0,
                                                                                       never_slower=False))
    report = onnxq.quantize(path, data, config=config).report.to_dict()
    placement = report["verification"]["providers"]["CPUExecutionProvider"]["placement"]
    assert set(placement["quantized"]) == {"conv1", "conv2", "fc"} == set(placement["integer"])
    assert placement["findings"] == []


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_real_timings_decide_by_the_rule(tmp_path, rng, mode):
    """Real ORT sessions: every kind is timed and each decision follows its own numbers, and so does the whole
    model's (whatever this CPU is)."""
    path, data = _model(tmp_path, rng)
    config = onnxq.QuantConfig(mode=mode, dynamic_conv=True, verify=onnxq.VerifyConfig(check_speed=True))
    report = onnxq.quantize(path, data if mode == "static" else None, config=config).report.to_dict()
    kinds = report["speed_by_kind"]["kinds"]
    assert {k["kind"] for k in kinds} == {"Conv kxk", "Conv depthwise", "Conv 1x1", "MatMul"}
    for k in kinds:
        assert k["kept_float"] == (k["quantized_ms"] > k["float_ms"] * (1 + speed.MARGIN))
    whole = report["speed_by_kind"]["whole_model"]
    stayed = [k["kind"] for k in kinds if not k["kept_float"]]
    assert (whole is None) == (not stayed)
    if whole is not None:  # it stops when the model is not slower, or when every kind within the noise is float
        noise = [k["kind"] for k in kinds if not k["kept_float"]
                 and not k["float_ms"] > k["quantized_ms"] * (1 + speed.MARGIN)]
        assert (whole["quantized_ms"] <= whole["float_ms"] * (1 + speed.MARGIN)
                or sorted(whole["kept_float"]) == sorted(noise))  # kept in order of least gain
        assert set(whole["kept_float"]) <= set(noise)  # never a kind its own timing found faster quantized
    assert report["verification"]["passed"] and report["speed"]


def test_the_defaults_search_the_kinds_when_the_default_timing_finds_the_model_slower(tmp_path, rng, monkeypatch):
    """Never slower with the defaults. Given timings: the default timing finds the quantized model slower than float
    on this CPU (2.0 vs 1.0 ms), twice in a row, so the kinds are searched as --check-speed does (depthwise slower in
    both measurements: kept float), and the model as chosen is timed again; with --allow-slower it is only said."""
    from onnxq.steps import check_speed as step
    from onnxq.verify.speed.latency import SpeedCheck

    path, data = _model(tmp_path, rng)
    timings = iter([2.0, 2.0, 0.8])  # the default timing's quantized ms: twice before the search, then after it

    def time_both(float_model, quant_model, batch, providers, rounds=10, budget_s=0.0, in_turn=False):
        return (SpeedCheck("CPUExecutionProvider", 1.0, next(timings), rounds),)

    def timed(quantized, floating, batch, provider, rounds):
        if not _int8_weights(floating):
            return 1.0, 1.5
        (kind,) = _int8_weights(quantized) - _int8_weights(floating)
        return (2.0, 1.0) if kind == "depthwise" else (1.0, 1.5)

    monkeypatch.setattr(step, "time_both", time_both)
    monkeypatch.setattr(speed, "_timed", timed)
    report = onnxq.quantize(path, data, config=onnxq.QuantConfig(verify=onnxq.VerifyConfig(sensitivity_samples=0)))
    notes = report.report.notes
    assert any(n.startswith("speed: the quantized model ran 0.50x float on this CPU") for n in notes)
    assert report.report.to_dict()["speed_by_kind"]["float_nodes"] == ["depthwise"]
    assert [s.speedup for s in report.report.speed] == [1.25] and not any(n.startswith("SPEED:") for n in notes)
    timings = iter([2.0])
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(sensitivity_samples=0, never_slower=False))
    allowed = onnxq.quantize(path, data, config=config).report
    assert "depthwise" in {e.name for e in allowed.quantized} and "speed_by_kind" not in allowed.to_dict()
    assert any(n.startswith("SPEED: the quantized model is not faster") for n in allowed.notes)


def test_a_slower_timing_that_the_next_one_does_not_confirm_changes_nothing(tmp_path, rng, monkeypatch):
    """One timing on a loaded machine swings past a tie: the defaults act only on a model clearly slower (under
    0.95x float) in two timings in a row, so the written model does not depend on the machine's load."""
    from onnxq.steps import check_speed as step
    from onnxq.verify.speed.latency import SpeedCheck

    path, data = _model(tmp_path, rng)
    for quantized_ms in ([2.0, 0.9], [1.04, 1.04]):  # not confirmed; within 5 % of float (0.96x): a tie
        timings = iter(quantized_ms)

        def time_both(float_model, quant_model, batch, providers, rounds=10, budget_s=0.0, in_turn=False):
            return (SpeedCheck("CPUExecutionProvider", 1.0, next(timings), rounds),)

        monkeypatch.setattr(step, "time_both", time_both)
        report = onnxq.quantize(path, data, config=onnxq.QuantConfig(
            verify=onnxq.VerifyConfig(sensitivity_samples=0))).report
        assert "speed_by_kind" not in report.to_dict() and len(report.quantized) == 4, quantized_ms  # every node
        assert not any(n.startswith("speed: the quantized model ran") for n in report.notes)
