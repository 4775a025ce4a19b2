"""Which activations to smooth and with which α: groups of planned linear layers (MatMul / Gemm, or Conv) sharing
an activation, and the per-group α that minimises those layers' quantized output error on calibration rows
(smooth = "auto")."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnxq.calibration.channels import ChannelStats
from onnxq.handlers.plan import NodePlan
from onnxq.io.memory import page_out
from onnxq.io.irquery import attribute
from onnxq.numerics import choose_qparams, dequantize, quantize
from onnxq.numerics.per_token import per_token_quantize
from onnxq.numerics.smoothing import ALPHA_GRID, CONV_ALPHA_GRID, smoothing_scales
from onnxq.passes.smoothing.graph import SmoothGroup
from onnxq.passes.smoothing.weights import reads_channels_last, weight_by_input_channel

__all__ = ["Candidate", "smoothable_groups", "choose_smoothing", "SmoothChoice", "static_error"]

_SLICE_BYTES = 16 << 20  # a weight's output channels at a time in the error of a choice (_weight_error)


@dataclasses.dataclass(frozen=True, eq=False)
class Candidate:
    """Linear layers reading one activation, each planned as activation × constant weight; all MatMul / Gemm, or
    all Conv."""

    activation: ir.Value
    plans: tuple[NodePlan, ...]

    @property
    def per_token(self) -> bool:
        return all(p.per_token for p in self.plans)

    @property
    def channel_axis(self) -> int:
        """The activation's axis of input channels: the last for MatMul / Gemm, 1 for Conv."""
        return -1 if reads_channels_last(self.plans[0].node) else 1


@dataclasses.dataclass(frozen=True)
class SmoothChoice:
    activation: str
    alpha: float | None  # None: left unsmoothed (nothing in the grid beat it)
    # Relative squared output error of the quantized layers, per α tried (None = unsmoothed).
    errors: dict[float | None, float]


def smoothable_groups(plans: Sequence[NodePlan]) -> list[Candidate]:
    """Planned MatMul / Gemm (transA = 0) and Conv with a constant weight, grouped by the activation they read, in
    graph order. An activation read by any other planned kind of node, or by both kinds, is left alone."""
    groups: dict[ir.Value, list[NodePlan]] = {}
    blocked: set[ir.Value] = set()
    for plan in (p for p in plans if not p.scope):  # a body's per-channel statistics are not collected
        node = plan.node
        eligible = (plan.activations == (0,) and len(plan.weights) == 1 and plan.weights[0].input_index == 1
                    and node.op_type in ("MatMul", "Gemm", "Conv") and not attribute(node, "transA"))
        if eligible:
            groups.setdefault(node.inputs[0], []).append(plan)
        else:
            blocked.update(node.inputs[i] for i in plan.activations)
    mixed = {v for v, ps in groups.items() if len({reads_channels_last(p.node) for p in ps}) > 1}
    return [Candidate(value, tuple(ps)) for value, ps in groups.items() if value not in blocked | mixed]


def choose_smoothing(candidates: Sequence[Candidate], stats: Mapping[str, ChannelStats], alpha: float | None,
                     per_token: bool | None = None) -> tuple[list[SmoothGroup], list[SmoothChoice]]:
    """Fixed α (a number): every group smoothed with it. None ("auto"): per group the α of ALPHA_GRID, or no
    smoothing, with the least relative output error of its quantized layers on the sampled rows (ties: the first
    tried, so the choice is deterministic). per_token: how the activations will be quantized (None: as planned)."""
    groups, choices = [], []
    for candidate in candidates:
        stat = stats[candidate.activation.name]
        weights = [weight_by_input_channel(p.node) for p in candidate.plans]
        weight_absmax = np.max([_input_channel_absmax(w) for w in weights], axis=0)
        grid = ALPHA_GRID if candidate.channel_axis == -1 else CONV_ALPHA_GRID
        tried = (alpha,) if alpha is not None else (None, *grid)
        errors, products = {}, _FloatProducts(stat.rows, weights)
        for a in tried:
            scales = None if a is None else smoothing_scales(stat.absmax, weight_absmax, a)
            per_row = candidate.per_token if per_token is None else per_token
            # Per tensor, the range must hold every row, not only the sampled ones: min and max of X_j / s_j over
            # all the data are known exactly from the statistics.
            value_range = None if per_row else _smoothed_range(stat, scales)
            errors[a] = _output_error(products, scales, per_row, value_range)
        best = min(tried, key=lambda a: errors[a])
        for plan in candidate.plans:  # read once here: a memory-mapped weight need not stay resident
            page_out(ir.convenience.get_const_tensor(plan.node.inputs[1]))
        choices.append(SmoothChoice(candidate.activation.name, best, errors))
        if best is not None:
            groups.append(SmoothGroup(candidate.activation, tuple(p.node for p in candidate.plans),
                                      smoothing_scales(stat.absmax, weight_absmax, best)))
    return groups, choices


