"""A large model's sessions without optimizations run a segment of nodes at a time (memory near the model's
size, io.segments): the same outputs bit for bit as one session over the whole graph — a contrib op's outputs at a
cut, a body reading a value from an earlier segment, a whole quantization run — with at most one segment's
memory-mapped weights resident after a run."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from decoder_model import genai_decoder, kv_decoder, token_windows
from large_model import write_large_model
from onnx import TensorProto, helper, numpy_helper

import onnxq
import onnxq.io.segments as segments
import onnxq.steps.sensitivity as steps_sensitivity
from onnxq.data.specs import input_specs
from onnxq.data.completion import completed
from onnxq.io import OrtModel, load_model, page_out
from onnxq.io.segments import SegmentedSession, plan_segments
from onnxq.io.sessions import ORT_ERRORS, session_options

MB = 2**20


def _cut_every_model(monkeypatch) -> None:
    """Every model cut into eighths of its weights from now on, however small."""
    monkeypatch.setattr(segments, "SEGMENT_FROM_BYTES", 0)
    monkeypatch.setattr(segments, "_MIN_SEGMENT_BYTES", 0)


@pytest.fixture
def cut_small(monkeypatch):
    _cut_every_model(monkeypatch)


def _exact(model: ir.Model):
    return OrtModel(model).session(session_options(optimize=False), ["CPUExecutionProvider"])


def _decoder_feed(model: ir.Model, rng) -> dict[str, np.ndarray]:
    return completed(token_windows(rng, 3, 7), input_specs(model))


@pytest.mark.parametrize("build", [kv_decoder, genai_decoder], ids=["optimum-style", "genai-builder"])
def test_a_segmented_session_gives_the_whole_session_s_outputs_bit_for_bit(build, rng, monkeypatch):
    model = load_model(build())
    feed = _decoder_feed(model, rng)
    whole = _exact(model)
    assert not isinstance(whole, SegmentedSession)
    expected = whole.run(None, feed)
    _cut_every_model(monkeypatch)
    segmented = _exact(model)
    assert isinstance(segmented, SegmentedSession) and len(segmented._segments) >= 4
    assert [o.name for o in segmented.get_outputs()] == [o.name for o in whole.get_outputs()]
    assert [(i.name, i.shape) for i in segmented.get_inputs()] == [(i.name, i.shape) for i in whole.get_inputs()]
    for _ in range(2):  # the second run reuses the segments' sessions
        got = segmented.run(None, feed)
        for want, have in zip(expected, got, strict=True):
            np.testing.assert_array_equal(have, want)
    names = [o.name for o in whole.get_outputs()][::-1][:3]  # some outputs, in another order
    for want, have in zip(whole.run(names, feed), segmented.run(names, feed), strict=True):
        np.testing.assert_array_equal(have, want)
    for session in (whole, segmented):  # what ORT raises, which the callers catch (io.sessions.ORT_ERRORS)
        with pytest.raises(ORT_ERRORS, match="Invalid output name"):
            session.run(["no_such_output"], feed)
        with pytest.raises(ValueError, match=r"Required inputs \(\['input_ids'\]\) are missing"):
            session.run(None, {k: v for k, v in feed.items() if k != "input_ids"})


def test_every_cut_is_read_from_the_graph_inputs_or_an_earlier_segment(rng):
    model = load_model(kv_decoder())
    weights = sum(v.const_value.nbytes for v in model.graph.initializers.values())
    plan = plan_segments(model.graph, weights // 8)
    assert len(plan) >= 4
    made = {v.name for v in model.graph.inputs}
    for segment in plan:
        assert set(segment.inputs) <= made
        made |= set(segment.outputs)
    assert {v.name for v in model.graph.outputs} <= made
    owned = [name for segment in plan for name in segment.initializers]
    assert set(owned) == set(model.graph.initializers)
    # A node listed before what it reads (not topologically sorted): the graph is not cut.
    first = model.graph.node(0)
    model.graph.remove(first)
    model.graph.append(first)
    assert plan_segments(model.graph, weights // 8) == []
    model.graph.sort()
    assert len(plan_segments(model.graph, weights // 8)) >= 4
    # An output no node makes (an initializer returned as it is): the graph is not cut.
    model.graph.outputs.append(model.graph.initializers["embed"])
    assert plan_segments(model.graph, weights // 8) == []


def _body_reading_an_earlier_cut() -> onnx.ModelProto:
    """x @ w1 -> a; If(flag): then a + w2 (w2 read only in the body), else a * w2; then @ w3. Cut after the first
    MatMul, the If's body reads `a` from the segment before."""
    rng = np.random.default_rng(0)
    w = {n: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), n)
         for n, shape in (("w1", (32, 32)), ("w2", (32,)), ("w3", (32, 32)))}
    out = helper.make_tensor_value_info("b", TensorProto.FLOAT, None)
    then = helper.make_graph([helper.make_node("Add", ["a", "w2"], ["b"], name="then_add")], "then", [], [out])
    other = helper.make_graph([helper.make_node("Mul", ["a", "w2"], ["b"], name="else_mul")], "else", [], [out])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
             helper.make_node("If", ["flag"], ["branch"], name="if", then_branch=then, else_branch=other),
             helper.make_node("MatMul", ["branch", "w3"], ["y"], name="mm3")]
    graph = helper.make_graph(nodes, "body", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32]),
                                              helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])], list(w.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def test_a_body_reads_a_value_made_in_an_earlier_segment(cut_small):
    model = load_model(_body_reading_an_earlier_cut())
    plan = plan_segments(model.graph, 32 * 32 * 4)
    assert [s.initializers for s in plan] == [("w1",), ("w2",), ("w3",)]
    assert plan[1].inputs == ("flag", "a")  # `a` is read inside the If's bodies only
    session = _exact(model)
    assert isinstance(session, SegmentedSession)
    x = np.random.default_rng(1).standard_normal((5, 32)).astype(np.float32)
    w = {n: v.const_value.numpy() for n, v in model.graph.initializers.items()}
    for flag, branch in ((True, x @ w["w1"] + w["w2"]), (False, (x @ w["w1"]) * w["w2"])):
        (y,) = session.run(["y"], {"x": x, "flag": np.array(flag)})
        np.testing.assert_allclose(y, branch @ w["w3"], rtol=1e-4, atol=1e-3)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_after_a_segmented_run_one_segment_s_weights_stay_resident(tmp_path, monkeypatch):
    """8 × 2048² float32 weights (128 MiB) memory-mapped, cut at 32 MiB: after a run at most 32 MiB of them are
    resident (the whole session: all 128, tests/e2e/test_weight_memory.py)."""
    monkeypatch.setattr(segments, "SEGMENT_FROM_BYTES", 64 * MB)
    monkeypatch.setattr(segments, "_MIN_SEGMENT_BYTES", 32 * MB)
    monkeypatch.setattr(segments, "_SEGMENTS", 8)
    model = load_model(write_large_model(tmp_path, layers=8, width=2048))
    x = np.random.default_rng(0).standard_normal((2, 2048)).astype(np.float32)
    session = _exact(model)
    assert isinstance(session, SegmentedSession) and len(session._segments) == 4
    page_out(model)
    before = _resident_file_bytes()
    (y,) = session.run(None, {session.get_inputs()[0].name: x})
    grown = _resident_file_bytes() - before
    assert grown <= 40 * MB, f"{grown / MB:.0f} MiB of weights resident after the run (at most one 32 MiB segment)"
    expected = x
    for value in model.graph.initializers.values():
        expected = expected @ value.const_value.numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-3, atol=1e-2 * np.abs(expected).max())


