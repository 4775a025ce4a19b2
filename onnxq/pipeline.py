"""quantize(): load → check → plan → calibrate → rewrite → verify (+ sensitivity, fallback) → save, driven by one
QuantConfig — the steps themselves are onnxq.steps, run in order over one state."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from onnxq.calibration import CalibrationSummary

from onnxq.data.specs import DataSource
from onnxq.config import QuantConfig
from onnxq.errors import UnsupportedModelError
from onnxq.report.html import render_html
from onnxq.io import model_size_bytes, run_files, save_model
from onnxq.io.custom_ops import custom_op_libraries
from onnxq.io.model import inline_external_tensors, over_proto_limit, prepare_for_save
from onnxq.passes.graph.builder import shared_weight_quantization
from onnxq.report.record import QuantReport
from onnxq.steps import RunInputs, RunState, build_report, run_steps
from onnxq.steps.state import ModelInput
from onnxq.report.summary import format_summary

__all__ = ["quantize", "QuantResult", "default_output_path"]


@dataclasses.dataclass
class QuantResult:
    """What quantize() returns: the quantized model, where it was written (None: in memory only) and the report,
    with what an export script needs of them — save(), to_proto(), summary(), to_html()."""

    model: ir.Model
    output: Path | None
    report: QuantReport
    # The input's own files (the model and its external data), which save() never writes over.
    inputs: tuple[Path, ...] = dataclasses.field(default=(), repr=False)

    def save(self, path: str | os.PathLike) -> list[Path]:
        """Write the model to `path` atomically (a temporary file beside it, then renamed); a model over 2 GB with
        its tensors in `<path>.data`. Returns the files written, and `output` (the report's too) says where. Never
        over the input model or its data."""
        written = save_model(self.model, path, protected=self.inputs)
        self.output = written[0]
        # The size the file has, as the command line reports it (in memory: the tensors' bytes alone).
        self.report = dataclasses.replace(self.report, output=str(written[0]),
                                          quant_bytes=sum(p.stat().st_size for p in written))
        return written

    def to_proto(self) -> onnx.ModelProto:
        """The model as one onnx.ModelProto, every tensor in it (a protobuf message holds at most 2 GB: save()
        writes a larger model with external data)."""
        if over_proto_limit(self.model):
            size = model_size_bytes(self.model)
            raise UnsupportedModelError(f"the quantized model holds {size / 1e9:.1f} GB of tensors, over protobuf's 2 "
                                        "GB for one ModelProto: save it with result.save(path), which writes its "
                                        "tensors to an external data file")
        inline_external_tensors(self.model)
        prepare_for_save(self.model)
        return ir.serde.serialize_model(self.model)

    def __repr__(self) -> str:
        return (f"QuantResult(output={str(self.output) if self.output else None!r}, {self.report.verdict}, "
                f"{len(self.report.quantized)} node(s) quantized, {len(self.report.left_float)} left float)")

    def summary(self, verbose: bool = False) -> str:
        """The text the command line prints; verbose as with -v."""
        return format_summary(self.report, verbose)

    def to_html(self) -> str:
        """The report as a standalone HTML page (the command line's --html)."""
        return render_html(self.report)


def _call(model: ModelInput, calibration: DataSource | None, output: str | os.PathLike | None) -> str:
    """The API call that made a report, in words: paths as given, any other argument by its type."""
    def shown(value: object) -> str:
        return repr(str(value)) if isinstance(value, (str, os.PathLike)) else f"<{type(value).__name__}>"

    given = [shown(model)] + ([] if calibration is None else [shown(calibration)])
    given += [] if output is None else [f"output={shown(output)}"]
    return f"onnxq.quantize({', '.join(given)}, ...)"


def default_output_path(model_path: str | os.PathLike) -> Path:
    path = Path(model_path)
    return path.with_name(f"{path.stem}.int8.onnx")


def quantize(
    model: ModelInput,
    calibration: DataSource | None = None,
    *,
    output: str | os.PathLike | None = None,
    config: QuantConfig | Mapping[str, Any] | None = None,
    verify_data: DataSource | None = None,
    calibration_cache: str | os.PathLike | CalibrationSummary | None = None,
    progress: Callable[[int], None] | None = None,
) -> QuantResult:
    """Quantize a float model to int8 and verify it against the float model on every ONNX Runtime provider present.

    Args:
        model: a path, an onnx.ModelProto, an onnx_ir.Model or its serialized bytes (the caller's object is never
            modified).
        calibration: .npz path, folder of .npz, dict of arrays (first axis = samples), iterable of such dicts, a
            reader whose get_next() returns them (ORT's CalibrationDataReader), or one array for a one-input model;
            or what the user has, as config.data says how to read it (onnxq.data): text (.txt, .jsonl, a folder of
            .txt), images (a folder, a glob pattern), one .npy, an .npz named otherwise (data.input_map).
            Given: static quantization. Absent: dynamic activation quantization (see QuantConfig.mode).
        output: where to write the model (atomically); None keeps it in memory only.
        config: a QuantConfig, or a dict of the config file's keys (checked alike); None, the defaults.
        verify_data: held-out inputs for verification; without it, samples are held back from the calibration data.
        calibration_cache: a CalibrationSummary, or a path: read when the file exists (no calibration pass; it
            must be this model's), else written after calibrating, with histograms, for every candidate activation.
        progress: called with the number of samples after each calibration batch.

    Returns:
        The quantized model, where it was written and the report (QuantResult.save() writes it later).

    Raises:
        OnnxqError: bad input (a model, data or setting onnxq cannot use), in one line naming the fix.
    """
    given = RunInputs(model, calibration, output, verify_data, calibration_cache, progress)
    config = QuantConfig.of(config)
    with shared_weight_quantization(), run_files(), custom_op_libraries(config.custom_op_libraries):
        state = RunState(given, config)  # every output written together at the end, or none (run_files)
        try:
            run_steps(state)
            report = dataclasses.replace(build_report(state), command=_call(model, calibration, output))
        finally:
            state.spill.close(keep=state.model)
    written = state.saved.written
    return QuantResult(model=state.model, output=written[0] if written else None, report=report,
                       inputs=tuple(state.loaded.input_files))
