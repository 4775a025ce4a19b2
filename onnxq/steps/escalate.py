"""Step escalate: out of tolerance on real inputs (or not shown where a model closer to float could show it), with
the Conv accuracy methods left to it (range_choice and weight_rounding auto), the stages of onnxq.search.escalation
tried in order — each a build with the methods' statistics on its Convs and a check on all verification inputs —
until one is shown within tolerance. The best one tried becomes the run's model where it stands at least as well as
the cheap one (the later among equals: the methods on every Conv, where none met it, which the fallback then starts
from)."""

from __future__ import annotations

import dataclasses
import time

from onnxq.search.build import Built, Statistics
from onnxq.search.escalation import Escalation, Stage, StageTry, escalation_stages, pointed_nodes
from onnxq.steps.conv_methods import conv_moments, data_unreadable, static_convs, window_choices
from onnxq.steps.state import RunState
from onnxq.verify import Verification
from onnxq.verify.result import SYNTHETIC

__all__ = ["escalate", "wants_escalation"]


def _left_to_escalation(state: RunState) -> tuple[bool, bool]:
    """(windows, gptq): the methods the config leaves to escalation."""
    config = state.resolved.config
    return config.calibration.range_choice == "auto", config.weight_rounding == "auto"


def wants_escalation(state: RunState) -> bool:
    """A bar measured below on real inputs (made-up ones never change the written model), or one not shown that a
    model closer to float could show on them; in static mode, with a method left to escalation and a static Conv to
    apply it to."""
    verified = state.verified
    verification = verified.verification
    return (verification is not None and (verification.failed or verification.accuracy_could_show)
            and verified.label != SYNTHETIC and state.resolved.mode == "static" and any(_left_to_escalation(state))
            and next(static_convs(state), None) is not None)


def escalate(state: RunState) -> bool:
    if not wants_escalation(state) or state.sensitivity is None:
        return False
    why_not = data_unreadable(state)
    if why_not:
        state.notes.append(f"escalation: the output-error windows and GPTQ rounding not tried — {why_not}")
        return False
    every = [plan.node.name for plan in static_convs(state)]
    pointed = pointed_nodes(state.sensitivity, every)
    tries: list[StageTry] = []
    best, standing = None, _standing(state.verified.verification)  # a try must stand as well as the cheap model
    for stage in escalation_stages(pointed, every, *_left_to_escalation(state)):
        start = time.perf_counter()
        statistics, notes = _statistics(state, stage)
        built = dataclasses.replace(state.builder, stats=statistics).build()
        verification = state.candidate_check()(built.model, whole=True)
        tries.append(StageTry(stage, verification.passed, time.perf_counter() - start))
        if _standing(verification) >= standing:
            best, standing = (built, verification, statistics, notes), _standing(verification)
        if verification.passed:
            break
    if not tries:
        return False
    state.escalation = Escalation(tuple(tries))
    if best is not None:
        _adopt(state, *best)
    return True


def _standing(verification: Verification) -> int:
    """Shown within tolerance, not shown, out of tolerance: the model escalation keeps is the best tried, the later
    (more methods, more Convs) among equals."""
    return 2 if verification.passed else 0 if verification.failed else 1


def _statistics(state: RunState, stage: Stage) -> tuple[Statistics, list[str]]:
    """The cheap model's statistics with the stage's methods on its Convs, and their notes."""
    ranges, notes = dict(state.calibrated.ranges), []
    float_model = state.quantized.quantized_from
    if stage.windows:
        chosen, note = window_choices(state, float_model, ranges, stage.nodes)
        ranges.update({c.name: c.after for c in chosen})
        notes += [note] if note else []
    moments = state.calibrated.moments
    if stage.gptq:
        moments, more = conv_moments(state, float_model, stage.nodes)
        notes += more
    return Statistics(ranges, moments, state.magnitudes), notes


def _adopt(state: RunState, built: Built, verification: Verification, statistics: Statistics,
           notes: list[str]) -> None:
    """The chosen stage's model becomes the run's, and its statistics the ones later builds start from."""
    state.escalated = statistics
    state.adopt(built, verification)
    state.notes += notes
