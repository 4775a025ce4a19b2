"""onnxq.verify(): check any quantized model against its float model, on every provider present."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import onnx
import onnx_ir as ir

from onnxq.data.axes import read_layout
from onnxq.data.dataset import reread_batches
from onnxq.data.specs import DataSource, input_specs
from onnxq.config import CalibrationConfig, DataConfig, QuantConfig, VerifyConfig
from onnxq.data import declare_source, resolve_source, source_model
from onnxq.errors import CalibrationDataError, UnsupportedModelError, one_line
from onnxq.io import LOAD_NOTES, external_data_files, load_model, run_files
from onnxq.targets import DEFAULT_TARGET
from onnxq.io.custom_ops import custom_op_libraries
from onnxq.verify.check import Reference, Verification, verify_models
from onnxq.verify.outcome import check_output_tolerances
from onnxq.verify.kernels.placement import quantized_nodes
from onnxq.verify.tasks.rules import language_model_logits

__all__ = ["verify", "compare_models"]

ModelInput = str | os.PathLike | onnx.ModelProto | ir.Model | bytes


def verify(float_model: ModelInput, quant_model: ModelInput, data: DataSource, *,
           config: VerifyConfig | QuantConfig | Mapping[str, Any] | None = None,
           providers: tuple[str, ...] | None = None,
           batch_size: int = 8, target: str = DEFAULT_TARGET) -> Verification:
    """Run the float model (CPU, the reference) and the quantized model on each provider over the data; compare
    every output against its tolerance, the providers against each other, and report where each node ran.

    A second model that quantizes nothing is refused (a float model against itself shows nothing), naming the swap
    when the first one is the quantized one.

    Args:
        float_model: the float model (a path, an onnx.ModelProto, an onnx_ir.Model or its bytes).
        quant_model: the quantized model, in the same forms.
        data: the inputs to compare on, in any form quantize() takes as calibration data.
        config: a VerifyConfig, or a QuantConfig (or a dict of the config file's keys) whose verify table applies
            and whose calibration.sample_axes / constant_inputs / unbatched_inputs say how the data holds its
            samples.
        providers: execution providers to run the quantized model on; None: the config's.
        batch_size: samples per run.
        target: the CPUs the model must hold on (onnxq.targets); AVX2 is emulated where this CPU is not one.

    Returns:
        Every output's figures and verdict per provider, the agreement between providers and the placement.
    """
    return _checked(float_model, quant_model, data, _Settings(config, providers, batch_size, target), guard=True)


def compare_models(float_model: ModelInput, other_model: ModelInput, data: DataSource, *,
                   config: VerifyConfig | QuantConfig | Mapping[str, Any] | None = None,
                   providers: tuple[str, ...] | None = None,
                   batch_size: int = 8, target: str = DEFAULT_TARGET) -> Verification:
    """verify() of any second model, quantized or not: a float model against a changed float copy whose error is
    known (a stand-in for a quantized model's, as the detection gate's tests use), or against a pruned one."""
    return _checked(float_model, other_model, data, _Settings(config, providers, batch_size, target), guard=False)


@dataclasses.dataclass(frozen=True)
class _Settings:
    config: VerifyConfig | QuantConfig | Mapping[str, Any] | None
    providers: tuple[str, ...] | None
    batch_size: int
    target: str


def _checked(float_model: ModelInput, quant_model: ModelInput, data: DataSource, settings: _Settings,
             guard: bool) -> Verification:
    config = settings.config
    if config is not None and not isinstance(config, VerifyConfig):
        config = QuantConfig.of(config)  # a dict of the config file's keys; any other kind refused
    layout = config.calibration if isinstance(config, QuantConfig) else CalibrationConfig()
    data_config = config.data if isinstance(config, QuantConfig) else DataConfig()
    libraries = config.custom_op_libraries if isinstance(config, QuantConfig) else ()
    config = config.verify if isinstance(config, QuantConfig) else config or VerifyConfig()
    if settings.providers is not None:
        config = dataclasses.replace(config, providers=tuple(settings.providers))
    with run_files() as files:  # what it reads, so that no output of the run (a report) lands on it
        float_ir = _load(files, float_model, "the float model")
        quant_ir = _load(files, quant_model, "the quantized model")
        # Text, images, one .npy, arrays named otherwise: read as quantize() reads them (onnxq.data).
        path = float_model if isinstance(float_model, (str, os.PathLike)) else None
        decoder = language_model_logits(float_ir) is not None
        reads = source_model(float_ir, dataclasses.replace(layout, batch_size=settings.batch_size), decoder, path)
        source = resolve_source(data, reads, data_config, "verification", beside_calibration=False)
        declare_source(files, data, source, "the verification data")
        data = source
        files.check_inputs_unchanged("right after loading")
    # The data's shapes say which inputs it gives once, where an unnamed samples axis is (data.axes) and
    # whether the model has a batch axis (data.unbatched).
    layout, _ = read_layout(float_ir, layout, (data,))
    specs = input_specs(float_ir, layout.sample_axes, layout.constant_inputs, layout.unbatched_inputs)
    _check_same_interface(float_ir, quant_ir, specs)
    quantized = quantized_nodes(quant_ir)
    if guard:
        _check_pair(float_ir, quantized, (float_model, quant_model))
    check_output_tolerances(config, [o.name for o in float_ir.graph.outputs])
    batches = reread_batches(data, specs, settings.batch_size)  # a batch at a time, however large the data
    float_source = float_model if isinstance(float_model, (str, os.PathLike)) else float_ir
    # A file whose nodes had to be named is run as loaded (named), so that placement finds every node.
    renamed = quant_ir.meta[LOAD_NOTES]["renamed_nodes"]
    quant_source = quant_model if isinstance(quant_model, (str, os.PathLike)) and not renamed else quant_ir
    with custom_op_libraries(libraries):
        return verify_models(Reference(float_source, batches, graph=float_ir), quant_source, config,
                             "the given data", quantized, settings.target)


def _check_same_interface(float_ir: ir.Model, quant_ir: ir.Model, specs: list) -> None:
    """Two models that differ in their inputs, outputs or outputs' declared shapes are two different models."""
    quant_inputs = {s.name for s in input_specs(quant_ir)}
    if quant_inputs != {s.name for s in specs}:
        raise CalibrationDataError(f"the two models have different inputs ({sorted(quant_inputs)} vs "
                                   f"{sorted(s.name for s in specs)}) — pass the float model and its quantized form")
    missing = [o.name for o in float_ir.graph.outputs if o.name not in {q.name for q in quant_ir.graph.outputs}]
    if missing:
        raise UnsupportedModelError(f"the quantized model has no output {missing[0]!r}, which the float model has — "
                                    "pass the float model and its own quantized form")
    _check_shapes(float_ir, quant_ir)


def _check_pair(float_ir: ir.Model, quantized: Mapping[str, str], given: tuple[ModelInput, ModelInput]) -> None:
    """A second model with no quantized node compares the float model with a float model: every bar holds and
    nothing is shown. Refused, naming the swap when the first model is the quantized one; a quantized first model
    is no reference either (its own error would not count)."""
    first, second = (_named(source, what) for source, what in zip(given, ("the first model", "the second model")))
    if quantized and quantized_nodes(float_ir):
        raise UnsupportedModelError(f"{first} is quantized too: the reference must be the float model, or its own "
                                    f"error goes uncounted — pass the float model first, {second} second")
    if quantized:
        return
    if quantized_nodes(float_ir):
        raise UnsupportedModelError(f"{first} is the quantized one and {second} quantizes nothing — swap them: the "
                                    "float model first, its quantized form second")
    raise UnsupportedModelError(f"{second} quantizes nothing (no node reads a DequantizeLinear or runs an integer "
                                "kernel): a float model checked against a float model shows nothing — pass the "
                                "quantized model second")


def _check_shapes(float_ir: ir.Model, quant_ir: ir.Model) -> None:
    """Outputs whose declared ranks or fixed sizes differ are two different models' (refused before anything runs). A size either
    graph leaves open is the data's to decide (a decoder Loop's steps, an NMS's detections): the verification
    compares such outputs however long each model makes them (verify.metrics pads the shorter)."""
    quantized = {o.name: o for o in quant_ir.graph.outputs}
    for output in float_ir.graph.outputs:
        a, b = output.shape, quantized[output.name].shape
        if a is None or b is None:
            continue
        fixed = [(m, n) for m, n in zip(a, b) if isinstance(m, int) and isinstance(n, int)]
        if len(a) != len(b) or any(m != n for m, n in fixed):
            raise UnsupportedModelError(f"output {one_line(output.name)} is declared {a} in the float model "
                                        f"but {b} in the quantized one — pass the float model and its own "
                                        "quantized form")


def _named(source: ModelInput, what: str) -> str:
    return f"{what} ({one_line(str(source))})" if isinstance(source, (str, os.PathLike)) else what


def _load(files, source: ModelInput, what: str) -> ir.Model:
    """The model loaded, its file declared (its state taken) before it is read: a change while it loads is seen."""
    path = isinstance(source, (str, os.PathLike))
    if path:
        files.add_input(source, what)
    model = load_model(source)
    if path:
        for data in external_data_files(model):
            files.add_input(data, f"{what}'s external data")
    return model
