"""Step sensitivity: each quantized node's end-to-end error when quantized alone (onnxq.search.sensitivity), on the
first verification samples and this CPU's deployed kernels where the switch model allows it; a node whose
quantization alone makes an output NaN or inf fails the gate."""

from __future__ import annotations

from onnxq.data.batching import first_samples, fixed_batch_size
from onnxq.errors import one_line, whole_message
from onnxq.search.sensitivity import layer_sensitivity
from onnxq.io import model_size_bytes
from onnxq.io.sessions import ORT_ERRORS
from onnxq.steps.escalate import wants_escalation
from onnxq.steps.state import RunState
from onnxq.targets.providers import CPU_PROVIDER
from onnxq.verify import profile_placement
from onnxq.verify.result import SYNTHETIC

__all__ = ["sensitivity", "wants_fallback", "DEPLOYED_MAX_WEIGHT_BYTES"]

# Above this much float weight the ranking runs on the exact quantization: a deployed (ORT_ENABLE_ALL) session owns a
# copy of every weight it is given, float and quantized twins alike, where an unoptimized session computes on the
# memory-mapped weights in place. A 2.3 GB model peaked at 6.1 GB with it (2.7x its size; 1.37x without); the genai
# SmolLM2-135M (0.54 GB) at 6.3 GB with it, 3.8 GB without, its groups ranked in the same order. Below
# this bound (every CNN of the zoo, MiniLM) the copies cost less than the verification's own sessions.
DEPLOYED_MAX_WEIGHT_BYTES = 256_000_000


def wants_fallback(state: RunState) -> bool:
    """Out of tolerance on real inputs, with the fallback on: a bar measured below. Not where the data shows nothing
    (not shown: the fallback would keep nodes float for an answer no count of the data could see change), nor on
    made-up inputs, whose verdict says nothing of the user's data (the written model must not depend on them)."""
    verification = state.verified.verification
    return (state.resolved.config.verify.fallback and verification is not None and verification.failed
            and state.verified.label != SYNTHETIC)


def _wanted(state: RunState) -> bool:
    """Where the fallback or step escalate reads the ranking, or the report asks for it (verify.sensitivity)."""
    verify = state.resolved.config.verify
    return (verify.sensitivity == "always" and verify.sensitivity_samples > 0) or wants_fallback(state) \
        or wants_escalation(state)


def sensitivity(state: RunState) -> bool:
    if state.verified.verification is None or not _wanted(state):
        return False
    plans = state.quantized.plans  # a subgraph's too: the switch model doubles them in their body
    if not plans:
        return False
    samples = first_samples(state.verified.batches, _ranked_samples(state), fixed_batch_size(state.verified.specs))
    # Over the limit the fallback bisects the groups' ranking too (search.fallback.fallback_ranking): a run per
    # node over every verification sample is what a large model cannot afford.
    most = state.resolved.config.verify.sensitivity_max_nodes
    per_node = len(plans) <= most
    if not per_node:
        state.notes.append(f"sensitivity: {len(plans)} quantized nodes > verify.sensitivity_max_nodes ({most}): "
                           "groups ranked, not single nodes")
    deployed, why_not = _deployed_kernels(state, samples[0])
    try:
        result = layer_sensitivity(state.builder, plans, samples, per_node, deployed, why_not,
                                   state.verified.verification.tasks)
    except ORT_ERRORS as e:  # a body the switch model cannot double in: rank the main graph's nodes, as before
        main = [p for p in plans if not p.scope]
        if len(main) == len(plans) or not main:
            raise
        state.notes.append(f"sensitivity: subgraph nodes left out (ONNX Runtime could not run them doubled: "
                           f"{one_line(whole_message(e))[:160]})")
        result = layer_sensitivity(state.builder, main, samples, per_node, deployed, why_not,
                                   state.verified.verification.tasks)
    state.sensitivity = result
    if result.nonfinite():
        state.gate_failures = ((f"sensitivity: quantizing {', '.join(result.nonfinite()[:3])} alone makes an "
                                "output NaN or inf — keep it float (--exclude NAME) or check the data"),)
    return True


def _ranked_samples(state: RunState) -> int:
    """The samples the ranking runs on: verify.sensitivity_samples, or every verification sample when the fallback
    must restore a task metric's decisions — a decision that changes on one sample is seen only on that sample."""
    count = state.resolved.config.verify.sensitivity_samples or 16
    verification = state.verified.verification
    decisions_lost = any(o.metrics.task and o.failed for p in verification.providers for o in p.outputs)
    return max(count, verification.samples) if wants_fallback(state) and decisions_lost else count


def _deployed_kernels(state: RunState, batch) -> tuple[dict[str, str] | None, str]:
    """The kernel each quantized node of the run's model runs as on this CPU (from the verification's placement,
    else profiled on one batch); None, and why, when the model is too large to copy (DEPLOYED_MAX_WEIGHT_BYTES) or
    this CPU's kernels are not the target's (an AVX2 machine quantizing for x86-vnni: its saturation is not the
    target's arithmetic)."""
    weights = model_size_bytes(state.quantized.quantized_from)
    if weights > DEPLOYED_MAX_WEIGHT_BYTES:
        return None, (f"the model's {weights / 1e9:.1f} GB of weights are over {DEPLOYED_MAX_WEIGHT_BYTES / 1e9:g} GB: "
                      "ORT's deployed kernels would hold their own copy of the switch model's weights (float and "
                      "quantized); the exact quantization shares them")
    if state.this_cpu_is_target() is False:
        cpu = state.verified.verification.coverage.platform["cpu_target"]
        return None, (f"this CPU's kernels ({cpu}) are not target "
                      f"{state.resolved.config.target}'s; the exact quantization is what they compute")
    placement = state.verified.verification.cpu.placement
    if placement is None:
        placement = profile_placement(state.quantized.work, CPU_PROVIDER, batch, state.quantized_nodes())
    return {name: run.op_type for name, run in placement.quantized.items() if run is not None}, ""
