"""The records a quantize() run's steps make, one per step module, each frozen: a step sets its own record (a new
one, dataclasses.replace of its own), never another step's. The models inside are onnx_ir graphs, which smooth and
rewrite change in place; the records say which graph is which."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx
import onnx_ir as ir

from onnxq.calibration import CalibrationSummary
from onnxq.calibration.moment_sums import StoredMoments
from onnxq.calibration.moments import WeightMoments
from onnxq.config import QuantConfig
from onnxq.data.batching import Batches
from onnxq.data.specs import DataSource, InputSpec
from onnxq.data.stream import DataStream
from onnxq.handlers import NodePlan, Skip
from onnxq.report.record import Section, SmoothedActivation
from onnxq.search.build import Overrides
from onnxq.verify import Reference, Verification

__all__ = ["ModelInput", "RunInputs", "Loaded", "Resolved", "Planned", "Smoothed", "Calibrated", "Quantized",
           "Verified", "Saved", "RECORDS"]

ModelInput = str | os.PathLike | onnx.ModelProto | ir.Model | bytes


@dataclasses.dataclass(frozen=True)
class RunInputs:
    """What the caller passed to quantize()."""

    model: ModelInput
    calibration: DataSource | None
    output: str | os.PathLike | None
    verify_data: DataSource | None
    cache: str | os.PathLike | CalibrationSummary | None
    progress: Callable[[int], None] | None


@dataclasses.dataclass(frozen=True)
class Loaded:
    """Step load: the model loaded, prepared and checked, and the data as the pipeline reads it."""

    given: RunInputs | None = None  # the caller's inputs, the data read through onnxq.data (text, images, maps)
    # The float model as loaded and prepared (opset converted when too old, BatchNormalization folded into Conv);
    # never rewritten.
    reference: ir.Model | None = None
    unconverted: ir.Model | None = None  # the model as given, when preparing changed it: the float reference
    given_runs: bool = True  # onnxruntime runs the model as given (not below its opsets): a file to write as it is
    # The verification data is the calibration data (one file read through the same arrays): its figures flatter.
    verifies_on_calibration_data: bool = False
    # The graph quantized: a clone of the reference that smooth scales and rewrite quantizes, in place.
    work: ir.Model | None = None
    input_path: Path | None = None
    input_files: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Step resolve: the configuration as the run applies it (the caller's until resolved), its mode, the inputs'
    layout, the calibration cache's second moments of 4-bit weights (read when the config fits weights to data)."""

    config: QuantConfig
    mode: str = ""
    specs: Sequence[InputSpec] = ()
    cached_moments: StoredMoments | None = None
    # Settings the run chose where the caller's config left them open (config keys: "accuracy_level"), which a
    # search may measure and choose again.
    defaulted: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class Planned:
    """Steps plan and replan: every node's plan, the calibration stream, the verification inputs known before
    calibrating."""

    plans: Sequence[NodePlan] = ()
    skips: Sequence[Skip] = ()
    eight_bit: frozenset[str] = frozenset()  # 4-bit weights: the nodes at 8 bits, by config
    # The inputs' layout the data is read with (resolve's, or the one synthetic inputs imply).
    specs: Sequence[InputSpec] = ()
    # The calibration data as every pass sees it (holding back verification samples when it must).
    stream: DataStream | None = None
    # Verification inputs known before calibrating (given data, synthetic); else held back while calibrating.
    upfront_inputs: tuple[Batches, str] | None = None
    # Inputs the verification data leaves out, made by onnxq (data.completion) as it is read: name → how. The
    # calibration stream keeps its own (stream.made).
    made_inputs: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Smoothed:
    """Step smooth: SmoothQuant as the user set it — the smoothed float graph (None: not smoothed) and what was
    smoothed."""

    model: ir.Model | None = None
    activations: tuple[SmoothedActivation, ...] = ()


@dataclasses.dataclass(frozen=True)
class Calibrated:
    """Step calibrate: what the rewrite needs from the data."""

    ranges: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    calibration_samples: int = 0
    calibration: CalibrationSummary | None = None  # what the ranges came from (not after smoothing)
    range_choices: tuple = ()  # calibration.range_choice.RangeChoice: ranges narrowed where their reader saturates
    moments: WeightMoments | None = None


@dataclasses.dataclass(frozen=True)
class Quantized:
    """Step rewrite, then each search's choice (RunState.adopt): the run's quantized model and how it was made."""

    work: ir.Model | None = None
    quantized_from: ir.Model | None = None  # the float graph the quantization starts from (smoothed, when asked)
    plans: Sequence[NodePlan] = ()
    skips: Sequence[Skip] = ()
    eight_bit: frozenset[str] = frozenset()  # 4-bit weights: the nodes at 8 bits (the fallback's middle tier too)
    bias_notes: dict[str, str] = dataclasses.field(default_factory=dict)
    overrides: Overrides = Overrides()  # what the searches decided (recipe auto's per-token nodes)
    # Why a search kept a node float, for the report (the planner sees its float nodes as excluded by name).
    float_reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    smoothing: tuple[SmoothedActivation, ...] = ()
    precision: Section | None = None  # float16 compute's section (passes.float16)


@dataclasses.dataclass(frozen=True)
class Verified:
    """Step verify, then each search's choice (RunState.adopt): the verification inputs, the float model's outputs
    on them (computed once) and the run's model's verification."""

    batches: Batches | None = None
    label: str = ""  # where the verification inputs came from, in words
    specs: Sequence[InputSpec] = ()  # the inputs' layout the verification batches have
    float_outputs: Reference | None = None
    verification: Verification | None = None


@dataclasses.dataclass(frozen=True)
class Saved:
    """Step save: the model the run returns (the float model as given where every node stayed float) and the files
    written."""

    model: ir.Model | None = None
    written: Sequence[Path] = ()


# RunState's record fields → their record types.
RECORDS = {"loaded": Loaded, "resolved": Resolved, "planned": Planned, "smoothed": Smoothed,
           "calibrated": Calibrated, "quantized": Quantized, "verified": Verified, "saved": Saved}
