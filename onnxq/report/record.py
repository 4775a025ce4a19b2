"""What a quantization run did, as data: the JSON report for pipelines (schema: onnxq/report_schema.json)."""

from __future__ import annotations

import dataclasses
import html
import math
from typing import Any, Protocol

from onnxq.io.naming import RenamedNode
from onnxq.verify.bars import NEAR_SHARE
from onnxq.verify.check import Verification
from onnxq.verify.result import most_common, result_words
from onnxq.verify.speed.latency import SpeedCheck
from onnxq.verify.verdict import NOT_VERIFIED, NOTHING_QUANTIZED, OUT, WITHIN

__all__ = ["SCHEMA_VERSION", "NodeEntry", "QuantReport", "SmoothedActivation", "Smoothing", "Section", "escape",
           "bar_chart", "share_level", "SHARE_COLOURS", "API_COMMAND"]


class Section(Protocol):
    """A result that renders itself in the report (onnxq.search: Sensitivity, FallbackResult, RecipeResult, or a
    new step's): its key in the JSON report, its JSON form, its summary lines and its HTML. The report, the summary
    and the HTML page iterate sections; none imports a search module. A new section is one class and the step that
    appends it to RunState.sections. A section with a true `detail` attribute shows its summary lines only with -v
    (the JSON and the HTML always hold it)."""

    key: str

    def to_dict(self) -> dict[str, Any]: ...

    def text(self) -> list[str]: ...

    def html(self) -> str: ...


def escape(value: object) -> str:
    """Text for HTML (sections' html())."""
    return html.escape(str(value))


# A share of the tolerance (verify.bars) as a colour: well within, near the bar, over it.
SHARE_COLOURS = {"within": "#2e7d32", "near": "#ef8f00", "over": "#c62828"}


def share_level(share: float) -> str:
    """'within' below NEAR_SHARE of the tolerance, 'near' up to the bar, 'over' past it (NaN counts as over)."""
    if not share <= 1.0:
        return "over"
    return "near" if share >= NEAR_SHARE else "within"


def bar_chart(rows: list[tuple[str, float]], title: str, limit: float | None = None) -> str:
    """An SVG of horizontal bars, one per row (sections' html()). With `limit` (the tolerance, in the rows' unit),
    each bar is coloured by its share of it and a dashed line marks it; the axis reaches at least to the line."""
    if not rows:
        return ""
    finite = [h for _, h in rows if math.isfinite(h)]
    top = max([*finite, limit or 0.0]) or 1.0
    height, label_width, bar_width, top_margin = 16, 380, 320, 14 if limit is not None else 0
    bars = []
    for i, (name, value) in enumerate(rows):
        y = top_margin + i * height
        width = bar_width if not math.isfinite(value) else max(2.0, bar_width * value / top)
        colour = SHARE_COLOURS["over" if limit is None else share_level(value / limit)]
        bars.append(f'<text x="0" y="{y + 12}">{escape(name[-58:])}</text>'
                    f'<rect x="{label_width}" y="{y + 2}" width="{width:.1f}" height="{height - 4}" fill="{colour}">'
                    f"<title>{escape(name)}: {value:.5f}</title></rect>"
                    f'<text x="{label_width + width + 4:.1f}" y="{y + 12}">{value:.4f}</text>')
    if limit is not None:
        x = label_width + bar_width * limit / top
        bottom = top_margin + len(rows) * height
        bars.append(f'<line class="tolerance" x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{bottom}" stroke="#222" '
                    f'stroke-dasharray="4 3"/><text x="{x - 3:.1f}" y="10" text-anchor="end">tolerance ({limit:.1f})'
                    "</text>")
    return (f"<h3>{escape(title)}</h3><svg role='img' aria-label='{escape(title)}' "
            f"width='{label_width + bar_width + 90}' height='{top_margin + len(rows) * height}'>{''.join(bars)}</svg>")

