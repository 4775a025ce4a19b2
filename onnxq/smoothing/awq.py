"""Activation-aware weight scaling (AWQ, Lin et al., 2024) for weight-only block-quantized weights: per group of
MatMul / Gemm reading one activation, s_j = mean|X_j|^α scales input channel j of the weights up (the channels the
activation uses most get finer steps on their blocks' grid) and the activation down by the same s, which the
producer absorbs exactly (passes.smoothing.graph, as for SmoothQuant). α per group from AWQ_ALPHA_GRID, or none, by the
least relative output error of the block-quantized layers on the sampled calibration rows — the activations as
the kernel reads them: float, or int8 per block of K when MatMulNBits' accuracy_level is 4. GPTQ then rounds the
scaled weights (its moments are collected on the scaled graph).

A weight that is also a token table (an lm_head tied to the embeddings) is left unscaled: scaling it would break
the one 4-bit table both share (passes.forms.blockwise)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnxq.calibration.channels import ChannelStats
from onnxq.handlers.plan import NodePlan
from onnxq.io.irquery import attribute
from onnxq.numerics.blockwise import dequantize_blockwise, quantize_blockwise
from onnxq.numerics.smoothing import AWQ_ALPHA_GRID, awq_scales
from onnxq.passes.smoothing.graph import SmoothGroup
from onnxq.passes.smoothing.weights import weight_by_input_channel
from onnxq.passes.forms.tied_table import gathered_tables, reads_a_table
from onnxq.smoothing.choice import Candidate, SmoothChoice

__all__ = ["BlockForm", "awq_groups", "choose_awq"]


@dataclasses.dataclass(frozen=True)
class BlockForm:
    """How the kernel will read the group: weight blocks of `size` along K at `bits`, symmetric or not, and the
    activation quantized int8 per block of K at run time (MatMulNBits accuracy_level 4) or float."""

    size: int
    bits: int
    symmetric: bool
    int8_activations: bool


def awq_groups(plans: Sequence[NodePlan], model: ir.Model) -> list[Candidate]:
    """Weight-only MatMul / Gemm (transA = 0) of the main graph with a constant weight at input 1, grouped by the
    activation they read; groups holding a weight tied to a gathered table are left out."""
    groups: dict[ir.Value, list[NodePlan]] = {}
    for plan in (p for p in plans if not p.scope and p.weight_only):
        node = plan.node
        if node.op_type in ("MatMul", "Gemm") and len(plan.weights) == 1 and plan.weights[0].input_index == 1 \
                and not attribute(node, "transA"):
            groups.setdefault(node.inputs[0], []).append(plan)
    tables = gathered_tables(model.graph)
    return [Candidate(value, tuple(ps)) for value, ps in groups.items()
            if not any(reads_a_table(p.node, tables) for p in ps)]


def choose_awq(candidates: Sequence[Candidate], stats: Mapping[str, ChannelStats], alpha: float | None,
               form: BlockForm) -> tuple[list[SmoothGroup], list[SmoothChoice]]:
    """Fixed α (a number): every group scaled with it. None ("auto"): per group the α of AWQ_ALPHA_GRID, or none,
    with the least relative output error (ties: the first tried)."""
    groups, choices = [], []
    for candidate in candidates:
        stat = stats[candidate.activation.name]
        rows = np.asarray(stat.rows, np.float32)
        meanabs = np.abs(rows).mean(axis=0)
        weights = [weight_by_input_channel(p.node)[:, :, 0] for p in candidate.plans]
        references = [rows @ w for w in weights]
        tried = (alpha,) if alpha is not None else (None, *AWQ_ALPHA_GRID)
        errors = {a: _block_error(rows, weights, references, None if a is None else awq_scales(meanabs, a), form)
                  for a in tried}
        best = min(tried, key=lambda a: errors[a])
        choices.append(SmoothChoice(candidate.activation.name, best, errors))
        if best is not None:
            groups.append(SmoothGroup(candidate.activation, tuple(p.node for p in candidate.plans),
                                      awq_scales(meanabs, best)))
    return groups, choices


def _block_error(rows: np.ndarray, weights: list[np.ndarray], references: list[np.ndarray],
                 scales: np.ndarray | None, form: BlockForm) -> float:
    """Σ over the layers of |Q(X/s)·B(s·W) − X·W|² / |X·W|²: B the weight's blocks rounded to nearest (no clip
    search: the scales are compared, not tuned), Q the kernel's per-block int8 activations or none."""
    x = rows if scales is None else rows / scales
    if form.int8_activations:
        x = _int8_per_block(x, form.size)
    total = 0.0
    for w, reference in zip(weights, references):
        scaled = w if scales is None else w * scales[:, None]
        blocks = quantize_blockwise(scaled, form.size, form.symmetric, clip_ratios=(1.0,), bits=form.bits)
        total += float(np.sum((x @ dequantize_blockwise(blocks) - reference) ** 2) / max(np.sum(reference ** 2), 1e-30))
    return total


def _int8_per_block(x: np.ndarray, size: int) -> np.ndarray:
    """x [rows, K] as MatMulNBits' accuracy_level 4 reads it: symmetric int8, one scale per row and block of K."""
    rows, k = x.shape
    padded = np.zeros((rows, -(-k // size) * size), np.float32)
    padded[:, :k] = x
    blocks = padded.reshape(rows, -1, size)
    scale = np.abs(blocks).max(axis=-1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    return (np.clip(np.rint(blocks / scale), -127, 127) * scale).reshape(rows, -1)[:, :k]
