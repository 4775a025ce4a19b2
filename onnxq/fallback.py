"""Accuracy-aware fallback: keep the most harmful nodes float, fewest first, until the model is within tolerance.

The nodes are taken in the per-layer sensitivity order. The number k kept float is found by bisection over
1 … N - 1 (N quantized nodes; k = N would be the float model): each probe re-plans and re-quantizes from the same
calibrated ranges (no recalibration) and runs the real verification, so the answer is what ORT actually computes.
Deterministic: same data, same ranking, same k and nodes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

import numpy as np
import onnx_ir as ir

from onnxq.config import QuantConfig
from onnxq.handlers import NodePlan, Skip, plan_model
from onnxq.passes.apply import apply_plans
from onnxq.probing import smallest_passing
from onnxq.sensitivity import Sensitivity
from onnxq.verify.check import Verification

__all__ = ["FallbackResult", "Attempt", "fall_back"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Attempt:
    excluded: tuple[str, ...]
    model: ir.Model
    plans: list[NodePlan]
    skips: list[Skip]
    bias_fallbacks: dict[str, str]
    verification: Verification


@dataclasses.dataclass(frozen=True)
class FallbackResult:
    met: bool
    kept_float: tuple[tuple[str, float], ...]  # (node, harm) in ranking order
    before: Verification
    after: Verification | None  # the chosen attempt's verification (None when not met)
    probes: int

    def to_dict(self) -> dict:
        def cpu(v: Verification | None):
            return None if v is None else {o.name: o.to_dict() for o in v.outputs}

        return {"met": self.met, "kept_float": [{"name": n, "harm": h} for n, h in self.kept_float],
                "before": cpu(self.before), "after": cpu(self.after), "probes": self.probes}


def fall_back(reference: ir.Model, config: QuantConfig, mode: str, ranges: Mapping[str, tuple[float, float]],
              sensitivity: Sensitivity, before: Verification,
              check: Callable[[ir.Model], Verification],
              moments: Mapping[str, np.ndarray] | None = None) -> tuple[FallbackResult, Attempt | None]:
    ranking = [(n.name, n.harm) for n in sensitivity.nodes]
    attempts: dict[int, Attempt] = {}

    def attempt(k: int) -> Attempt:
        if k not in attempts:
            excluded = tuple(name for name, _ in ranking[:k])
            probe_config = config.replace(exclude_nodes=config.exclude_nodes + excluded)
            model = reference.clone()
            plans, skips = plan_model(model.graph, probe_config, mode)
            rank = {name: (i + 1, harm) for i, (name, harm) in enumerate(ranking)}
            skips = [Skip(s.node, f"kept float by fallback (sensitivity rank {rank[s.node.name][0]}, harm "
                                  f"{rank[s.node.name][1]:.4f})") if s.node.name in excluded else s for s in skips]
            bias = apply_plans(model, plans, ranges, probe_config, mode, moments).bias_fallbacks
            attempts[k] = Attempt(excluded, model, plans, skips, bias, check(model))
            logger.info("fallback: %d node(s) float -> %s", k, "pass" if attempts[k].verification.passed
                        else "fail")
        return attempts[k]

    most = len(ranking) - 1
    if most < 1 or not attempt(most).verification.passed:
        return FallbackResult(False, (), before, None, len(attempts)), None
    # 0 fails (the full model did), most passes.
    high = smallest_passing(0, most, lambda k: attempt(k).verification.passed)
    chosen = attempt(high)
    result = FallbackResult(True, tuple(ranking[:high]), before, chosen.verification, len(attempts))
    return result, chosen
