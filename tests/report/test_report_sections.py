"""A new report section is one class and the step that adds it (one line in steps.run.STEPS): the JSON report, the
summary and the HTML page render it with no other change."""

from __future__ import annotations

import dataclasses
import json

import pytest

import onnxq
from onnxq.report.html import render_html
from onnxq.report.record import escape
from onnxq.steps import run as steps_run
from onnxq.report.summary import format_summary


@dataclasses.dataclass(frozen=True)
class LargestWeights:
    """A section this test adds: the quantized model's largest stored tensors."""

    tensors: tuple[tuple[str, int], ...]  # (name, bytes), largest first
    key = "largest_weights"

    def to_dict(self) -> dict:
        return {"tensors": [{"name": n, "bytes": b} for n, b in self.tensors]}

    def text(self) -> list[str]:
        return ["largest:     " + ", ".join(f"{n} {b} B" for n, b in self.tensors)]

    def html(self) -> str:
        return "<h2>Largest tensors</h2><ol>" + "".join(f"<li>{escape(n)}: {b} B</li>" for n, b in self.tensors) + "</ol>"


def _largest_weights(state) -> bool:
    sizes = sorted(((name, v.const_value.nbytes) for name, v in state.quantized.work.graph.initializers.items()
                    if v.const_value is not None), key=lambda t: (-t[1], t[0]))
    state.sections.append(LargestWeights(tuple(sizes[:2])))
    return True


@pytest.fixture
def with_section(monkeypatch):
    steps = list(steps_run.STEPS)
    steps.insert([s.name for s in steps].index("save"), steps_run.Step("largest_weights", _largest_weights))
    monkeypatch.setattr(steps_run, "STEPS", tuple(steps))


def test_a_new_section_is_in_the_json_the_summary_and_the_html(samples_dir, with_section):
    numeric = onnxq.QuantConfig(verify=onnxq.VerifyConfig(tolerance=onnxq.Tolerance(task="numeric"),  # every node
                                                          sensitivity="always"))
    report = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz", config=numeric).report
    data = json.loads(json.dumps(report.to_dict()))
    largest = data["largest_weights"]["tensors"]
    assert len(largest) == 2 and largest[0]["bytes"] >= largest[1]["bytes"] > 0
    # int8 weights: the largest stored tensor is a quantized weight (fc1: 128 × 128, one byte per value)
    name = largest[0]["name"]
    assert report.section("largest_weights").tensors[0] == (name, largest[0]["bytes"])
    lines = format_summary(report).splitlines()
    assert f"largest:     {name} {largest[0]['bytes']} B, {largest[1]['name']} {largest[1]['bytes']} B" in lines
    assert f"<li>{name}: {largest[0]['bytes']} B</li>" in render_html(report)
    assert "largest_weights" in report.seconds
    assert largest[0] == {"name": "fc1.weight_quantized", "bytes": 128 * 128}
    # The searches' sections keep their keys; one that did not run is null.
    assert data["sensitivity"]["samples"] > 0 and data["fallback"] is None and data["recipe"] is None


def test_smoothing_coverage_and_speed_render_themselves(samples_dir):
    """The results that are not search sections (smoothing, where the check holds, speed) render their own summary
    lines and HTML too."""
    config = onnxq.QuantConfig(activation_granularity="per-token", smooth="auto",
                               verify=onnxq.VerifyConfig(check_speed=True))
    report = onnxq.quantize(samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz",
                            config=config).report
    smoothed = [a for a in report.smoothing if a.alpha is not None]
    assert len(report.smoothing) == 4 and smoothed  # measured: 2 of 4 smoothed
    page, summary = render_html(report), format_summary(report)
    assert report.smoothing.text()[0] in summary and f"{len(smoothed)} of 4 activations smoothed" in summary
    assert page.count("<tr><td>val_") == len(report.smoothing)  # one row per smoothable activation
    assert "<h3>Where it holds: target portable</h3>" in page
    assert report.speed and report.speed[0].text() in summary and escape(report.speed[0].text()) in page
    assert json.loads(json.dumps(report.to_dict()))["smoothing"] == [a.to_dict() for a in report.smoothing]


def test_the_run_reports_its_peak_memory_step_by_step(samples_dir, tmp_path):
    """Each step's peak RSS (the high-water mark, monotone), and the step that reached the peak (memory
    near the model's size is a target, and this says which step misses it)."""
    pytest.importorskip("resource", reason="the OS reports no peak RSS (Windows)")
    report = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz",
                            output=tmp_path / "q.onnx").report
    memory = report.section("memory")
    peaks = list(memory.peak_after.values())
    assert list(memory.peak_after)[0] == "load" and peaks == sorted(peaks) and peaks[0] > 10_000_000
    assert memory.peak == peaks[-1] and memory.peak_after[memory.peak_step] == memory.peak
    assert memory.text()[0].startswith(f"memory:      peak RSS {memory.peak / 1e6:.0f} MB, reached in ")
    assert report.to_dict()["memory"]["peak_bytes"] == memory.peak


def test_a_peak_set_by_the_speed_line_says_what_the_quantization_took_before_it():
    """ORT's deployed float session alone holds a packed copy of the float weights (SmolLM2's 540 MB file: 785 MiB in
    a process doing nothing else), so a run that times it peaks there; the line says the peak before it too."""
    from onnxq.steps.memory import MemoryUse

    peaks = {"load": 300_000_000, "verify": 790_000_000, "check_speed": 1_070_000_000,
             "save": 1_070_000_000}
    memory = MemoryUse(peaks, 540_000_000)
    assert memory.peak_before_speed == 790_000_000
    assert memory.text() == ["memory:      peak RSS 1070 MB, 1.98x the float model's 540 MB, reached in check_speed "
                             "(ORT's float and quantized sessions timed as deployed); 790 MB (1.46x) before it "
                             "(--no-speed)"]
    quantization = MemoryUse({"load": 300_000_000, "verify": 790_000_000, "check_speed": 790_000_000},
                             540_000_000)
    assert quantization.peak_before_speed is None and quantization.text()[0].endswith("reached in verify")
