"""Escalation: the Conv accuracy methods that cost a pass over the data (output-error windows, GPTQ rounding) tried
only where the cheap model's gate fails, on the Convs its sensitivity ranking points at, cheapest first, then on
every Conv. The planner here returns the stages as data; step escalate runs them (onnxq.steps.escalate). Where
the cheap model (the method's windows, the saturation clip, weights rounded to nearest) meets the bars, those passes
are not made: on ResNet-50 they were two thirds of onnxq's quantization time."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from onnxq.report.record import escape

__all__ = ["POINTED_SHARE", "Stage", "StageTry", "Escalation", "pointed_nodes", "escalation_stages"]

# The pointed Convs: the fewest, most harmful first, whose harm makes this share of all the Convs' harm (one node
# alone rarely holds it all; the long tail of harmless nodes costs their passes for nothing).
POINTED_SHARE = 0.8
_INF_HARM = 1e6  # a node that alone makes an output NaN or inf: first, and its harm counted as this


@dataclasses.dataclass(frozen=True)
class Stage:
    """One try: the methods on these Convs (the statistics of the cheap model elsewhere)."""

    nodes: tuple[str, ...]
    windows: bool  # each Conv input's window chosen by its output error (calibration.error_choice)
    gptq: bool  # the Conv weights rounded by GPTQ (calibration.moments)
    every: bool = False  # nodes are every static Conv

    def text(self) -> str:
        methods = " + ".join(m for m, on in (("output-error windows", self.windows), ("GPTQ rounding", self.gptq))
                             if on)
        where = "every Conv" if self.every else "the Convs the sensitivity points at"
        return f"{methods} on {where} ({len(self.nodes)})"


@dataclasses.dataclass(frozen=True)
class StageTry:
    stage: Stage
    met: bool  # shown within tolerance on all verification inputs
    seconds: float


@dataclasses.dataclass(frozen=True)
class Escalation:
    """What step escalate tried, in order, and whether the last met the tolerance."""

    tries: tuple[StageTry, ...]
    key = "escalation"  # report.Section

    @property
    def met(self) -> bool:
        return bool(self.tries) and self.tries[-1].met

    def to_dict(self) -> dict:
        return {"met": self.met, "tries": [{"nodes": list(t.stage.nodes), "windows": t.stage.windows,
                                            "gptq": t.stage.gptq, "every": t.stage.every, "met": t.met,
                                            "seconds": round(t.seconds, 2)} for t in self.tries]}

    def text(self) -> list[str]:
        tried = "; ".join(f"{t.stage.text()}: {'met' if t.met else 'not met'} ({t.seconds:.1f} s)" for t in self.tries)
        return [f"escalation: the method's windows and weights rounded to nearest did not meet the tolerance; tried "
                f"{tried}"]

    def html(self) -> str:
        items = "".join(f"<li>{escape(t.stage.text())}: {'met' if t.met else 'not met'} ({t.seconds:.1f} s)</li>"
                        for t in self.tries)
        return f"<h2>Escalation: tolerance {'met' if self.met else 'not met'}</h2><ol>{items}</ol>"


def pointed_nodes(sensitivity, candidates: Sequence[str]) -> tuple[str, ...]:
    """The candidates (static Convs) the ranking points at: most harmful first, as few as make POINTED_SHARE of the
    candidates' harm (every one where no harm was measured). sensitivity: onnxq.search.sensitivity.Sensitivity —
    per node, or by groups when only groups were ranked (a group's members together)."""
    wanted = set(candidates)
    units = _ranked_units(sensitivity, wanted)
    total = sum(harm for _, harm in units)
    chosen: list[str] = []
    covered = 0.0
    for members, harm in units:
        if chosen and total > 0 and covered >= POINTED_SHARE * total:
            break
        chosen += members
        covered += harm
    return tuple(chosen)


def _ranked_units(sensitivity, wanted: set[str]) -> list[tuple[list[str], float]]:
    """(the candidate nodes of a ranked unit, its harm), most harmful first: each node, or each group."""
    def harm(value: float) -> float:
        return _INF_HARM if not math.isfinite(value) else max(value, 0.0)

    if sensitivity.per_node:
        return [([n.name], harm(n.harm)) for n in sensitivity.nodes if n.name in wanted]
    units = [([m for m in g.members if m in wanted], harm(g.harm)) for g in sensitivity.groups]
    return [(members, h) for members, h in units if members]


def escalation_stages(pointed: Sequence[str], every: Sequence[str], windows: bool, gptq: bool) -> tuple[Stage, ...]:
    """Cheapest first: the windows on the pointed Convs (one pass over 16 samples), then GPTQ on them too (a pass over
    all the data, and a factoring per weight), then both on every Conv. windows / gptq: which methods the config
    leaves to escalation (auto)."""
    stages = []
    if pointed and windows:
        stages.append(Stage(tuple(pointed), windows=True, gptq=False))
    if pointed and gptq:
        stages.append(Stage(tuple(pointed), windows=windows, gptq=True))
    if set(pointed) != set(every) and (windows or gptq):
        stages.append(Stage(tuple(every), windows=windows, gptq=gptq, every=True))
    return tuple(stages)
