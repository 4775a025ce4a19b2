"""Output formats by name: the config accepts the registered ones; a format's module registers its lowering.

Every static model is first rewritten in QDQ form (QuantizeLinear/DequantizeLinear around float ops: any runtime,
ORT fuses them on CPU). A format other than qdq lowers that model in place (passes/lower_qoperator.py registers
"qoperator", passes/lower_qlinear.py "qlinear"); its lowering returns the planned nodes it left in QDQ form, with
why. A format lowers the modes it names (static only, by default: dynamic and weight-only models are operator form
already, MatMulInteger and MatMulNBits), and may ask the planners to requantize every product's output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx_ir as ir

__all__ = ["OutputFormat", "FORMATS", "register_format"]

# (model, plans) → {node name: why it stayed in QDQ form}; the plans are handlers.plan.NodePlan (a higher layer).
Lowering = Callable[[ir.Model, Sequence[Any]], Mapping[str, str]]


@dataclasses.dataclass(frozen=True)
class OutputFormat:
    name: str
    description: str
    lower: Lowering | None = None  # None: the QDQ model as it is
    # The modes whose models it lowers.
    lowered_modes: frozenset[str] = frozenset({"static"})
    # Static products get a requantized (calibrated) output, as QLinearMatMul / QLinearConv take one.
    requantize_products: bool = False
    # Why weight-only models cannot take this format (their blocks are com.microsoft operators), or None.
    refuses_weight_only: str | None = None
    # Only ONNX-standard operators: planners leave float what only a com.microsoft kernel would run.
    standard_ops_only: bool = False


FORMATS: dict[str, OutputFormat] = {}


def register_format(output_format: OutputFormat) -> OutputFormat:
    if output_format.name in FORMATS:
        raise ValueError(f"an output format named {output_format.name!r} is already registered")
    FORMATS[output_format.name] = output_format
    return output_format


register_format(OutputFormat("qdq", "QuantizeLinear/DequantizeLinear around float ops (any runtime; ORT fuses them "
                                    "on CPU)"))
