"""What one quantize() run was given and what its steps have made so far: one value the steps read and fill."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import onnx
import onnx_ir as ir

from onnxq.calibration import CalibrationSummary

from onnxq.data.batching import Batches

from onnxq.data.specs import DataSource, InputSpec
from onnxq.calibration.moment_sums import StoredMoments
from onnxq.calibration.moments import WeightMoments
from onnxq.data.stream import DataStream
from onnxq.config import QuantConfig
from onnxq.handlers import NodePlan, Skip
from onnxq.io import SpillFile
from onnxq.report.record import Section, SmoothedActivation
from onnxq.search.build import Builder, Built, Overrides, Statistics
from onnxq.search.probing import CandidateCheck
from onnxq.targets import covered_targets
from onnxq.verify import Reference, Verification, quantized_nodes, verify_models

__all__ = ["RunInputs", "RunState", "ModelInput"]

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


@dataclasses.dataclass(eq=False)
class RunState:
    given: RunInputs
    config: QuantConfig
    mode: str = ""
    # The float model as loaded and prepared (opset converted when too old, BatchNormalization folded into Conv);
    # never rewritten.
    reference: ir.Model | None = None
    unconverted: ir.Model | None = None  # the model as given, when preparing changed it: the float reference
    given_runs: bool = True  # onnxruntime runs the model as given (not below its opsets): a file to write as it is
    # The verification data is the calibration data (one file read through the same arrays): its figures flatter.
    verifies_on_calibration_data: bool = False
    work: ir.Model | None = None  # the model being quantized: smoothed, then rewritten
    quantized_from: ir.Model | None = None  # the float graph the quantization starts from (smoothed, when asked)
    input_path: Path | None = None
    input_files: list[Path] = dataclasses.field(default_factory=list)
    plans: list[NodePlan] = dataclasses.field(default_factory=list)
    skips: list[Skip] = dataclasses.field(default_factory=list)
    specs: list[InputSpec] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    # The calibration data as every pass sees it (holding back verification samples when it must).
    stream: DataStream | None = None
    # Verification inputs known before calibrating (given data, synthetic); else held back while calibrating.
    upfront_inputs: tuple[Batches, str] | None = None
    # Inputs the verification data leaves out, made by onnxq (data.completion): name → how. The calibration
    # stream keeps its own (stream.made).
    made_inputs: dict[str, str] = dataclasses.field(default_factory=dict)
    batches: Batches | None = None
    label: str = ""  # where the verification inputs came from, in words
    float_outputs: Reference | None = None
    smoothing: tuple[SmoothedActivation, ...] = ()
    ranges: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    calibration_samples: int = 0
    calibration: CalibrationSummary | None = None  # what the ranges came from (not after smoothing)
    range_choices: tuple = ()  # calibration.range_choice.RangeChoice: ranges narrowed where their reader saturates
    moments: WeightMoments | None = None
    # The calibration cache's second moments of 4-bit weights (read when the config fits weights to data).
    cached_moments: StoredMoments | None = None
    magnitudes: dict[str, float] | None = None  # float16 compute: max |x| per float value on the data
    bias_notes: dict[str, str] = dataclasses.field(default_factory=dict)
    verification: Verification | None = None
    sensitivity: object | None = None  # onnxq.search.sensitivity.Sensitivity
    fallback: object | None = None  # onnxq.search.fallback.FallbackResult
    recipe: object | None = None  # onnxq.search.recipe.RecipeResult
    sections: list[Section] = dataclasses.field(default_factory=list)  # a new step's own report sections
    speed: tuple = ()
    eight_bit: set[str] = dataclasses.field(default_factory=set)  # 4-bit weights: the nodes at 8 bits
    overrides: Overrides = Overrides()  # what the searches decided (recipe auto's per-token nodes)
    # Why a search kept a node float, for the report (the planner sees its float nodes as excluded by name).
    float_reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    gate_failures: list[str] = dataclasses.field(default_factory=list)
    written: list[Path] = dataclasses.field(default_factory=list)
    # Float weights only this process held (smoothed, folded, given in memory), moved to a temporary file.
    spill: SpillFile = dataclasses.field(default_factory=SpillFile)

    @property
    def as_given(self) -> ir.Model:
        """The float model as the user gave it (loaded, its names made unique): what the quantized one is compared
        with, in accuracy and in speed."""
        return self.reference if self.unconverted is None else self.unconverted

    def this_cpu_is_target(self) -> bool | None:
        """Whether this CPU is one the target covers, by the verification's coverage (None: not verified): only
        then do its kernels' timings and arithmetic say anything of the target's."""
        coverage = None if self.verification is None else self.verification.coverage
        return None if coverage is None else coverage.platform["cpu_target"] in covered_targets(self.config.target)

    def quantized_nodes(self) -> dict[str, str]:
        """The run's model's quantized nodes (name → op type) for the placement: verify.quantized_nodes' structural
        rule, less the nodes the run keeps float. A float node between quantized ones reads its neighbour's
        requantized output through a DequantizeLinear, which that rule (made for other tools' models, in python -m
        onnxq verify) counts as a quantized node that ORT did not fuse."""
        kept = {skip.node.name for skip in self.skips} | set(self.overrides.float_nodes)
        return {name: op for name, op in quantized_nodes(self.work).items() if name not in kept}

    @property
    def smoothed(self) -> bool:
        """SmoothQuant as the user set it (recipe auto smooths only the groups it switches, itself)."""
        return self.config.recipe == "manual" and self.config.smooth != "off"

    @property
    def builder(self) -> Builder:
        """How a search builds a candidate: from the float graph quantization starts from, the user's config, the
        run's statistics and the decisions made so far."""
        return Builder(self.quantized_from, self.config, self.mode,
                       Statistics(self.ranges, self.moments, self.magnitudes), self.overrides)

    def adopt(self, built: Built, verification: Verification) -> None:
        """A search's chosen model becomes the run's (verified during the search; its placement is added)."""
        self.work, self.plans, self.skips, self.bias_notes = built.model, built.plans, built.skips, \
            built.bias_notes
        self.verification = verification

    def candidate_check(self) -> CandidateCheck:
        """Verifies a search's candidates (recipe and fallback probes) on the run's verification inputs, against
        the one float reference of the run."""
        return CandidateCheck(self.float_outputs, self._verify_against)

    def _verify_against(self, model: ir.Model, reference: Reference) -> Verification:
        # A probe (part of the inputs) runs this CPU's deployed kernels only; a confirmation also checks every
        # target (the exact quantization, the emulation): a probe predicts, its confirmation decides.
        target = self.config.target if reference.whole else None
        return verify_models(reference, model, self.config.verify, self.label, target=target)
