"""The escalating default (range_choice and weight_rounding auto): the cheap model first; the Conv methods that
read the data again only where its gate fails, on the Convs the sensitivity points at, cheapest first, then on every
Conv; the sensitivity only where a failing gate needs it."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jsonschema
import numpy as np
import onnx_ir as ir
import pytest

import onnxq
from correlated_cnn import correlated_inputs, two_conv_cnn
from onnxq.io.model_sessions import make_session
from onnxq.search.escalation import escalation_stages, pointed_nodes


def _run(min_cosine: float, **config):
    rng = np.random.default_rng(0)
    calibration, held_out = {"x": correlated_inputs(rng, 64)}, {"x": correlated_inputs(rng, 32)}
    settings = {"verify": {"tolerance": {"min_cosine": min_cosine}}, **config}
    return onnxq.quantize(two_conv_cnn(), calibration, verify_data=held_out, config=settings), held_out


def _cosine(model: ir.Model, reference: ir.Model, x: np.ndarray) -> float:
    got = make_session(model, optimize=False).run(None, {"x": x})[0].reshape(len(x), -1)
    want = make_session(reference, optimize=False).run(None, {"x": x})[0].reshape(len(x), -1)
    return float(np.mean(np.sum(got * want, 1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)))


def test_a_model_that_meets_its_bar_cheaply_gets_no_sensitivity_and_no_second_pass_over_the_data():
    result, _ = _run(0.98)
    report = result.report
    assert report.verdict == "within tolerance"
    assert "sensitivity" not in report.seconds and "escalate" not in report.seconds
    assert report.sensitivity is None and report.section("escalation") is None
    assert not any("GPTQ" in note or "narrowed to the window" in note for note in report.notes)
    nearest, _ = _run(0.98, weight_rounding="nearest", calibration={"range_choice": "saturation"})
    weights = {n: v.const_value.numpy() for n, v in result.model.graph.initializers.items()}
    same = {n: v.const_value.numpy() for n, v in nearest.model.graph.initializers.items()}
    assert weights.keys() == same.keys() and all(np.array_equal(weights[n], same[n]) for n in weights)


def test_a_failing_gate_escalates_cheapest_first_on_the_pointed_conv_and_keeps_every_node_quantized():
    """Measured on this seed (cosine of y on the 32 held-out inputs): nearest rounding 0.99993, the output-error
    window alone 0.99993, GPTQ on conv2 (the node the ranking points at) 0.999997 — the bar 0.99995 lies between."""
    result, held_out = _run(0.99995)
    report, escalation = result.report, result.report.section("escalation")
    assert report.verdict == "within tolerance" and not report.left_float
    assert [(t.stage.nodes, t.stage.windows, t.stage.gptq, t.met) for t in escalation.tries] == [
        (("conv2",), True, False, False), (("conv2",), True, True, True)]
    assert report.fallback is None and report.sensitivity is not None  # ranked for the escalation
    assert "1 Conv weight(s) rounded by GPTQ" in " | ".join(report.notes)
    assert _cosine(result.model, two_conv_cnn(), held_out["x"]) >= 0.99995
    written = json.loads(json.dumps(report.to_dict()))  # as the --report file holds it
    jsonschema.validate(written, json.loads((Path(onnxq.__file__).parent / "report_schema.json").read_text()))
    assert written["escalation"]["met"] is True and len(written["escalation"]["tries"]) == 2


def test_explicit_methods_are_applied_up_front_and_nothing_is_escalated():
    result, _ = _run(0.99995, weight_rounding="gptq", calibration={"range_choice": "output-error"})
    report = result.report
    assert report.verdict == "within tolerance" and report.section("escalation") is None
    assert "2 Conv weight(s) rounded by GPTQ" in " | ".join(report.notes)


def test_nearest_rounding_asked_for_leaves_escalation_the_windows_only_and_then_the_fallback():
    result, _ = _run(0.99995, weight_rounding="nearest")
    tries = result.report.section("escalation").tries
    assert [(t.stage.windows, t.stage.gptq, t.stage.every) for t in tries] == [(True, False, False),
                                                                            (True, False, True)]
    assert not any(t.met for t in tries)
    assert result.report.fallback is not None  # what escalation could not do, the fallback does


def test_data_read_once_says_why_escalation_was_not_tried_and_the_fallback_meets_the_bar():
    rng = np.random.default_rng(0)
    calibration, held_out = correlated_inputs(rng, 64), {"x": correlated_inputs(rng, 32)}
    one_shot = iter([{"x": calibration[i:i + 16]} for i in range(0, 64, 16)])
    report = onnxq.quantize(two_conv_cnn(), one_shot, verify_data=held_out,
                            config={"verify": {"tolerance": {"min_cosine": 0.99995}}}).report
    assert report.section("escalation") is None and "escalate" not in report.seconds
    assert any(n.startswith("escalation: the output-error windows and GPTQ rounding not tried") and "one-shot" in n
               for n in report.notes)
    assert report.verdict == "within tolerance" and report.left_float  # the fallback's float node


def test_the_reported_ranges_are_those_of_the_escalated_model():
    result, _ = _run(0.99995)
    narrowed = [n for n in result.report.notes if "narrowed to the window" in n]
    assert narrowed  # the pointed Conv's input window was narrowed, and the report gives the narrowed range
    cheap, _ = _run(0.99995, calibration={"range_choice": "saturation"}, weight_rounding="nearest",
                    verify={"tolerance": {"min_cosine": 0.99995}, "fallback": False})
    changed = {k for k, v in result.report.ranges.items() if tuple(v) != tuple(cheap.report.ranges[k])}
    assert changed == {"r1"}  # conv2's input


def test_sensitivity_always_ranks_a_passing_model_for_the_report():
    result, _ = _run(0.98, verify={"tolerance": {"min_cosine": 0.98}, "sensitivity": "always"})
    assert result.report.sensitivity is not None and result.report.section("escalation") is None


@dataclasses.dataclass
class _Node:
    name: str
    harm: float


@dataclasses.dataclass
class _Group:
    members: tuple[str, ...]
    harm: float


@dataclasses.dataclass
class _Ranking:
    nodes: tuple = ()
    groups: tuple = ()
    per_node: bool = True


def test_the_pointed_convs_are_the_fewest_most_harmful_that_make_most_of_the_harm():
    ranking = _Ranking((_Node("a", 5.0), _Node("gemm", 4.0), _Node("b", 3.0), _Node("c", 1.0), _Node("d", 1.0)))
    # Convs a..d: harm 10 in all; a (5) + b (3) = 8 = 0.8 of it.
    assert pointed_nodes(ranking, ["a", "b", "c", "d"]) == ("a", "b")
    assert pointed_nodes(ranking, ["c", "d"]) == ("c", "d")  # 1 of 2 is not 0.8
    # A ranking that points nowhere (no harm measured): every one.
    assert pointed_nodes(_Ranking((_Node("a", 0.0), _Node("b", 0.0))), ["a", "b"]) == ("a", "b")
    assert pointed_nodes(_Ranking((_Node("b", math.inf), _Node("a", 1.0))), ["a", "b"]) == ("b",)  # NaN alone
    groups = _Ranking(groups=(_Group(("c1", "c2", "m"), 9.0), _Group(("c3",), 1.0)), per_node=False)
    assert pointed_nodes(groups, ["c1", "c2", "c3"]) == ("c1", "c2")


@pytest.mark.parametrize(("windows", "gptq", "expected"), [
    (True, True, [(("a",), True, False, False), (("a",), True, True, False), (("a", "b"), True, True, True)]),
    (False, True, [(("a",), False, True, False), (("a", "b"), False, True, True)]),
    (True, False, [(("a",), True, False, False), (("a", "b"), True, False, True)]),
    (False, False, []),
])
def test_the_stages_go_cheapest_first_then_to_every_conv(windows, gptq, expected):
    stages = escalation_stages(("a",), ("a", "b"), windows, gptq)
    assert [(s.nodes, s.windows, s.gptq, s.every) for s in stages] == expected
    assert [s.every for s in escalation_stages(("a", "b"), ("a", "b"), True, True)] == [False, False]
