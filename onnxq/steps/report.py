"""The run's report, from the state its steps left: what was quantized and how, what stayed float and why, and
every result."""

from __future__ import annotations

from onnxq.data.completion import describe_made
from onnxq.handlers import NodePlan
from onnxq.io import LOAD_NOTES, model_size_bytes
from onnxq.io.outputs import active_run
from onnxq.passes.forms.registry import REWRITE_FORMS
from onnxq.report.record import NodeEntry, QuantReport, Smoothing
from onnxq.steps.state import RunState
from onnxq.targets import integer_types_reason

__all__ = ["build_report", "float_model_bytes"]


def build_report(state: RunState) -> QuantReport:
    config, mode, quantized, written = state.resolved.config, state.resolved.mode, state.quantized, state.saved.written
    return QuantReport(
        input=str(state.loaded.input_path) if state.loaded.input_path else "(in-memory model)",
        output=str(written[0]) if written else None,
        mode=mode,
        config=config.to_dict(),
        quantized=tuple(_entry(p, state) for p in state.quantized.plans),
        left_float=tuple(NodeEntry(s.node.name or "", s.node.op_type,
                                   quantized.float_reasons.get(s.node.name, s.reason)) for s in quantized.skips),
        ranges=dict(state.statistics.ranges),  # the written model's (escalation's where it chose one)
        calibration_samples=state.calibrated.calibration_samples,
        float_bytes=float_model_bytes(state),
        quant_bytes=active_run().staged_bytes(written) if written else model_size_bytes(state.model),
        seconds=state.timings,
        verification=state.verified.verification,
        notes=tuple(state.notes) + _made_note(state),
        speed=state.speed,
        smoothing=Smoothing(quantized.smoothing),
        sections=tuple(s for s in (state.recipe, state.accuracy_level, state.sensitivity, state.escalation,
                                   state.fallback, quantized.precision, *state.sections) if s is not None),
        renamed_nodes=state.loaded.reference.meta[LOAD_NOTES]["renamed_nodes"],
        gate_failures=tuple(state.gate_failures),
    )


def _made_note(state: RunState) -> tuple[str, ...]:
    made = {**(state.planned.stream.made if state.planned.stream is not None else {}), **state.planned.made_inputs}
    return (describe_made(made),) if made else ()


def float_model_bytes(state: RunState) -> int:
    """The float model's bytes as the user has them: its files (an export's tied table once, however the run
    unties it in memory), or its weights when it was given in memory."""
    if state.loaded.input_files:
        return sum(f.stat().st_size for f in state.loaded.input_files)
    return model_size_bytes(state.loaded.reference)


def _entry(plan: NodePlan, state: RunState) -> NodeEntry:
    """How one node was quantized, in words."""
    node, config = plan.node, state.resolved.config
    parts = [_weight_words(plan, spec_axis, state) for spec_axis in (spec.axis for spec in plan.weights)]
    if plan.activations:
        # A form without calibrated ranges quantizes at run time, to uint8 (DynamicQuantizeLinear, or in its kernel).
        calibrated = plan.form in REWRITE_FORMS and REWRITE_FORMS[plan.form].calibrated and not plan.per_token
        dtype = config.activations.dtype if calibrated else "uint8"
        if plan.per_token:
            parts.append("activation per token (dynamic, symmetric, uint8 + 128)")
        else:
            parts.append(f"{len(plan.activations)} activation(s) {dtype} {'static' if calibrated else 'dynamic'}")
        if plan.weights:  # an integer kernel reads this node: its types on the target, and why
            parts.append(integer_types_reason(config.target, dtype))
    if plan.bias_index is not None:
        parts.append(state.quantized.bias_notes.get(node.name or "", "bias int32"))
    elif plan.bias_note:
        parts.append(f"bias float: {plan.bias_note}")
    if plan.form_note:
        parts.append(plan.form_note)
    if plan.scope:
        parts.append(f"inside {plan.scope}")
    return NodeEntry(node.name or "", node.op_type, "; ".join(parts))


def _weight_words(plan: NodePlan, axis: int | None, state: RunState) -> str:
    config, node = state.resolved.config, plan.node
    if state.resolved.mode != "weight-only":
        where = "per tensor" if axis is None else f"per channel (axis {axis})"
        return f"{'table' if plan.weight_only else 'weight'} int8 {where}"
    blocks, dtype = config.blocks, config.weights.dtype
    if node.name in state.quantized.eight_bit:
        dtype = dtype.replace("4", "8")  # int4 → int8, uint4 → uint8
    if node.op_type == "Gather":
        return f"table {dtype}, blocks of {blocks.size} along each row (GatherBlockQuantized)"
    kernel = "MatMulNBits" if blocks.format == "matmulnbits" else "DequantizeLinear block_size → MatMul"
    method = blocks.method
    if state.calibrated.moments is not None and node.name in state.calibrated.moments.unseen_nodes:
        method = "rtn: no calibration sample reaches it"
    return f"weight {dtype}, blocks of {blocks.size} along K ({kernel}, {method}); activation float"
