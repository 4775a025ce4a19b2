"""Step resolve: the configuration as this run applies it, resolved once and in one place — the mode (static where
there is data or a cache, else dynamic), 4-bit weights' block method (GPTQ with data, or with a cache holding its
moments), a language model's defaults (steps.language_model), and the layout the data's shapes imply for inputs
the model and the user leave open (data.axes, data.unbatched). Every later step reads state.resolved (its config,
mode and input specs) and never writes it; the report shows this config as the run's effective one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from onnxq.calibration import CalibrationSummary
from onnxq.calibration.moment_sums import StoredMoments
from onnxq.config import QuantConfig
from onnxq.data.axes import InferredLayout, read_layout
from onnxq.data.specs import DataSource, input_specs
from onnxq.errors import ConfigError
from onnxq.ranges import cached_moments
from onnxq.steps.language_model import language_model_defaults
from onnxq.steps.records import Resolved
from onnxq.steps.state import RunState

__all__ = ["resolve", "resolved_mode", "layout_notes"]


def resolve(state: RunState) -> bool:
    given = state.loaded.given
    mode = resolved_mode(state.resolved.config, given.calibration, given.cache)
    config, stored = state.resolved.config, None
    if mode == "weight-only":
        stored = cached_moments(given.cache, state.loaded.reference)
        config = _with_block_method(config, given.calibration, stored, state)
    open_level = config.blocks.accuracy_level is None
    config, note = language_model_defaults(state.loaded.reference, config, mode, given.calibration is not None)
    layout, inferred = read_layout(state.loaded.work, config.calibration, (given.calibration, given.verify_data))
    specs = input_specs(state.loaded.work, layout.sample_axes, layout.constant_inputs, layout.unbatched_inputs)
    defaulted = frozenset({"accuracy_level"} if open_level and config.blocks.accuracy_level else ())
    state.resolved = Resolved(config.replace(calibration=layout), mode, specs, stored, defaulted)
    state.notes.extend(([] if note is None else [note]) + layout_notes(inferred))
    return True


def resolved_mode(config: QuantConfig, calibration: DataSource | None, cache) -> str:
    if config.weight_only:
        return "weight-only"
    has_ranges = calibration is not None or isinstance(cache, CalibrationSummary) or (
        cache is not None and Path(cache).is_file())
    if config.mode == "auto":
        return "static" if has_ranges else "dynamic"
    if config.mode == "static" and not has_ranges:
        raise ConfigError("static mode needs calibration data — pass --calib DATA (or an existing --calib-cache), "
                          "or use --mode dynamic")
    return config.mode


def _with_block_method(config: QuantConfig, calibration: DataSource | None, stored: StoredMoments | None,
                       state: RunState) -> QuantConfig:
    """blocks.method auto: GPTQ where there is data, or a calibration cache holding its XᵀX moments."""
    blocks = config.blocks
    fitted = calibration is not None or stored is not None and stored.full
    if blocks.method == "auto":
        blocks = dataclasses.replace(blocks, method="gptq" if fitted else "rtn")
        if stored is None and state.loaded.given.cache is not None and calibration is None:
            state.notes.append("weights: rounded to nearest — the calibration cache holds no second moments "
                               "(onnxq calibrate --weights int4 keeps them)")
    needs = "blocks.method = gptq" if blocks.method == "gptq" else (
        "blocks.clip = activation" if blocks.clip == "activation" else None)
    if needs and calibration is None and stored is None:
        raise ConfigError(f"{needs} fits the weights to their activations, so it needs calibration data: pass "
                          "--calib DATA (or a --calib-cache that onnxq calibrate wrote with this config), or use "
                          "blocks.method = rtn with blocks.clip = mse")
    return config.replace(blocks=blocks)


def layout_notes(inferred: InferredLayout) -> list[str]:
    """The layout read off the data, in words: each inference is said, with the flag that overrides it."""
    notes = []
    if inferred.unbatched:
        notes.append(f"inputs without a batch axis, fed one sample per run: {', '.join(inferred.unbatched)} (the "
                     "data stacks samples of the model's whole input on a first axis of its own)")
    if inferred.once:
        notes.append(f"inputs given once, held constant with every batch: {', '.join(inferred.once)} (their data is "
                     "the whole shape the model fixes; --sample-axis to read samples from them)")
    if inferred.axes:
        said = ", ".join(f"{name}={axis}" for name, axis in inferred.axes.items())
        notes.append(f"sample axes inferred from the data's lengths: {said} (the only axis holding the other "
                     "inputs' sample count; --sample-axis to set another)")
    return notes
