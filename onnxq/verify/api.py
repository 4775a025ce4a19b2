"""onnxq.verify(): check any quantized model against its float model, on every provider present."""

from __future__ import annotations

import dataclasses
import os

import onnx
import onnx_ir as ir

from onnxq.calibration.data import DataSource, input_specs, validated_batches
from onnxq.config import VerifyConfig
from onnxq.errors import CalibrationDataError
from onnxq.io import load_model
from onnxq.verify.check import Reference, Verification, verify_models
from onnxq.verify.placement import quantized_nodes

__all__ = ["verify"]

ModelInput = str | os.PathLike | onnx.ModelProto | ir.Model


def verify(float_model: ModelInput, quant_model: ModelInput, data: DataSource, *,
           config: VerifyConfig | None = None, providers: tuple[str, ...] | None = None,
           batch_size: int = 8, target: str = "portable") -> Verification:
    """Run the float model (CPU, the reference) and the quantized model on each provider over the data; compare
    every output against its tolerance, the providers against each other, and report where each node ran.
    target: the CPUs the model must hold on (onnxq.targets); AVX2 is emulated where this CPU is not one."""
    config = config or VerifyConfig()
    if providers is not None:
        config = dataclasses.replace(config, providers=tuple(providers))
    float_ir = load_model(float_model)
    quant_ir = load_model(quant_model)
    specs = input_specs(float_ir)
    quant_inputs = {s.name for s in input_specs(quant_ir)}
    if quant_inputs != {s.name for s in specs}:
        raise CalibrationDataError(f"the two models have different inputs ({sorted(quant_inputs)} vs "
                                   f"{sorted(s.name for s in specs)}) — pass the float model and its quantized form")
    batches = list(validated_batches(data, specs, batch_size, what="verification"))
    float_source = float_model if isinstance(float_model, (str, os.PathLike)) else float_ir
    quant_source = quant_model if isinstance(quant_model, (str, os.PathLike)) else quant_ir
    return verify_models(Reference(float_source, batches), quant_source, config, "the given data",
                         quantized_nodes(quant_ir), target)