def _smoothed_range(stat: ChannelStats, scales: np.ndarray | None) -> tuple[float, float]:
    """The per-tensor range of X / s (s > 0) over all the data."""
    divisor = 1.0 if scales is None else scales
    return float(np.min(stat.low / divisor)), float(np.max(stat.high / divisor))


def static_error(candidate: Candidate, stats: Mapping[str, ChannelStats], value_range: tuple[float, float]) -> float:
    """The group's output error (as in choose_smoothing) quantized per tensor with its calibrated range, unsmoothed."""
    weights = [weight_by_input_channel(p.node) for p in candidate.plans]
    return _output_error(_FloatProducts(stats[candidate.activation.name].rows, weights), None, False, value_range)


class _FloatProducts:
    """The sampled rows, the group's weights [K, N, taps], and their float products X·W with each one's |X·W|²:
    the reference every α tried is measured against, computed once per group."""

    def __init__(self, rows: np.ndarray, weights: list[np.ndarray]) -> None:
        self.rows, self.weights = rows, weights
        self.references = [rows @ w.reshape(w.shape[0], -1) for w in weights]
        self.energies = [max(np.sum(r ** 2), 1e-30) for r in self.references]


def _output_error(products: _FloatProducts, scales: np.ndarray | None, per_token: bool,
                  value_range: tuple[float, float] | None = None) -> float:
    """Σ over the layers of |Q(X/s)·Q(s·W) − X·W|² / |X·W|², with the activation quantized as it will be (per
    token, or per tensor uint8 over value_range, by default the rows' range) and the weights [K, N, taps] per
    output channel, symmetric int8. A Conv's taps are products of their own (each row is one position): the error
    of every tap's contribution, a proxy for the sum's that ranks the choices alike without the positions."""
    rows = products.rows
    x = rows if scales is None else rows / scales
    if per_token:
        q, row_scale = per_token_quantize(x)
        x_q = q.astype(np.float32) * row_scale
    else:
        lo, hi = value_range or (float(x.min()), float(x.max()))
        qparams = choose_qparams(lo, hi, np.dtype(np.uint8), False)
        x_q = dequantize(quantize(x, qparams), qparams)
    total = 0.0
    for w, reference, energy in zip(products.weights, products.references, products.energies):
        total += float(_weight_error(x_q, w, reference, scales) / energy)
    return total


def _weight_error(x_q: np.ndarray, w: np.ndarray, reference: np.ndarray, scales: np.ndarray | None) -> float:
    """|x_q·Q(s·W) − X·W|² with W [K, N, taps] quantized per output channel: a slice of output channels at a time
    (each has its own scale, and the error is a sum over them), so that a vocabulary-sized lm_head (113 MB for
    SmolLM2) is not copied whole four times over."""
    k, n, taps = w.shape
    step = _slice(w)
    error = 0.0
    for start in range(0, n, step):
        part = w[:, start:start + step]
        w_s = part if scales is None else part * scales[:, None, None]
        w_absmax = np.abs(w_s).max(axis=(0, 2))
        qparams = choose_qparams(-w_absmax, w_absmax, np.dtype(np.int8), True, axis=1)
        w_q = dequantize(quantize(w_s, qparams), qparams).reshape(k, -1)
        error += float(np.sum((x_q @ w_q - reference[:, start * taps:(start + part.shape[1]) * taps]) ** 2))
    return error


def _input_channel_absmax(w: np.ndarray) -> np.ndarray:
    """max |W| per input channel of W [K, N, taps], a slice of output channels at a time (as _weight_error)."""
    step = _slice(w)
    return np.max([np.abs(w[:, start:start + step]).max(axis=(1, 2)) for start in range(0, w.shape[1], step)],
                  axis=0)


def _slice(w: np.ndarray) -> int:
    """Output channels of W [K, N, taps] in _SLICE_BYTES of float32."""
    return max(1, _SLICE_BYTES // max(w.shape[0] * w.shape[2] * 4, 1))
