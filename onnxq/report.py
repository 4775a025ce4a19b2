"""What a quantization run did, as data: the JSON report for pipelines (schema: onnxq/report_schema.json)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from onnxq.io.naming import RenamedNode
from onnxq.verify.check import Verification
from onnxq.verify.speed import SpeedCheck

__all__ = ["SCHEMA_VERSION", "NodeEntry", "QuantReport", "SmoothedActivation", "Section"]


class Section(Protocol):
    """A search's result in the report (onnxq.search: Sensitivity, FallbackResult, RecipeResult): the report
    needs only its JSON form, so it imports no search module."""

    def to_dict(self) -> dict[str, Any]: ...

# 3: verification.coverage (targets, CPU, saturation); passed includes it. 4: smoothing. 5: renamed_nodes,
# gate_failures, metrics' nonfinite counts, null for a figure that is not finite
SCHEMA_VERSION = 5


@dataclasses.dataclass(frozen=True)
class NodeEntry:
    name: str
    op_type: str
    detail: str  # how it was quantized, or why it stayed float


@dataclasses.dataclass(frozen=True)
class SmoothedActivation:
    """SmoothQuant's decision for one activation read by linear layers."""

    activation: str
    alpha: float | None  # None: not smoothed
    absorbed_by: str | None  # what took the division by s (a norm's scale, a MatMul's columns, an inserted Mul)
    errors: dict[float | None, float]  # smooth = auto: relative output error of the quantized layers per α tried

    def to_dict(self) -> dict[str, Any]:
        return {"activation": self.activation, "alpha": self.alpha, "absorbed_by": self.absorbed_by,
                "errors": {("none" if a is None else str(a)): e for a, e in self.errors.items()}}


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
    sensitivity: Section | None = None  # onnxq.search.sensitivity.Sensitivity
    fallback: Section | None = None  # onnxq.search.fallback.FallbackResult
    notes: tuple[str, ...] = ()
    speed: tuple[SpeedCheck, ...] = ()  # --check-speed: float vs quantized per provider
    smoothing: tuple[SmoothedActivation, ...] = ()  # --smooth: one entry per smoothable activation
    # onnxq.search.recipe.RecipeResult: --recipe auto, when the all-static model missed the tolerance
    recipe: Section | None = None
    # Nodes that had no name or a repeated one, named at load (io.naming): the name given, and where in the file.
    renamed_nodes: tuple[RenamedNode, ...] = ()
    # Reasons the run fails its gate beside the verification's own (a NaN sensitivity); each fails `passed`.
    gate_failures: tuple[str, ...] = ()

    @property
    def passed(self) -> bool | None:
        return None if self.verification is None else self.verification.passed and not self.gate_failures

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
            "sensitivity": None if self.sensitivity is None else self.sensitivity.to_dict(),
            "fallback": None if self.fallback is None else self.fallback.to_dict(),
            "passed": self.passed,
            "notes": list(self.notes),
            "speed": [c.to_dict() for c in self.speed],
            "smoothing": [a.to_dict() for a in self.smoothing],
            "recipe": None if self.recipe is None else self.recipe.to_dict(),
            "renamed_nodes": [r.to_dict() for r in self.renamed_nodes],
            "gate_failures": list(self.gate_failures),
        }
