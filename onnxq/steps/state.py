"""What one quantize() run was given and what its steps have made so far: a frozen record per step module
(steps.records), each set by its own step as a new record, the append-only logs every step adds to (notes, report
sections, timings), and the searches' one way to make a chosen model the run's (adopt)."""

from __future__ import annotations

import dataclasses
import onnx_ir as ir

from onnxq.config import QuantConfig
from onnxq.io import SpillFile
from onnxq.report.record import Section
from onnxq.search.build import Builder, Built, Statistics
from onnxq.search.probing import CandidateCheck
from onnxq.steps.records import (Calibrated, Loaded, ModelInput, Planned, Quantized, Resolved, RunInputs, Saved,
                                 Smoothed, Verified)
from onnxq.targets import covered_targets
from onnxq.verify import Reference, Verification, quantized_nodes, verify_models, with_placement
from onnxq.verify.providers import absent_providers

__all__ = ["RunInputs", "RunState", "ModelInput"]


@dataclasses.dataclass(eq=False)
class RunState:
    """given and the caller's config start the run; each record below is its step's (steps.records), set by that
    step's module alone; the plain values after them are each one search's result, set by its step alone."""

    given: RunInputs
    config: dataclasses.InitVar[QuantConfig]
    loaded: Loaded = dataclasses.field(default_factory=Loaded)
    resolved: Resolved = dataclasses.field(init=False)
    planned: Planned = dataclasses.field(default_factory=Planned)
    smoothed: Smoothed = dataclasses.field(default_factory=Smoothed)
    calibrated: Calibrated = dataclasses.field(default_factory=Calibrated)
    magnitudes: dict[str, float] | None = None  # float16 compute: max |x| per float value on the data
    quantized: Quantized = dataclasses.field(default_factory=Quantized)
    verified: Verified = dataclasses.field(default_factory=Verified)
    recipe: object | None = None  # onnxq.search.recipe.RecipeResult
    accuracy_level: object | None = None  # onnxq.search.accuracy_level.LevelChoice
    sensitivity: object | None = None  # onnxq.search.sensitivity.Sensitivity
    escalation: object | None = None  # onnxq.search.escalation.Escalation
    escalated: Statistics | None = None  # the statistics of escalation's model: what later builds start from
    gate_failures: tuple[str, ...] = ()  # what fails the run's gate besides the verification (the sensitivity's)
    fallback: object | None = None  # onnxq.search.fallback.FallbackResult
    speed: tuple = ()
    saved: Saved = dataclasses.field(default_factory=Saved)
    # The append-only logs.
    notes: list[str] = dataclasses.field(default_factory=list)
    sections: list[Section] = dataclasses.field(default_factory=list)  # a new step's own report sections
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    # Float weights only this process held (smoothed, folded, given in memory), moved to a temporary file.
    spill: SpillFile = dataclasses.field(default_factory=SpillFile)

    def __post_init__(self, config: QuantConfig) -> None:
        self.resolved = Resolved(config)  # the caller's, until step resolve resolves it

    @property
    def as_given(self) -> ir.Model:
        """The float model as the user gave it (loaded, its names made unique): what the quantized one is compared
        with, in accuracy and in speed."""
        loaded = self.loaded
        return loaded.reference if loaded.unconverted is None else loaded.unconverted

    @property
    def model(self) -> ir.Model | None:
        """The run's model as far as it went: the saved one, else the quantized one, else the graph being
        quantized."""
        models = (self.saved.model, self.quantized.work, self.loaded.work)
        return next((model for model in models if model is not None), None)

    def this_cpu_is_target(self) -> bool | None:
        """Whether this CPU is one the target covers, by the verification's coverage (None: not verified): only
        then do its kernels' timings and arithmetic say anything of the target's."""
        verification = self.verified.verification
        coverage = None if verification is None else verification.coverage
        return None if coverage is None else \
            coverage.platform["cpu_target"] in covered_targets(self.resolved.config.target)

    def quantized_nodes(self) -> dict[str, str]:
        """The run's model's quantized nodes (name → op type) for the placement: verify.quantized_nodes' structural
        rule, less the nodes the run keeps float. A float node between quantized ones reads its neighbour's
        requantized output through a DequantizeLinear, which that rule (made for other tools' models, in python -m
        onnxq verify) counts as a quantized node that ORT did not fuse."""
        quantized = self.quantized
        kept = {skip.node.name for skip in quantized.skips} | set(quantized.overrides.float_nodes)
        return {name: op for name, op in quantized_nodes(quantized.work).items() if name not in kept}

    @property
    def user_smooths(self) -> bool:
        """SmoothQuant as the user set it (recipe auto smooths only the groups it switches, itself)."""
        config = self.resolved.config
        return config.recipe == "manual" and config.smooth != "off"

    @property
    def builder(self) -> Builder:
        """How a search builds a candidate: from the float graph quantization starts from, the user's config, the
        run's statistics and the decisions made so far."""
        quantized = self.quantized
        return Builder(quantized.quantized_from, self.resolved.config, self.resolved.mode, self.statistics,
                       quantized.overrides)

    @property
    def statistics(self) -> Statistics:
        """What the run's model is built from: the statistics of the model escalation chose, else calibration's."""
        calibrated = self.calibrated
        return self.escalated or Statistics(calibrated.ranges, calibrated.moments, self.magnitudes)

    def adopt(self, built: Built, verification: Verification, **decided) -> None:
        """A search's chosen model becomes the run's, with what the search decided (Quantized's fields: overrides,
        float_reasons, ...); its verification (made during the search) gets the placement the first one has."""
        self.quantized = dataclasses.replace(self.quantized, work=built.model, plans=built.plans, skips=built.skips,
                                             bias_notes=built.bias_notes, **decided)
        self.verified = dataclasses.replace(self.verified, verification=self._placed(verification))

    def _placed(self, verification: Verification) -> Verification:
        """The verification of a model a search chose with its placement added (predicted on the absent providers
        asked for, as the first verification's)."""
        config = self.resolved.config
        if not config.verify.check_kernels:
            return verification
        return with_placement(verification, self.quantized.work, self.verified.batches.first(),
                              self.quantized_nodes(), absent_providers(config.verify.providers, config.target))

    def candidate_check(self) -> CandidateCheck:
        """Verifies a search's candidates (recipe and fallback probes) on the run's verification inputs, against
        the one float reference of the run."""
        return CandidateCheck(self.verified.float_outputs, self._verify_against)

    def _verify_against(self, model: ir.Model, reference: Reference) -> Verification:
        # A probe (part of the inputs) runs this CPU's deployed kernels only; a confirmation also checks every
        # target (the exact quantization, the emulation): a probe predicts, its confirmation decides.
        config = self.resolved.config
        target = config.target if reference.whole else None
        return verify_models(reference, model, config.verify, self.verified.label, target=target)
