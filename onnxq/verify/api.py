"""onnxq.verify(): check any quantized model against its float model, on every provider present."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import onnx
import onnx_ir as ir

from onnxq.calibration.axes import read_layout
from onnxq.calibration.data import reread_batches
from onnxq.calibration.specs import DataSource, input_specs
from onnxq.config import CalibrationConfig, DataConfig, QuantConfig, VerifyConfig
from onnxq.data import declare_source, resolve_source, source_model
from onnxq.errors import CalibrationDataError, UnsupportedModelError
from onnxq.io import LOAD_NOTES, external_data_files, load_model, run_files
from onnxq.io.custom_ops import custom_op_libraries
from onnxq.verify.check import Reference, Verification, verify_models
from onnxq.verify.outcome import check_output_tolerances
from onnxq.verify.placement import quantized_nodes
from onnxq.verify.task_rules import language_model_logits

__all__ = ["verify"]

ModelInput = str | os.PathLike | onnx.ModelProto | ir.Model | bytes


def verify(float_model: ModelInput, quant_model: ModelInput, data: DataSource, *,
           config: VerifyConfig | QuantConfig | Mapping[str, Any] | None = None,
           providers: tuple[str, ...] | None = None,
           batch_size: int = 8, target: str = "portable") -> Verification:
    """Run the float model (CPU, the reference) and the quantized model on each provider over the data; compare
    every output against its tolerance, the providers against each other, and report where each node ran.
    config: a VerifyConfig, or a QuantConfig (or a dict of the config file's keys) whose verify table applies and
    whose calibration.sample_axes / constant_inputs / unbatched_inputs say how the data holds its samples.
    target: the CPUs the model must hold on (onnxq.targets); AVX2 is emulated where this CPU is not one."""
    if config is not None and not isinstance(config, VerifyConfig):
        config = QuantConfig.of(config)  # a dict of the config file's keys; any other kind refused
    layout = config.calibration if isinstance(config, QuantConfig) else CalibrationConfig()
    data_config = config.data if isinstance(config, QuantConfig) else DataConfig()
    libraries = config.custom_op_libraries if isinstance(config, QuantConfig) else ()
    config = config.verify if isinstance(config, QuantConfig) else config or VerifyConfig()
    if providers is not None:
        config = dataclasses.replace(config, providers=tuple(providers))
    with run_files() as files:  # what it reads, so that no output of the run (a report) lands on it
        float_ir = _load(files, float_model, "the float model")
        quant_ir = _load(files, quant_model, "the quantized model")
        # Text, images, one .npy, arrays named otherwise: read as quantize() reads them (onnxq.data).
        path = float_model if isinstance(float_model, (str, os.PathLike)) else None
        decoder = language_model_logits(float_ir) is not None
        reads = source_model(float_ir, dataclasses.replace(layout, batch_size=batch_size), decoder, path)
        source = resolve_source(data, reads, data_config, "verification")
        declare_source(files, data, source, "the verification data")
        data = source
    # The data's shapes say which inputs it gives once, where an unnamed samples axis is (calibration.axes) and
    # whether the model has a batch axis (calibration.unbatched).
    layout, _ = read_layout(float_ir, layout, (data,))
    specs = input_specs(float_ir, layout.sample_axes, layout.constant_inputs, layout.unbatched_inputs)
    quant_inputs = {s.name for s in input_specs(quant_ir)}
    if quant_inputs != {s.name for s in specs}:
        raise CalibrationDataError(f"the two models have different inputs ({sorted(quant_inputs)} vs "
                                   f"{sorted(s.name for s in specs)}) — pass the float model and its quantized form")
    missing = [o.name for o in float_ir.graph.outputs if o.name not in {q.name for q in quant_ir.graph.outputs}]
    if missing:
        raise UnsupportedModelError(f"the quantized model has no output {missing[0]!r}, which the float model has — "
                                    "pass the float model and its own quantized form")
    check_output_tolerances(config, [o.name for o in float_ir.graph.outputs])
    batches = reread_batches(data, specs, batch_size)  # a batch at a time, however large the data
    float_source = float_model if isinstance(float_model, (str, os.PathLike)) else float_ir
    # A file whose nodes had to be named is run as loaded (named), so that placement finds every node.
    renamed = quant_ir.meta[LOAD_NOTES]["renamed_nodes"]
    quant_source = quant_model if isinstance(quant_model, (str, os.PathLike)) and not renamed else quant_ir
    with custom_op_libraries(libraries):
        return verify_models(Reference(float_source, batches, graph=float_ir), quant_source, config,
                             "the given data", quantized_nodes(quant_ir), target)


def _load(files, source: ModelInput, what: str) -> ir.Model:
    model = load_model(source)
    if isinstance(source, (str, os.PathLike)):
        files.add_input(source, what)
        for data in external_data_files(model):
            files.add_input(data, f"{what}'s external data")
    return model
