"""Compute layers that ORT's CPU execution provider has no integer kernel for: each is a candidate that stays float,
with the reason, so the report lists it among the nodes left in float (and a model of nothing else is refused with
that reason) instead of passing over it. Quantized anyway, such a node would run in float on dequantized int8 —
slower than float and less accurate.

Measured on onnxruntime 1.31.1 (tests/handlers/test_float_only.py keeps checking it): DequantizeLinear →
ConvTranspose → QuantizeLinear stays three nodes at ORT_ENABLE_ALL, per-tensor and per-channel weights alike, and
com.microsoft QLinearConvTranspose is not a registered op in the CPU build (its kernel is XNNPACK's). ORT's only
integer recurrent kernel is DynamicQuantizeLSTM (handlers/lstm.py); GRU and RNN have none. A ConvTranspose whose
kernel equals its stride never gets here: the preparation makes it a 1×1 Conv + DepthToSpace
(passes/conv_transpose_as_conv.py).
"""

from __future__ import annotations

import onnx_ir as ir

from onnxq.handlers.plan import PlanContext, Skip
from onnxq.handlers.registry import Handler, register

__all__ = ["NO_INTEGER_KERNEL"]

NO_INTEGER_KERNEL = {
    "ConvTranspose": "ORT's CPU provider has no integer ConvTranspose (DequantizeLinear → ConvTranspose is not fused; "
                     "QLinearConvTranspose is XNNPACK-only): quantized, it would run in float on dequantized int8",
    "GRU": "ORT has no integer GRU kernel (its only integer recurrent kernel is DynamicQuantizeLSTM)",
    "RNN": "ORT has no integer RNN kernel (its only integer recurrent kernel is DynamicQuantizeLSTM)",
}


def _kept_float(reason: str) -> Handler:
    def plan(node: ir.Node, ctx: PlanContext) -> Skip:
        return Skip(node, reason)
    return plan


for _op_type, _reason in NO_INTEGER_KERNEL.items():
    # Not a product for placement: the node is never quantized, so there is no integer kernel to look for.
    register(_op_type, product=False)(_kept_float(_reason))
