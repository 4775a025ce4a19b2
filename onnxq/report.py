"""What a quantization run did, as data (JSON for pipelines) and as text (for people)."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from onnxq.verify.check import Verification

__all__ = ["SCHEMA_VERSION", "NodeEntry", "QuantReport", "format_summary"]

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class NodeEntry:
    name: str
    op_type: str
    detail: str  # how it was quantized, or why it stayed float


@dataclasses.dataclass(frozen=True)
class QuantReport:
    input: str
    output: str | None
    mode: str
    config: dict[str, Any]
    quantized: tuple[NodeEntry, ...]
    left_float: tuple[NodeEntry, ...]
    ranges: dict[str, tuple[float, float]]
    calibration_samples: int
    float_bytes: int
    quant_bytes: int
    seconds: dict[str, float]
    verification: Verification | None
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool | None:
        return None if self.verification is None else self.verification.passed

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "input": self.input,
            "output": self.output,
            "mode": self.mode,
            "config": self.config,
            "quantized": [dataclasses.asdict(e) for e in self.quantized],
            "left_float": [dataclasses.asdict(e) for e in self.left_float],
            "ranges": {k: list(v) for k, v in self.ranges.items()},
            "calibration_samples": self.calibration_samples,
            "size": {"float_bytes": self.float_bytes, "quant_bytes": self.quant_bytes,
                     "ratio": self.quant_bytes / max(self.float_bytes, 1)},
            "seconds": self.seconds,
            "verification": None if self.verification is None else self.verification.to_dict(),
            "passed": self.passed,
            "notes": list(self.notes),
        }


_INTEGER_KERNELS = ("QLinearMatMul", "MatMulInteger", "com.microsoft.MatMulIntegerToFloat", "com.microsoft.QGemm",
                    "com.microsoft.DynamicQuantizeMatMul", "com.microsoft.QLinearAdd")


def format_summary(report: QuantReport) -> str:
    lines = [f"onnxq: {report.input} -> {report.output or '(in memory)'}  [{report.mode} int8]"]
    by_op = collections.Counter(e.op_type for e in report.quantized)
    lines.append("quantized:   " + ", ".join(f"{n} {op}" for op, n in sorted(by_op.items())))
    if report.left_float:
        reasons = collections.Counter((e.op_type, e.detail) for e in report.left_float)
        lines.append(f"left float:  {len(report.left_float)} node(s)")
        for (op, reason), n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {n:4d} {op}: {reason}")
    v = report.verification
    if report.calibration_samples:
        held = f" (+{v.samples} held back for verification)" if v and v.data.startswith("held-out") else ""
        calibration = report.config["calibration"]
        method = calibration["method"] + (f" {calibration['percentile']}" if calibration["method"] == "percentile"
                                          else "")
        lines.append(f"calibration: {method}, {report.calibration_samples} samples{held}, "
                     f"{report.seconds.get('calibrate', 0.0):.1f} s")
    ratio = report.quant_bytes / max(report.float_bytes, 1)
    lines.append(f"size:        {report.float_bytes / 1e6:.1f} MB -> {report.quant_bytes / 1e6:.1f} MB ({ratio:.2f}x)")
    for note in report.notes:
        lines.append(f"note:        {note}")
    if v is None:
        lines.append("verification: skipped")
        return "\n".join(lines)
    if v.kernels is not None:
        fused = {k: n for k, n in v.kernels.items() if k in _INTEGER_KERNELS}
        float_mm = v.kernels.get("MatMul", 0) + v.kernels.get("Gemm", 0) + v.kernels.get("com.microsoft.FusedMatMul", 0)
        fused_text = ", ".join(f"{n} {k.rsplit('.', 1)[-1]}" for k, n in fused.items()) or "none"
        lines.append(f"ORT CPU kernels: integer {fused_text}; float MatMul/Gemm {float_mm}")
    lines.append(f"verification on {v.provider.replace('ExecutionProvider', '')}, {v.samples} samples of {v.data}:")
    header = f"  {'output':<28} {'max abs':>10} {'mean abs':>10} {'cosine':>8} {'min cos':>8} {'SQNR dB':>8}  result"
    lines.append(header)
    for o in v.outputs:
        m = o.metrics
        verdict = "ok" if o.passed else "FAIL: " + "; ".join(o.failures)
        lines.append(f"  {o.name[:28]:<28} {m.max_abs_error:10.4g} {m.mean_abs_error:10.4g} {m.cosine_mean:8.4f} "
                     f"{m.cosine_min:8.4f} {m.sqnr_db:8.1f}  {verdict}")
    lines.append("result: within tolerance" if v.passed else "result: OUT OF TOLERANCE")
    return "\n".join(lines)
