"""recipe = "auto": per group of linear layers reading one activation, the cheapest scheme that meets the tolerance.

Static per-tensor activations are the fastest (ORT fuses them into one U8S8 kernel); per-token activations with
SmoothQuant are the most accurate and cost run-time scale computation (docs/guides/language-models.md). Starting from
the all-static model that failed the tolerance, the groups are ranked by what per token + smoothing gains on their
own output (calibration rows, numerics only); the number k of groups switched, most gain first, is found by
bisection, each probe re-quantized from the same ranges and verified for real, on a quarter of the verification
inputs, the answer confirmed on all of them (onnxq.search.probing). Deterministic: the same data gives
the same ranking, k and model. A tolerance still missed with every group per token is left to the fallback.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir

from onnxq.passes.smoothing.graph import SmoothGroup, SmoothPass
from onnxq.report.record import escape
from onnxq.search.build import Builder, Built, Overrides
from onnxq.search.probing import CandidateCheck, ProbeLog, Trials
from onnxq.verify import Verification

__all__ = ["RecipeGroup", "RecipeResult", "RecipeAttempt", "choose_recipe"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RecipeGroup:
    """A smoothable activation and its readers, by name, with what per token (+ smoothing) would do for it."""

    activation: str
    nodes: tuple[str, ...]
    alpha: float | None  # the α chosen for it per token (None: unsmoothed)
    scales: np.ndarray | None
    gain: float  # static error − per-token error of its layers' outputs (relative squared error)


@dataclasses.dataclass(frozen=True)
class RecipeResult:
    met: bool
    per_token: tuple[str, ...]  # activations switched to per token (+ smoothing), most gain first
    candidates: int
    log: ProbeLog  # the candidates verified, on how many samples, in how long
    key = "recipe"  # report.Section

    @property
    def probes(self) -> int:
        """Candidate models verified, on part or all of the inputs."""
        return self.log.probes + self.log.confirmations

    def to_dict(self) -> dict:
        return {"met": self.met, "per_token": list(self.per_token), "candidates": self.candidates,
                "probes": self.probes, "verification": self.log.to_dict()}

    def text(self) -> list[str]:
        return []  # the recipe step's note says what it chose (summary: "note: recipe auto: ...")

    def html(self) -> str:
        items = "".join(f"<li>{escape(a)}</li>" for a in self.per_token)
        status = "met" if self.met else "not met"
        return (f"<h2>Recipe auto: tolerance {status}</h2><p>{len(self.per_token)} of {self.candidates} activation "
                f"group(s) per token (with smoothing); verified {escape(self.log.text())}:</p><ol>{items}</ol>")


@dataclasses.dataclass
class RecipeAttempt:
    per_token: Overrides  # the nodes switched to per-token activations
    float_model: ir.Model  # the (smoothed) float graph quantized
    built: Built
    verification: Verification
    absorbed: dict[str, str]  # smoothed activation → what took 1 / s


def choose_recipe(builder: Builder, groups: Sequence[RecipeGroup],
                  check: CandidateCheck) -> tuple[RecipeResult, RecipeAttempt | None]:
    ranked = sorted(groups, key=lambda g: (-g.gain, g.activation))

    def make(k: int, whole: bool) -> RecipeAttempt:
        made = _quantize_with(builder, ranked[:k], lambda model: check(model, whole))
        logger.info("recipe: %d group(s) per token -> %s (%s)", k, "fail" if made.verification.failed else "pass",
                    "all inputs" if whole else "probe")
        return made

    trials = Trials(make, check)
    if not ranked:
        return RecipeResult(False, (), 0, check.log), None
    # 0 fails (the all-static model did). All groups per token is probed, and checked on all inputs only when the
    # probe fails or the probes turn out too lenient.
    n = len(ranked)
    high = trials.smallest(0, n, lambda k: k) if trials.passes(n) or trials.passes(n, whole=True) else None
    if high is None:
        # Not met: the most accurate this recipe has (all groups per token); the fallback may go on from it.
        return RecipeResult(False, tuple(g.activation for g in ranked), n, check.log), trials.confirmed(n)
    return RecipeResult(True, tuple(g.activation for g in ranked[:high]), n, check.log), trials.confirmed(high)


def _quantize_with(builder: Builder, per_token: Sequence[RecipeGroup],
                   check: Callable[[ir.Model], Verification]) -> RecipeAttempt:
    """The float graph smoothed for the groups switched, then built with their nodes per token."""
    model = builder.float_model.clone()
    values = {v.name: v for node in model.graph for v in node.outputs} | {v.name: v for v in model.graph.inputs}
    nodes = {node.name: node for node in model.graph}
    smooth = SmoothPass([SmoothGroup(values[g.activation], tuple(nodes[n] for n in g.nodes), g.scales)
                         for g in per_token if g.scales is not None])
    absorbed = smooth(model).absorbed
    switched = Overrides(per_token=tuple(n for g in per_token for n in g.nodes))
    built = builder.on(model).build(switched)
    return RecipeAttempt(switched, model, built, check(built.model), absorbed)
