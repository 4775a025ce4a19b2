"""Steps plan and replan: every node planned under the resolved configuration, the calibration stream defined and
the verification inputs known before calibrating read (plan); then, static mode, the subgraph nodes the calibration
never observed planned again dynamic (replan)."""

from __future__ import annotations

import dataclasses

from onnxq.config import QuantConfig
from onnxq.data.axes import InferredLayout
from onnxq.data.batching import Batches
from onnxq.data.dataset import reread_batches
from onnxq.data.holdout import SHOWS_DEFAULT_BAR
from onnxq.data.specs import InputSpec, input_specs, sample_axis
from onnxq.data.stream import DataStream
from onnxq.data.synthetic import synthetic_batches
from onnxq.errors import UnsupportedModelError
from onnxq.handlers import Skip, plan_model
from onnxq.search.build import unobserved_bodies_dynamic
from onnxq.steps.records import Planned
from onnxq.steps.resolve import layout_notes
from onnxq.steps.state import RunState
from onnxq.verify.result import CALIBRATION_SAMPLES, SYNTHETIC
from onnxq.verify.tasks.rules import may_hold_to_a_share

__all__ = ["plan", "replan", "synthetic_inputs", "SYNTHETIC"]


def plan(state: RunState) -> bool:
    """Every node planned under the resolved config; the calibration stream defined; the verification inputs known
    before calibrating read."""
    config, given, resolved = state.resolved.config, state.loaded.given, state.resolved
    plans, skips = plan_model(state.loaded.work.graph, config, resolved.mode)
    if not plans:
        raise UnsupportedModelError(_nothing_to_quantize(skips, config))
    holds_back = given.verify_data is None and config.verify.enabled
    stream = DataStream.for_run(given.calibration, resolved.specs, config, holds_back,
                                may_hold_to_a_share(state.loaded.reference, config.verify))
    made: dict[str, str] = {}  # filled as the verification data is read
    upfront, specs = _upfront_verification_inputs(state, made)
    # 4-bit weights' 8-bit tier, by config (the fallback adds to it).
    state.planned = Planned(plans, skips, frozenset(config.blocks.int8_nodes), specs, stream, upfront, made)
    return True


def replan(state: RunState) -> bool:
    """Static mode: subgraph nodes whose activation calibration gave no range planned again dynamic
    (search.build.unobserved_bodies_dynamic)."""
    if state.resolved.mode != "static":
        return False
    planned = state.planned
    plans, skips = unobserved_bodies_dynamic(planned.plans, planned.skips, state.resolved.config,
                                             state.calibrated.ranges)
    state.planned = dataclasses.replace(planned, plans=plans, skips=skips)
    return True


def _nothing_to_quantize(skips: list[Skip], config: QuantConfig) -> str:
    if not skips:
        return (f"nothing to quantize: the model has no {'/'.join(config.op_types)} node with a constant float32 "
                "weight — onnxq quantizes MatMul, Gemm and Gather on constant weights")
    excluded = [s for s in skips if config.exclusion_reason(s.node.name or "", s.node.op_type) is not None]
    first = (excluded or skips)[0]
    # The exclude options are the fix only where they kept a node float; elsewhere the reason says what it is.
    fix = "check the exclude options" if excluded else "docs/limits.md lists what stays float and why"
    return (f"nothing to quantize: all {len(skips)} candidate node(s) stay float (e.g. {first.node.name}: "
            f"{first.reason}) — {fix}")


def _upfront_verification_inputs(state: RunState, made: dict[str, str]
                                 ) -> tuple[tuple[Batches, str] | None, list[InputSpec]]:
    """Verification batches known before calibrating (None when they come from the calibration stream), and the
    inputs' layout they have. made: filled with the inputs onnxq makes as the verification data is read."""
    config, given, mode, specs = state.resolved.config, state.loaded.given, state.resolved.mode, state.resolved.specs
    size = config.calibration.batch_size
    if not config.verify.enabled:
        return None, specs
    if given.verify_data is not None:  # read again by each pass, a batch at a time; its first batch checked now
        batches = reread_batches(given.verify_data, specs, size, made=made)
        on_calibration_data = state.loaded.verifies_on_calibration_data
        if on_calibration_data:
            state.notes.append("the verification data is the calibration data (the same file and arrays): the "
                               "figures flatter the model — verify on data held out from calibration")
        return (batches, CALIBRATION_SAMPLES if on_calibration_data else "verification data"), specs
    if given.calibration is not None and (mode == "static" or mode == "weight-only" and (
            config.blocks.method == "gptq" or config.blocks.clip == "activation")):
        return None, specs  # held back from the calibration data as it streams
    if given.calibration is not None:  # dynamic mode with data: verify on (the start of) it
        return (reread_batches(given.calibration, specs, size, config.verify.max_samples or SHOWS_DEFAULT_BAR,
                               made=made), "the given data"), specs
    batches, label, specs = synthetic_inputs(state, specs)
    return (batches, label), specs


def synthetic_inputs(state: RunState, specs: list[InputSpec]) -> tuple[Batches, str, list[InputSpec]]:
    """Random inputs for want of data, and the inputs' layout they have (specs, or with the inputs made once beside
    the others' samples held constant)."""
    state.notes.append("no data given: verified on synthetic random inputs, a smoke test only — pass --verify-data "
                       "with real inputs for meaningful figures")
    batches = synthetic_batches(state.loaded.reference, specs)
    held = tuple(s.name for s in specs if s.sample_axis is not None and sample_axis(batches[0], s.name) is None)
    if held:  # the inputs made once beside the others' samples: how the made-up batches are laid out, not the config
        layout = InferredLayout(once=held).applied(state.resolved.config.calibration)
        specs = input_specs(state.loaded.work, layout.sample_axes, layout.constant_inputs, layout.unbatched_inputs)
        state.notes.extend(layout_notes(InferredLayout(once=held)))
    return Batches.held(batches), SYNTHETIC, specs
