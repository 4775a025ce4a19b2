"""What a target means for a plan's integer types: the pair limit, and the line the report gives."""

from __future__ import annotations

from onnxq.targets.registry import TARGETS, covered_targets, resolve_target

__all__ = ["saturating_targets", "needs_pair_limit", "integer_types_reason"]


def saturating_targets(target: str) -> bool:
    """Whether a CPU the target covers runs U8S8 with int16 pair saturation."""
    return any(TARGETS[t].saturates_u8s8 for t in covered_targets(target))


def needs_pair_limit(target: str, activation_dtype: str, weight_dtype: str = "int8") -> bool:
    """Whether int8 weights must keep their K pairs within numerics.pairs.PAIR_LIMIT: uint8 activations × int8
    weights (U8S8) on a target that includes a saturating CPU. U8U8 and S8S8 never saturate (measured)."""
    return saturating_targets(target) and activation_dtype == "uint8" and weight_dtype == "int8"


def integer_types_reason(target: str, activation_dtype: str, weight_dtype: str = "int8") -> str:
    """One line for the report: the integer types a node gets on this target, and why."""
    concrete = resolve_target(target)
    types = f"{'U' if activation_dtype == 'uint8' else 'S'}8{'S' if weight_dtype == 'int8' else 'U'}8"
    if needs_pair_limit(target, activation_dtype, weight_dtype):
        saturating = "; ".join(TARGETS[t].saturation for t in covered_targets(target) if TARGETS[t].saturates_u8s8)
        return f"{types}, K pairs limited to ±128 (target {concrete}: {saturating}; full speed, no saturation)"
    if types == "U8S8":
        return f"{types} full range (target {concrete}: the kernel adds every product in int32)"
    return f"{types} (no int16 step in ORT's kernel for these types)"