# 3: verification.coverage (targets, CPU, saturation); passed includes it. 4: smoothing. 5: renamed_nodes,
# gate_failures, metrics' nonfinite counts, null for a figure that is not finite. 6: a placement counts a node as on
# an integer kernel of its provider only when it ran there (elsewhere, copies, source, mismatches); predicted
# placements; the agreement held to a derived bound (agreement_bounds); float_drift per provider. 8: each output
# check's bars (the figures gated, beside their bars and the share of the tolerance used); the command; verdict and
# result (top level, verification, providers, targets, outputs, task), unshown, task_bar and task_interval; passed
# true only for a quantized model shown within tolerance
SCHEMA_VERSION = 8
# The command a report made through the API records (the CLI records its own command line).
API_COMMAND = "onnxq.quantize(...)"


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
class Smoothing:
    """--smooth: one SmoothedActivation per smoothable activation; a sequence of them that renders itself."""

    activations: tuple[SmoothedActivation, ...] = ()

    def __iter__(self):
        return iter(self.activations)

    def __len__(self) -> int:
        return len(self.activations)

    def to_list(self) -> list[dict[str, Any]]:
        return [a.to_dict() for a in self.activations]

    def text(self) -> list[str]:
        if not self.activations:
            return []
        smoothed = [a for a in self.activations if a.alpha is not None]
        inserted = sum(a.absorbed_by == "inserted Mul" for a in smoothed)
        alphas = sorted({a.alpha for a in smoothed})
        return [f"smoothing:   {len(smoothed)} of {len(self.activations)} activations smoothed"
                + (f" (α {'–'.join(f'{a:g}' for a in dict.fromkeys((alphas[0], alphas[-1])))}; {inserted} "
                   "by an inserted Mul, the rest folded into what produces them)" if smoothed else "")]

    def html(self) -> str:
        if not self.activations:
            return ""
        rows = "".join(f"<tr><td>{escape(a.activation)}</td><td>{'—' if a.alpha is None else f'{a.alpha:g}'}</td>"
                       f"<td>{escape(a.absorbed_by or '')}</td></tr>" for a in self.activations)
        return (f"<h2>SmoothQuant</h2><p>{escape(self.text()[0][len('smoothing:'):].strip())}.</p><table><tr>"
                f"<th>activation</th><th>α</th><th>1 / s absorbed by</th></tr>{rows}</table>")


@dataclasses.dataclass(frozen=True)
class QuantReport:
    """What a quantization run did and found: the nodes quantized and left float (each with why), the calibrated
    ranges, the sizes, each step's seconds, the verification, and what the searches found. to_dict() is the JSON
    report (onnxq/report_schema.json); verdict, passed and result say how it ended."""

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
    speed: tuple[SpeedCheck, ...] = ()  # --check-speed: float vs quantized per provider
    smoothing: Smoothing = Smoothing()  # --smooth: one entry per smoothable activation
    # What the searches found, in the order they ran: recipe (--recipe auto, when the all-static model missed the
    # tolerance), sensitivity, fallback; and any section a new step adds.
    sections: tuple[Section, ...] = ()
    # Nodes that had no name or a repeated one, named at load (io.naming): the name given, and where in the file.
    renamed_nodes: tuple[RenamedNode, ...] = ()
    # Reasons the run fails its gate beside the verification's own (a NaN sensitivity); each fails `passed`.
    gate_failures: tuple[str, ...] = ()
    # What made the report: the command line (the CLI's), or the API call.
    command: str = API_COMMAND

    def section(self, key: str) -> Section | None:
        return next((s for s in self.sections if s.key == key), None)

    @property
    def sensitivity(self):  # onnxq.search.sensitivity.Sensitivity
        return self.section("sensitivity")

    @property
    def fallback(self):  # onnxq.search.fallback.FallbackResult
        return self.section("fallback")

    @property
    def recipe(self):  # onnxq.search.recipe.RecipeResult
        return self.section("recipe")

    @property
    def verdict(self) -> str:
        """not verified; nothing quantized (every node kept float: the check compared float with float); out of
        tolerance (a bar measured below, or a gate failure of the run's); not shown; within tolerance."""
        if self.verification is None:
            return NOT_VERIFIED
        if not self.quantized:
            return NOTHING_QUANTIZED
        return OUT if self.gate_failures else self.verification.verdict

    @property
    def passed(self) -> bool | None:
        """True only when the quantized model is shown within tolerance (the command line's exit 0); None when it
        was not verified. Not shown and nothing quantized are not passes: a pipeline gating on `passed` does not
        ship a model that nothing vouches for."""
        return None if self.verification is None else self.verdict == WITHIN

    @property
    def result(self) -> str:
        """The result line's words, with their caveat (verify.result)."""
        why = most_common([e.detail for e in self.left_float]) if self.verdict == NOTHING_QUANTIZED else ""
        return result_words(self.verdict, self.verification, why, wrote=self.output is not None)

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
            "sensitivity": None,  # null when the search did not run (the schema requires the key)
            "fallback": None,
            "passed": self.passed,
            "verdict": self.verdict,
            "result": self.result,
            "notes": list(self.notes),
            "speed": [c.to_dict() for c in self.speed],
            "smoothing": self.smoothing.to_list(),
            "recipe": None,
            "renamed_nodes": [r.to_dict() for r in self.renamed_nodes],
            "gate_failures": list(self.gate_failures),
            "command": self.command,
        } | {s.key: s.to_dict() for s in self.sections}