def _recorded(init, made: list[str]):
    """SegmentedSession.__init__, noting the onnxq module that asked for the session (not the helpers that make
    sessions)."""
    package = str(Path(onnxq.__file__).parent)  # by location: the checkout's own folder may be named onnxq
    helpers = (str(Path(package, "io")),)

    def recorded(self, *args, **kwargs):
        caller = next(frame.filename for frame in traceback.extract_stack()[::-1]
                      if frame.filename.startswith(package) and not frame.filename.startswith(helpers))
        made.append(caller.rsplit("/", 1)[-1].removesuffix(".py"))
        init(self, *args, **kwargs)
    return recorded


def _resident_file_bytes() -> int:
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["RssFile"].split()[0]) * 1024


def test_a_quantization_run_with_segmented_sessions_writes_the_same_model(rng, tmp_path, monkeypatch):
    """Calibration, the float reference, the exact check and the sensitivity all run on segments: the same scales,
    the same file, the same figures. The sensitivity runs the exact quantization, as it does for a model this cut
    is for."""
    monkeypatch.setattr(steps_sensitivity, "DEPLOYED_MAX_WEIGHT_BYTES", 0)
    source = tmp_path / "decoder.onnx"
    onnx.save(kv_decoder(), source)
    calibration, held_out = token_windows(rng, 24, 12), token_windows(rng, 8, 12)
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(never_slower=False, check_speed=False, sensitivity="always"))

    def quantized(name: str):
        result = onnxq.quantize(source, calibration, output=tmp_path / name, verify_data=held_out, config=config)
        return onnx.load(tmp_path / name), result.report
    whole_model, whole = quantized("whole.onnx")
    _cut_every_model(monkeypatch)
    made = []
    monkeypatch.setattr(SegmentedSession, "__init__", _recorded(SegmentedSession.__init__, made))
    cut_model, cut = quantized("cut.onnx")
    assert [numpy_helper.to_array(t).tobytes() for t in cut_model.graph.initializer] == \
        [numpy_helper.to_array(t).tobytes() for t in whole_model.graph.initializer]
    assert [o.metrics for o in cut.verification.outputs] == [o.metrics for o in whole.verification.outputs]
    harms = [[(n.name, n.harm) for n in report.section("sensitivity").nodes] for report in (cut, whole)]
    assert harms[0] == harms[1] and len(harms[0]) >= 10
    assert cut.section("sensitivity").kernels == "exact"
    assert made == ["exposed", "reference", "emulate", "sensitivity"]  # exposed: the channel statistics' session
