"""Accuracy-aware fallback: keep the most harmful nodes float, fewest first, until the model is within tolerance.

The nodes are taken in the per-layer sensitivity order. The number k kept float is found by bisection over
1 … N - 1 (N quantized nodes; k = N would be the float model): each probe re-plans and re-quantizes from the same
calibrated ranges (no recalibration) and runs the real verification, so the answer is what ORT actually computes
(probes on a quarter of the verification inputs, the answer confirmed on all of them: onnxq.search.probing).
Deterministic: same data, same ranking, same k and nodes.

4-bit weights (weight-only) have a middle tier, 8-bit blocks (blocks.int8_nodes): int4 where the sensitivity allows
it, int8 next, float last. First the fewest top-ranked nodes at 8 bits that meet the tolerance (the rest 4-bit);
when even all at 8 bits fail, the fewest float with the rest at 8 bits, then, those float, the fewest of the next
at 8 bits with the rest back at 4 — each a bisection, about 2 log2 N probes in all.

Then each node kept float is tried quantized again, costliest first, and stays quantized where the tolerance still
holds (search.reclaim): the ranking measures nodes one at a time, and the bisection's prefix holds nodes the rest
no longer needs float. Likewise each node the fallback moved to 8 bits is tried back at 4: the bisection's probes
see a quarter of the inputs, and near the bar they cannot resolve what one node adds (SmolLM2's 4-bit decoder,
1.055x against a 1.05x bar: 22 down projections moved).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping

from onnxq.handlers import Skip
from onnxq.search.build import Builder, Built, Overrides
from onnxq.search.fallback_result import FallbackResult
from onnxq.search.probing import CandidateCheck, Trials
from onnxq.search.reclaim import reclaim
from onnxq.search.sensitivity import Sensitivity
from onnxq.verify import Verification

__all__ = ["FallbackResult", "Attempt", "fall_back", "fallback_ranking"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Attempt:
    excluded: tuple[str, ...]  # kept float
    eight_bit: tuple[str, ...]  # 4-bit weights only: kept at 8 bits
    built: Built  # its skips say which nodes the fallback kept float, and why
    verification: Verification

    @property
    def passed(self) -> bool:
        """Meets the tolerance: no bar measured below (the verdict may still be not shown)."""
        return not self.verification.failed


@dataclasses.dataclass(frozen=True)
class _AtEightBits:
    """An attempt as search.reclaim sees it through its 8-bit nodes: a node reclaimed goes back to 4 bits."""
    attempt: Attempt

    @property
    def excluded(self) -> tuple[str, ...]:
        return self.attempt.eight_bit

    @property
    def passed(self) -> bool:
        return self.attempt.passed


class _Attempts:
    """Builds and checks candidates: named nodes float (and, with 4-bit weights, named nodes at 8 bits)."""

    def __init__(self, builder: Builder, ranking: list[tuple[str, float]], check: CandidateCheck) -> None:
        self.builder, self.ranking, self.check = builder, ranking, check
        self.rank = {name: (i + 1, harm) for i, (name, harm) in enumerate(ranking)}

    def named(self, excluded: tuple[str, ...], moved: tuple[str, ...], whole: bool) -> Attempt:
        built = self.builder.build(Overrides(float_nodes=excluded, eight_bit=moved))
        rank = self.rank
        built.skips = [Skip(s.node, f"kept float by fallback (sensitivity rank {rank[s.node.name][0]}, harm "
                                    f"{rank[s.node.name][1]:.4f})") if s.node.name in excluded else s
                       for s in built.skips]
        made = Attempt(excluded, moved, built, self.check(built.model, whole))
        logger.info("fallback: %d node(s) float, %d at 8 bits -> %s (%s)", len(excluded), len(moved),
                    "pass" if made.passed else "fail", "all inputs" if whole else "probe")
        return made

    def ranked(self, key: tuple[int, int], whole: bool) -> Attempt:
        """The top `floats` nodes float, the next `eight_bit` at 8 bits, the rest as configured."""
        floats, eight_bit = key
        names = [name for name, _ in self.ranking]
        return self.named(tuple(names[:floats]), tuple(names[floats:floats + eight_bit]), whole)


def fallback_ranking(sensitivity: Sensitivity) -> list[tuple[str, float]]:
    """(node, harm), most harmful first: the nodes, when each was ranked alone. Ranked by groups (over
    verify.sensitivity_max_nodes): each group's members share its harm, worst own output error first, beside the
    nodes alone in theirs — the bisection then takes a group's most harmful share before a lesser one, without a
    run per node over every sample (SmolLM2's 152 products on 48 windows did not finish in 45 minutes)."""
    if sensitivity.per_node:
        return [(n.name, n.harm) for n in sensitivity.nodes]
    shares = [(n.name, n.harm) for n in sensitivity.nodes]
    local = sensitivity.local_sqnr_db
    for group in sensitivity.groups:
        members = sorted(group.members, key=lambda name: _worst_first(local.get(name, math.nan)))
        shares += [(name, group.harm / len(members)) for name in members]
    order = {name: i for i, (name, _) in enumerate(shares)}
    return sorted(shares, key=lambda share: (-share[1], order[share[0]]))


def _worst_first(sqnr_db: float) -> float:
    return math.inf if math.isnan(sqnr_db) else sqnr_db  # NaN: a body's node, whose own output is not measured


def fall_back(builder: Builder, sensitivity: Sensitivity, before: Verification, check: CandidateCheck,
              costs: Mapping[str, float] | None = None) -> tuple[FallbackResult, Attempt | None]:
    """costs: each node's multiply-adds (search.compute), the order in which float nodes are tried quantized again
    (builder.config.verify.fallback_reclaim tries at most; none without costs)."""
    ranking = fallback_ranking(sensitivity)
    attempts = _Attempts(builder, ranking, check)
    trials = Trials(attempts.ranked, check)

    def result(found: Attempt) -> tuple[FallbackResult, Attempt]:
        tries = builder.config.verify.fallback_reclaim if costs is not None else 0
        again = reclaim(found, costs or {}, lambda excluded: attempts.named(excluded, found.eight_bit, True), tries)
        floats = again.chosen.excluded
        fewer = reclaim(_AtEightBits(again.chosen), costs or {},
                        lambda moved: _AtEightBits(attempts.named(floats, moved, True)), tries - again.tries)
        chosen, rank = fewer.chosen.attempt, attempts.rank
        return FallbackResult(True, tuple((n, rank[n][1]) for n in chosen.excluded), before, chosen.verification,
                              check.log, tuple((n, rank[n][1]) for n in chosen.eight_bit), again.nodes,
                              fewer.nodes, tuple(ranking), tiered), chosen

    n = len(ranking)
    tiered = builder.mode == "weight-only" and builder.config.weights.bits == 4
    if tiered and n and trials.passes((0, n), whole=True):  # 8-bit blocks alone suffice: the fewest of them
        return result(trials.confirmed((0, trials.smallest(0, n, lambda k: (0, k)))))
    most = n - 1
    # With tiers, the nodes not kept float go to 8 bits while the float count is searched.
    if most < 1 or not trials.passes((most, n - most if tiered else 0), whole=True):
        return FallbackResult(False, (), before, None, check.log, ranking=tuple(ranking), tiered=tiered), None
    # 0 fails (the full model did, and with tiers so did all at 8 bits), most passes.
    floats = trials.smallest(0, most, lambda k: (k, n - k if tiered else 0))
    if not tiered:
        return result(trials.confirmed((floats, 0)))
    rest = n - floats  # those float: the fewest of the others at 8 bits, the remainder back at 4
    eight_bit = 0 if trials.passes((floats, 0), whole=True) else trials.smallest(0, rest, lambda k: (floats, k))
    return result(trials.confirmed((floats, eight_bit)))
