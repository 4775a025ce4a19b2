"""The constant weight of a layer that smoothing rescales, seen by its input channels: a MatMul / Gemm weight's rows
(K), a Conv weight's input channels (axis 1, per group). Smoothing multiplies input channel j by s_j; the numerics
see every weight as [K, N, taps] with per-channel quantization along N (a MatMul's columns, a Conv's output
channels, each with its kernel taps)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from onnxq.io.irquery import attribute

__all__ = ["weight_by_input_channel", "scale_input_channels", "scaled_pieces", "reads_channels_last"]


def reads_channels_last(node: ir.Node) -> bool:
    """Whether the node's activation has its channels on the last axis (MatMul / Gemm), else on axis 1 (Conv)."""
    return node.op_type != "Conv"


def weight_by_input_channel(node: ir.Node) -> np.ndarray:
    """The node's constant weight as float32 [K, N, taps]: K input channels, N output channels (quantized each on
    its own scale), taps per output channel (1 for MatMul / Gemm). A grouped Conv's weight is spread over all K
    input channels, zero outside each output channel's group."""
    # No copy of a float32 weight (it may be memory-mapped): every caller reads it and writes new arrays.
    weight = ir.convenience.get_const_tensor(node.inputs[1]).numpy().astype(np.float32, copy=False)
    if reads_channels_last(node):
        rows = weight.T if node.op_type == "Gemm" and attribute(node, "transB") else weight
        return rows[:, :, None]
    groups = attribute(node, "group", 1)
    cout, cin_group = weight.shape[:2]
    per_group = weight.reshape(groups, cout // groups, cin_group, -1)
    dense = np.zeros((groups * cin_group, cout, per_group.shape[-1]), np.float32)
    cout_group = cout // groups
    for g in range(groups):
        dense[g * cin_group:(g + 1) * cin_group, g * cout_group:(g + 1) * cout_group] = per_group[g].transpose(1, 0, 2)
    return dense


def scale_input_channels(node: ir.Node, weight: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The node's weight (as stored) with input channel j multiplied by s_j."""
    return weight * input_channel_factor(node, weight.shape, s)


def scaled_pieces(node: ir.Node, weight: np.ndarray, s: np.ndarray, piece_bytes: int) -> Iterator[np.ndarray]:
    """scale_input_channels' result a piece of its first axis at a time (each at most piece_bytes of float32, at
    least one row), the same values: a caller that writes each piece away never holds the whole scaled weight."""
    factor = input_channel_factor(node, weight.shape, s)
    row_bytes = 4 * int(np.prod(weight.shape[1:], dtype=np.int64))
    step = max(1, piece_bytes // max(row_bytes, 1))
    for start in range(0, weight.shape[0], step):
        rows = slice(start, start + step)
        yield weight[rows] * (factor[rows] if factor.shape[0] == weight.shape[0] else factor)


def input_channel_factor(node: ir.Node, shape: tuple[int, ...], s: np.ndarray) -> np.ndarray:
    """s laid out to broadcast against the node's weight of `shape` (as stored) along its input channels."""
    if reads_channels_last(node):
        transposed = node.op_type == "Gemm" and attribute(node, "transB")
        return s[None, :] if transposed else s[:, None]
    groups = attribute(node, "group", 1)
    cout, cin_group = shape[:2]
    # Output channel o of group g reads input channels g·(Cin/G) … (g+1)·(Cin/G) − 1 as its weight's axis 1.
    per_output = np.broadcast_to(s.reshape(groups, 1, cin_group), (groups, cout // groups, cin_group))
    return per_output.reshape(cout, cin_group, *([1] * (len(shape) - 2)))
