"""quantize(): load → check → plan → calibrate → rewrite → verify (+ sensitivity, fallback) → save, driven by one
QuantConfig — the steps themselves are onnxq.steps, run in order over one state."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import onnx_ir as ir

from onnxq.calibration import CalibrationSummary, DataSource
from onnxq.config import QuantConfig
from onnxq.io import run_files
from onnxq.io.custom_ops import custom_op_libraries
from onnxq.passes.builder import shared_weight_quantization
from onnxq.report import QuantReport
from onnxq.steps import RunInputs, RunState, build_report, run_steps
from onnxq.steps.state import ModelInput

__all__ = ["quantize", "QuantResult", "default_output_path"]


@dataclasses.dataclass
class QuantResult:
    model: ir.Model
    output: Path | None
    report: QuantReport


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

    model: a path, an onnx.ModelProto, an onnx_ir.Model or its serialized bytes (the caller's object is never
        modified).
    calibration: .npz path, folder of .npz, dict of arrays (first axis = samples), iterable of such dicts, a
        reader whose get_next() returns them (ORT's CalibrationDataReader), or one array for a one-input model; or
        what the user has, as config.data says how to read it (onnxq.data): text (.txt, .jsonl, a folder of .txt),
        images (a folder, a glob pattern), one .npy, an .npz named otherwise (data.input_map).
        Given: static quantization. Absent: dynamic activation quantization (see QuantConfig.mode).
    output: where to write the model (atomically); None keeps it in memory only.
    config: a QuantConfig, or a dict of the config file's keys (checked alike); None, the defaults.
    verify_data: held-out inputs for verification; without it, every 10th calibration sample is held back.
    calibration_cache: a CalibrationSummary, or a path: read when the file exists (no calibration pass; it must
        be this model's), else written after calibrating, with histograms, for every candidate activation.
    progress: called with the number of samples after each calibration batch.
    """
    given = RunInputs(model, calibration, output, verify_data, calibration_cache, progress)
    config = QuantConfig.of(config)
    with shared_weight_quantization(), run_files(), custom_op_libraries(config.custom_op_libraries):
        state = RunState(given, config)  # every output written together at the end, or none (run_files)
        try:
            run_steps(state)
            report = build_report(state)
        finally:
            state.spill.close(keep=state.work)
    return QuantResult(model=state.work, output=state.written[0] if state.written else None, report=report)
