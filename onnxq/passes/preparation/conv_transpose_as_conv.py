"""A 2-D ConvTranspose whose kernel equals its stride, made a 1×1 Conv and a DepthToSpace before planning: the same
products, in a form ORT runs in integers.

With kernel = stride and no padding, each input pixel writes its own k×k block of the output, never overlapping a
neighbour's: y[n, c, k·i + a, k·j + b] = bias[c] + Σ_ci x[n, ci, i, j] · W[ci, c, a, b]. That is a 1×1 Conv with
c·k² + a·k + b output channels, W'[c·k² + a·k + b, ci] = W[ci, c, a, b], then DepthToSpace(blocksize k, mode CRD),
which moves channel c·k² + a·k + b to pixel (k·i + a, k·j + b) of channel c — exact, each output still one sum over
ci. ORT's CPU provider has no integer ConvTranspose (handlers/float_only.py), but QLinearConv; the upsampling heads
of segmentation and text-detection networks (U-Net, DBNet: PP-OCR's detector has two, 3 % of its MACs) are this
kind. Any other ConvTranspose (overlapping kernels, padding, groups, 1-D/3-D) stays one and is kept float with the
reason. The rewritten model is a clone; the model as given stays the verification's reference.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.handlers.plan import constant_float
from onnxq.io.irquery import attribute
from onnxq.passes.graph.builder import GraphBuilder, replace_node, rewrite_each

__all__ = ["conv_transposes_as_convs"]


def conv_transposes_as_convs(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(a clone with every kernel = stride ConvTranspose made Conv → DepthToSpace, a note), or (the model, None)."""
    rewritten, count = rewrite_each(model, _block_size, _rewrite)
    if not count:
        return model, None
    return rewritten, (f"{count} ConvTranspose node(s) with kernel = stride made a 1x1 Conv + DepthToSpace (the same "
                       "products; ORT has an integer Conv and no integer ConvTranspose)")


def _ints(node: ir.Node, name: str) -> tuple[int, ...] | None:
    attr = node.attributes.get(name)
    return None if attr is None else tuple(attr.value)


def _block_size(node: ir.Node) -> int:
    """k where the node is a 2-D, ungrouped, unpadded ConvTranspose of a constant [Cin, Cout, k, k] weight with
    stride k (its blocks do not overlap), else 0."""
    if node.op_type != "ConvTranspose" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return 0
    weight = constant_float(node.inputs[1] if len(node.inputs) > 1 else None)
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if weight is None or len(weight.shape) != 4 or (bias is not None and constant_float(bias) is None):
        return 0
    k = weight.shape[2]
    if weight.shape[3] != k or attribute(node, "group", 1) != 1 or "output_shape" in node.attributes:
        return 0
    # With kernel = stride every auto_pad setting pads 0 (SAME's total padding is k - stride); explicit pads must be 0.
    same = {"kernel_shape": (k, k), "strides": (k, k), "dilations": (1, 1), "pads": (0,) * 4,
            "output_padding": (0, 0)}
    defaults = {"strides": (1, 1), "dilations": (1, 1), "kernel_shape": (k, k)}
    for name, wanted in same.items():
        given = _ints(node, name)
        if (given if given is not None else defaults.get(name, wanted)) != wanted:
            return 0
    return k


def _rewrite(builder: GraphBuilder, node: ir.Node, k: int) -> None:
    weight = constant_float(node.inputs[1]).numpy()
    out_channels = weight.shape[1] * k * k
    # W'[c·k² + a·k + b, ci] = W[ci, c, a, b]: DepthToSpace CRD's channel order.
    conv_weight = np.ascontiguousarray(weight.transpose(1, 2, 3, 0).reshape(out_channels, weight.shape[0], 1, 1))
    inputs = [node.inputs[0], builder.initializer(f"{node.inputs[1].name or 'W'}_as_conv", conv_weight)]
    bias = constant_float(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if bias is not None:
        inputs.append(builder.initializer(f"{node.name or 'ConvTranspose'}_B_as_conv",
                                          np.repeat(bias.numpy(), k * k).astype(np.float32)))
    name = node.name or "ConvTranspose"
    conv = builder.node("Conv", inputs, name, node, attributes={"kernel_shape": [1, 1]})
    conv.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    conv.outputs[0].shape = _conv_shape(node.inputs[0].shape, out_channels)
    shuffle = builder.node("DepthToSpace", [conv.outputs[0]], f"{name}_depth_to_space", node,
                           attributes={"blocksize": k, "mode": "CRD"})
    replace_node(builder.graph, node, shuffle.outputs[0])
    conv.name = name  # the report and the user's exclude lists know the node by its name


def _conv_shape(shape: ir.Shape | None, channels: int) -> ir.Shape | None:
    if shape is None or shape.rank() != 4:
        return None
    return ir.Shape([shape[0], channels, shape[2], shape[3]])
