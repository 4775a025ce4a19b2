"""One frozen configuration for the API, the CLI and TOML files."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from onnxq.config.checks import KNOWN_PROVIDER_ALIASES, check_providers, check_ranges
from onnxq.config.data import DataConfig
from onnxq.config.formats import FORMATS
from onnxq.config.hooks import hook_name, resolve_hook
from onnxq.config.load import build, read_toml, typed_fields
from onnxq.errors import ConfigError, did_you_mean
from onnxq.numerics.methods import RANGE_METHODS
from onnxq.targets import (DEFAULT_TARGET, activation_defaults, int8_activations_refusal, target_compute, target_names,
                           target_refusals)

__all__ = ["QScheme", "BlockConfig", "CalibrationConfig", "DataConfig", "Tolerance", "VerifyConfig", "QuantConfig",
           "PROVIDER_ALIASES"]

PROVIDER_ALIASES = KNOWN_PROVIDER_ALIASES

Mode = Literal["auto", "static", "dynamic", "weight-only"]
TaskKind = Literal["auto", "numeric", "top1", "sequence", "frames", "iou", "labels"]


@dataclasses.dataclass(frozen=True)
class QScheme:
    """An integer type and whether its range is symmetric around zero."""

    # The integer type. int4 / uint4: weights only, block-wise ([blocks]); int4 is symmetric, uint4 asymmetric.
    # int16 / uint16: activations only, for accelerators that take 16-bit activations (opset 21's QuantizeLinear).
    dtype: Literal["int8", "uint8", "int4", "uint4", "int16", "uint16"] = "int8"
    # true: the range is symmetric around zero (zero point in the type's middle); false: fitted to min and max.
    symmetric: bool = True

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def bits(self) -> int:
        return {"int4": 4, "uint4": 4, "int16": 16, "uint16": 16}.get(self.dtype, 8)


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Weight-only weights (4-bit, or int8 with mode weight-only): one scale (and zero point) per block of `size`
    values along K; activations stay float (docs/guides/int4.md)."""

    # Values per block along K (the weight's input axis): smaller blocks follow the weights closer, in a larger file.
    size: int = 32
    # matmulnbits: com.microsoft MatMulNBits (ORT's CPU and CUDA kernels). qdq: standard opset-21 DequantizeLinear
    # with block_size feeding the float MatMul (any runtime; ORT's CPU optimizer fuses it into MatMulNBits).
    format: Literal["matmulnbits", "qdq"] = "matmulnbits"
    # MatMulNBits accuracy_level: 0 unset (float compute), 1 fp32, 2 fp16, 3 bf16, 4 int8 activations per block.
    # Unset: 4 for a decoder language model on a CPU target (its decoding runs faster, and the gate verifies it as
    # deployed), 0 for any other model or target.
    accuracy_level: int | None = None
    # rtn: round to nearest with the clip search below. gptq: GPTQ (numerics.gptq), each column's rounding error
    # spread over the columns not yet quantized; needs calibration data. auto: gptq with calibration data, else rtn.
    method: Literal["auto", "rtn", "gptq"] = "auto"
    # GPTQ: columns in order of decreasing activation energy, block scales fixed beforehand (numerics.gptq): a lower
    # perplexity on the language models measured (docs/methods/accuracy.md).
    act_order: bool = True
    # Per-block clip search (numerics.blockwise): "mse" least weight reconstruction error; "activation" the same
    # weighted by each input channel's mean square on calibration data (needs data); "none" plain min/max.
    clip: Literal["none", "mse", "activation"] = "mse"
    # Nodes (MatMul / Gemm / Gather names) whose weights take 8-bit blocks instead of 4 (MatMulNBits bits 8,
    # GatherBlockQuantized bits 8; symmetric int8 with int4 and uint4 alike): mixed precision's middle tier. The
    # fallback (verify.fallback) fills it from the sensitivity ranking before keeping anything float.
    int8_nodes: tuple[str, ...] = ()
    # 4-bit weights: the bits of the weights over a language model's vocabulary — its token table and its lm_head,
    # one table when they are tied. Unset: 8 for a decoder language model (the sensitivity ranks those two first;
    # docs/guides/int4.md), else the weights' own. 4: the smallest file.
    vocabulary_bits: int | None = None
    # How the block scales are stored in the matmulnbits form at float32 compute: "uint8", a byte a block on an
    # 8-bit grid per output channel (numerics.scale_grid: low + step × code, low and step float16) behind Cast ·
    # Mul · Add that ORT folds at load — the scales are fitted on that grid before the codes are chosen — where
    # that makes the file smaller (more than 4 blocks a channel), else as float16; "float16", two bytes a block
    # behind a Cast, wherever float16 holds a weight's scales exactly — they are rounded to its grid first
    # (numerics.blockwise), so no value changes; "float32", no Cast. Measured: docs/guides/int4.md. The qdq form
    # and float16 compute store the activations' type (DequantizeLinear's output takes its scale's).
    scale_dtype: Literal["uint8", "float16", "float32"] = "uint8"

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclasses.dataclass(frozen=True)
class CalibrationConfig:
    """How activation ranges are chosen. minmax: the observed extremes; avgminmax: the mean of per-batch
    extremes; percentile: clip (100 - percentile) / 2 % of values on each side; entropy: minimise the KL
    divergence of the quantized distribution (TensorRT's method); mse: minimise the quantization error."""

    # How each activation's range is chosen from its observed values (the methods above). percentile, the default,
    # was best or tied on the benchmark models (docs/methods/calibration.md); minmax suits a model whose rarest
    # activations matter most.
    method: str = "percentile"  # a name of numerics.methods.RANGE_METHODS
    # What adjusts the method's ranges. saturation: a tensor that a per-element chain reads before the next product
    # (a scalar affine and a hardswish, a ReLU6, a HardSigmoid) has its range clipped where that chain maps every
    # value beyond to one output (calibration.range_choice): exact, and the step shrinks. method: the method's window
    # as it is. output-error: the saturation clip, then each Conv input's window narrowed (the method's times 1 …
    # 0.3) to the one whose error costs its Convs the least output energy on 16 calibration samples
    # (calibration.error_choice). auto: the saturation clip, and the output-error windows only on the Convs a
    # failing gate points at (steps.escalate): most models pass without them, and they cost a pass over the data.
    # Measured: docs/methods/calibration.md.
    range_choice: Literal["auto", "saturation", "method", "output-error"] = "auto"
    # The percentile method: the share of values (in %) inside the range; the rest is clipped, half on each side.
    percentile: float = 99.999
    # Histogram resolution for percentile / entropy / mse (bins over the observed range, at most).
    histogram_bins: int = 8192
    # Samples per ORT run when slicing arrays (.npz, dict); an iterable's batches are used as given.
    batch_size: int = 8
    # Use only the first N samples (None: all).
    max_samples: int | None = None
    # Where the data (calibration and verification alike) holds each input's samples when not on axis 0, as the
    # model takes it: {"state": 1} for a recurrent state [2, batch, 128]. Inferred when the model names the dims.
    sample_axes: dict[str, int] = dataclasses.field(default_factory=dict)
    # Inputs given once and fed whole with every batch (a sample rate, an initial state); scalar inputs always are.
    constant_inputs: tuple[str, ...] = ()
    # Inputs the model takes without a batch axis (torchvision's detection models take one image [3, H, W]): the
    # data stacks their samples on a first axis the model lacks, and each run is fed one. Inferred from the data's
    # shapes where they say it (rank one more than the model's, the rest the model's own).
    unbatched_inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.method not in RANGE_METHODS:
            raise ConfigError(f"calibration.method {self.method!r} is not one of {list(RANGE_METHODS)}"
                              f"{did_you_mean(str(self.method), RANGE_METHODS)}")
        for name, axis in self.sample_axes.items():
            if isinstance(axis, bool) or not isinstance(axis, int) or axis < 0:
                raise ConfigError(f"calibration.sample_axes gives {name!r} {axis!r} — an axis is an integer >= 0")

    @property
    def needs_histogram(self) -> bool:
        return RANGE_METHODS[self.method].needs_histogram


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Pass/fail bars applied to every model output; a bar left unset is not applied."""

    # Mean over samples of the per-sample cosine similarity. 0.98 catches broken quantization (ORT's default QDQ
    # output of MiniLM scores 0.56-0.92) without failing healthy int8 models on per-token outputs.
    min_cosine: float | None = 0.98
    # Signal-to-quantization-noise ratio per output, in dB: the float output's power over the error's.
    min_sqnr_db: float | None = None
    # The largest absolute difference from the float model's output, over every value of every sample.
    max_abs_error: float | None = None
    # Share of argmax decisions over the last axis kept (a classifier's class, a decoder's token): cosine on logits
    # does not see a flipped argmax.
    min_argmax_agreement: float | None = None
    # Share of decisions whose float answer is among the quantized output's topk highest classes (a top-5 classifier,
    # a beam search): min_topk_agreement with topk = 1 is argmax agreement, ties counted in its favour.
    min_topk_agreement: float | None = None
    # The K of min_topk_agreement.
    topk: int = 5
    # The task metric gated for this output (verify.tasks.rules): "auto" lets the output say what it is (class scores
    # → top-1 agreement, per-step class scores → decoded-sequence agreement, a probability map → IoU, binary
    # decisions → frames kept); "numeric" keeps the numeric bars only; a kind forces it.
    task: TaskKind = "auto"
    # The share of the task's decisions (IoU for a mask) the quantized output must keep; None: the kind's default
    # (verify.tasks.rules.TASK_BARS: 0.99, sequences 0.97).
    min_task_agreement: float | None = None
    # A language model's next-token logits (task next-token): the most the quantized model's perplexity on the
    # verification data's next tokens may be, as a multiple of the float model's; None: the kind's default
    # (verify.tasks.measures.PERPLEXITY_BAR, 1.15), which replaces the numeric bars of those logits.
    max_perplexity_ratio: float | None = None
    # Where a probability map's mask (task iou) or a binary output's decisions (task frames) turn on: None is 0.5
    # for values in [0, 1] (else 0). A detector's own cut belongs here (DBNet thresholds its map at 0.3).
    task_threshold: float | None = None

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.task not in typing.get_args(TaskKind):
            raise ConfigError(f"tolerance task {self.task!r} is not one of {', '.join(typing.get_args(TaskKind))}")


@dataclasses.dataclass(frozen=True)
class VerifyConfig:
    """How the quantized model is checked against the float model: on which providers and data, against which
    tolerances, and what happens when it is out of tolerance."""

    # Verify at all; false (--no-verify) writes the model unchecked.
    enabled: bool = True
    # Applied to every output; output_tolerances replaces it for the outputs it names.
    tolerance: Tolerance = Tolerance()
    # A tolerance of its own per output name, in place of tolerance; a key it leaves out takes its default.
    output_tolerances: dict[str, Tolerance] = dataclasses.field(default_factory=dict)
    # Quantized model on CPU vs on another provider (CUDA). None: the bound two providers within tolerance of the
    # float model always meet, derived per output from its tolerance (verify.agreement: cosine 0.98 → 0.92): a
    # rounding flip of a run-time scale moves each provider as far from the other as from float, so a fixed bar
    # such as cosine 0.999 fails correct models.
    provider_agreement: Tolerance | None = None
    # "auto": CPU, plus CUDA when onnxruntime offers it, plus the target's provider where present (OpenVINO for
    # openvino-cpu). Or names: ["cpu", "cuda", "openvino"] (targets.providers), or onnxruntime's provider names.
    providers: tuple[str, ...] = ("auto",)
    # Without separate verification data, every 10th calibration sample is held back — by default at least the 381
    # that show a 0.99 bar with no change, at most half the data (data.holdout).
    holdout_every: int = 10
    # Verify on at most this many samples (in dynamic mode, which verifies on the data itself: its first ones).
    max_samples: int | None = None
    # Ask ORT which kernel ran each node, where (profiling one batch per provider): the placement report.
    check_kernels: bool = True
    # Per-layer sensitivity: quantize one node at a time on this many samples (0: only where the fallback needs a
    # ranking, on 16); about 0.9 s per node on a 135M-parameter language model for 2 samples.
    sensitivity_samples: int = 16
    # when-needed: rank only where the gate fails (the fallback and step escalate read the ranking); always: on
    # every run, for the report's list of the most sensitive nodes.
    sensitivity: Literal["when-needed", "always"] = "when-needed"
    # Above this many quantized nodes only groups are ranked (one run per group), unless fallback needs the per-node
    # ranking.
    sensitivity_max_nodes: int = 64
    # Out of tolerance: keep the most sensitive nodes float, fewest first, until within tolerance. On by default: the
    # gate judges the task (verify.tasks.rules), and a user who did not ask would otherwise ship a model that changes
    # its answers. Off: only gate (the exit code fails the build).
    fallback: bool = True
    # After the fallback's bisection, try at most this many of its float nodes quantized again, costliest first,
    # each kept quantized where the tolerance still holds on all inputs (search.reclaim): the one-node-at-a-time
    # ranking puts nodes in the float prefix that the rest do not need float. 0: off. Each try is one build and one
    # check on all verification inputs.
    fallback_reclaim: int = 64
    # Time float against quantized on the CPU (one verification batch, interleaved rounds) and say when the
    # quantized model is not faster: users of other quantizers find that out after deploying. On by default: it
    # costs 14 runs of one batch. A model over 1 GB of weights (steps.check_speed.SPEED_MAX_BYTES) is timed only
    # with check_speed (two deployed sessions at once would raise the run's peak memory). A report, not a decision.
    measure_speed: bool = True
    # Keep float each kind of node that runs slower quantized on this CPU (measured, search.speed), then time float
    # vs quantized on every provider. Off by default: the model would depend on a noisy measurement.
    check_speed: bool = False
    # When the default timing finds the quantized model not faster than float on the target's provider here (and
    # this CPU is one the target covers), run that search anyway: the defaults never ship a model measured slower
    # (depthwise QLinearConv runs slower than float on some CPUs: docs/guides/cnns.md). False: only say.
    never_slower: bool = True
    # The user's own evaluation, "module:function", "file.py:function" or (from Python) the function: called on each
    # verification batch's outputs ({name: array}, read-only), it returns the batch's score (a float, higher is
    # better; averaged over batches by their samples) or one decision per sample (strings, labels: compared with the
    # float model's, the score is the share kept). The gate, sensitivity and fallback use it besides the tolerances.
    task_metric: str | Callable[..., Any] | None = None
    # Pass when the quantized score is at most this far below the float model's (decisions: this share may change).
    task_max_drop: float = 0.01

    def __post_init__(self) -> None:
        check_ranges(self)
        check_providers(self.providers)
        if self.task_metric is not None:
            if not isinstance(self.task_metric, str) and not callable(self.task_metric):
                raise ConfigError(f"verify.task_metric must be \"module:function\" or a function, got "
                                  f"{type(self.task_metric).__name__}")
            resolve_hook(self.task_metric, "verify.task_metric")  # a missing module fails here, before any work

    def tolerance_for(self, output: str) -> Tolerance:
        return self.output_tolerances.get(output, self.tolerance)


@dataclasses.dataclass(frozen=True)
class QuantConfig:
    """What to quantize and how: the top-level keys of a config file, its tables ([calibration], [verify], [blocks],
    [data]) as fields."""

    # static: activation ranges calibrated (needs data); dynamic: activations quantized at run time (no data);
    # weight-only: only constant weights, in blocks ([blocks]), activations float — with int8 weights, 8-bit blocks
    # (MatMulNBits bits 8); auto: static with calibration data, else dynamic, and weight-only for 4-bit weights or
    # a target without int8 activations (cuda).
    mode: Mode = "auto"
    # A registered output format (config.formats): qdq, QuantizeLinear/DequantizeLinear around float ops (any
    # runtime; ORT fuses them on CPU); qoperator, the integer operators themselves (MatMulIntegerToFloat, QGemm),
    # lowered from QDQ (passes/lower_qoperator.py); qlinear, ONNX-standard integer operators only (QLinearMatMul,
    # QLinearConv).
    format: str = "qdq"
    # The machines the model must run correctly on (onnxq.targets). "portable" (default): every CPU ORT runs on —
    # the model usually runs elsewhere than where it was made; on VNNI / ARM it costs nothing measurable
    # (docs/guides/cpu-fleets.md). "auto": this machine's CPU. x86-vnni / arm64: U8S8 full range; x86-avx2: no int16
    # saturation. cuda: NVIDIA GPUs (weight-only MatMulNBits blocks, float16 compute; int8 activations run slower
    # than float on the CUDA provider); cpu+cuda: one file for both (weight-only, float32 compute). See
    # docs/guides/gpus.md. openvino-cpu: Intel CPUs through onnxruntime-openvino (int8 QDQ, symmetric weights;
    # docs/guides/openvino.md).
    target: str = DEFAULT_TARGET
    # The activations' integer type: uint8, as ORT's CPU kernels are U8S8 (measured faster than S8S8 on x86,
    # docs/guides/cpu-fleets.md); int8 makes them symmetric. A target whose kernels take other types sets its own
    # where this is left at its default (targets: activation_types).
    activations: QScheme = QScheme("uint8", symmetric=False)
    # per-tensor: one activation scale per tensor (calibrated, or at run time in dynamic mode). per-token: one
    # symmetric scale per row ([tokens, channels]), computed at run time (numerics.per_token), for every
    # activation × weight product; language models need it (docs/guides/language-models.md). auto: per-token, with
    # SmoothQuant's α search where smooth is off and there is calibration data, for a model recognized as a
    # decoder language model (steps.language_model); per-tensor for any other.
    activation_granularity: Literal["auto", "per-tensor", "per-token"] = "auto"
    # Nodes whose activation is per token whatever activation_granularity says (what recipe auto chose).
    per_token_nodes: tuple[str, ...] = ()
    # SmoothQuant before quantizing (needs calibration data): "off" (a decoder language model with calibration data
    # and activation_granularity auto gets the α search all the same); a number α in [0, 1] for every smoothable
    # activation; "auto": per activation the α of a grid (or none) with the least quantized output error. With
    # weight-only blocks (4-bit) the same setting is AWQ's activation-aware scaling (onnxq.smoothing.awq).
    smooth: float | Literal["off", "auto"] = "off"
    # auto: per group of layers reading one activation, static per-tensor where the tolerance allows it, else
    # per-token with smoothing (α searched), else float (onnxq.search.recipe); needs calibration data.
    recipe: Literal["manual", "auto"] = "manual"
    # The weights' integer type: int8 per channel, or int4 / uint4 for 4-bit weight-only blocks (docs/guides/int4.md).
    weights: QScheme = QScheme("int8", symmetric=True)
    # How static Conv weights round on their per-channel int8 grid (the scales are the same either way): "gptq",
    # each column's rounding error spread over the rest through the inverse of its activations' XᵀX on the
    # calibration data (numerics.gptq.gptq_channelwise: learned rounding); "nearest"; "auto": nearest, and GPTQ on
    # the Convs a failing gate points at (steps.escalate) — its XᵀX pass is most of a CNN's quantization time.
    # Measured: docs/methods/accuracy.md.
    weight_rounding: Literal["auto", "gptq", "nearest"] = "auto"
    # Weight-only blocks: 4-bit weights, or int8 weights in mode weight-only.
    blocks: BlockConfig = BlockConfig()
    # A weight scale per output channel; false (--per-tensor): one per weight tensor.
    per_channel: bool = True
    # The operator types onnxq quantizes; a node of any other type stays float, listed in the report with why.
    op_types: tuple[str, ...] = ("MatMul", "Gemm", "Gather", "Conv", "LSTM", "ConvTranspose", "GRU", "RNN",
                                 "Attention", "EmbedLayerNormalization")
    # MatMul whose inputs are both activations (attention's Q·Kᵀ and scores·V): left float by default.
    quantize_activation_matmul: bool = False
    # A token table tied to an lm_head (its weight holds the table transposed) stored once: the Gather reads the
    # lm_head's int8 codes, divided by its SmoothQuant scales (passes.forms.tied_table), or its 4/8-bit blocks
    # (passes.forms.blockwise). False: each its own form, a larger file (docs/guides/language-models.md).
    tie_tables: bool = True
    # Conv in dynamic mode as ConvInteger. Off by default: ORT's ConvInteger runs several times slower than float
    # Conv (docs/guides/cnns.md); static mode's QLinearConv is the fast path.
    dynamic_conv: bool = False
    # A quantized Gemm's bias: int32 (scaled by the input's and the weight's scales), or float, added after.
    gemm_bias: Literal["int32", "float"] = "int32"
    # Nodes kept float, by name (as the report names them).
    exclude_nodes: tuple[str, ...] = ()
    # Operator types kept float (e.g. ["Conv"]).
    exclude_op_types: tuple[str, ...] = ()
    # Nodes kept float whose name this regular expression matches (anywhere in the name).
    exclude_regex: str | None = None
    # How activation ranges are chosen from the calibration data.
    calibration: CalibrationConfig = CalibrationConfig()
    # How the quantized model is checked against the float model.
    verify: VerifyConfig = VerifyConfig()
    # What the data is when it is text or images, and which array feeds which input (config.data, onnxq.data).
    data: DataConfig = DataConfig()
    # The float arithmetic of what stays float: float16 halves CUDA's memory traffic and runs its products on
    # tensor cores (passes.float16.compute: float32 kept where float16 cannot hold the values); auto: the target's
    # (float16 for cuda, float32 for CPUs). float16 pairs with weight-only blocks.
    compute: Literal["auto", "float32", "float16"] = "auto"
    # Shared libraries of custom operators that every ONNX Runtime session of the run registers (io.custom_ops):
    # a path, or an installed package with get_library_path() — onnxruntime_extensions for onnxruntime-extensions'
    # operators. The nodes they define stay float; without their library a model that has them is refused.
    custom_op_libraries: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ConfigError(f"unknown format {self.format!r}; use one of {', '.join(FORMATS)}")
        if self.target not in target_names():
            raise ConfigError(f"unknown target {self.target!r}; use one of {', '.join(target_names())}")
        if isinstance(self.smooth, str) and self.smooth not in ("off", "auto") or \
                not isinstance(self.smooth, str) and not 0.0 <= self.smooth <= 1.0:
            raise ConfigError(f"smooth = {self.smooth!r}: use off, auto or a number α in [0, 1] (e.g. 0.5)")
        self._apply_target_forms()
        self._check_target()
        self._check_sixteen_bits()
        if self.recipe == "auto" and self.activation_granularity == "per-token":
            raise ConfigError("recipe auto chooses per-tensor or per-token activations for each group of layers "
                              "itself, from an all-static model — drop --activations per-token, or --recipe auto")
        if self.weights.dtype == "uint8":
            raise ConfigError("weights.dtype uint8 is not supported: use int8 (ORT's integer kernels take int8 "
                              "weights), or int4 / uint4 for 4-bit weights")
        if self.weight_only and FORMATS[self.format].refuses_weight_only:
            raise ConfigError(f"format {self.format} with weight-only {self.weights.dtype} weights: "
                              f"{FORMATS[self.format].refuses_weight_only}")
        if self.weight_only:
            self._check_weight_only()
        elif self.blocks != BlockConfig():
            changed = [f.name for f in dataclasses.fields(BlockConfig)
                       if getattr(self.blocks, f.name) != getattr(BlockConfig(), f.name)]
            raise ConfigError(f"blocks settings ({', '.join(changed)}) apply to weight-only models; weights "
                              f"{self.weights.dtype} in mode {self.mode} quantize activations too — use --weights "
                              "int4 / uint4, or mode weight-only for 8-bit blocks")
        if self.exclude_regex is not None:
            try:
                re.compile(self.exclude_regex)
            except re.error as e:
                raise ConfigError(f"exclude_regex {self.exclude_regex!r} is not a valid regex: {e}") from None

    def _apply_target_forms(self) -> None:
        """The target's activation types where the config left its default (a frozen field set once, here); a
        config that asks for activations or weights the target's kernels do not take is refused."""
        preferred = activation_defaults(self.target)
        if preferred is not None and self.activations == QScheme("uint8", symmetric=False):
            object.__setattr__(self, "activations", QScheme(preferred[0], symmetric=preferred[1]))
        refusals = target_refusals(self.target, (self.activations.dtype, self.activations.symmetric),
                                   self.weights.symmetric)
        if refusals:
            raise ConfigError(f"{'; '.join(refusals)} — drop the activations / weights settings to take the "
                              f"target's, or use another --target")

    def _check_sixteen_bits(self) -> None:
        """16-bit integers are activations' (accelerators'), in QDQ form, calibrated."""
        if self.weights.bits == 16:
            raise ConfigError(f"weights {self.weights.dtype}: 16-bit types are for activations — use int8, int4 or "
                              "uint4 weights")
        if self.activations.bits not in (8, 16):
            raise ConfigError(f"activations {self.activations.dtype}: use uint8, int8, uint16 or int16")
        if self.activations.bits == 16 and (self.mode == "dynamic" or self.format != "qdq"):
            raise ConfigError(f"activations {self.activations.dtype} are calibrated QDQ (opset 21's QuantizeLinear): "
                              f"mode {self.mode} with format {self.format} cannot make them — use mode static or "
                              "auto with calibration data, and format qdq")

    def _check_target(self) -> None:
        """What the target runs well: a target without int8 activations (cuda) refuses the modes that make them."""
        refusal = int8_activations_refusal(self.target)
        asks = ("mode " + self.mode if self.mode in ("static", "dynamic") else
                "per-token activations" if self.activation_granularity == "per-token" else
                "smoothing" if self.smooth != "off" else "recipe auto" if self.recipe != "manual" else None)
        if refusal and asks:
            raise ConfigError(f"target {self.target} with {asks}: {refusal} — leave mode at auto (weight-only "
                              "MatMulNBits blocks, --weights int4 for the smallest file), or use --target portable "
                              "for an int8 CPU model")
        if self.compute_dtype == "float16" and not self.weight_only:
            raise ConfigError("compute float16 pairs with weight-only blocks (the CUDA form): int8 activations "
                              "compute in float32 on ORT's CPU kernels — use --target cuda, or compute float32")

    def _check_weight_only(self) -> None:
        dtype, blocks = self.weights.dtype, self.blocks
        if self.weights.bits == 4 and self.weights.symmetric != (dtype == "int4"):
            raise ConfigError(f"weights {dtype} with symmetric = {self.weights.symmetric}: int4 is symmetric (zero "
                              "point 8), uint4 asymmetric (a zero point per block) — pick the dtype that says so")
        if self.weights.bits == 8 and not self.weights.symmetric:
            raise ConfigError("weight-only int8 weights are symmetric (zero point 128 in MatMulNBits): drop "
                              "symmetric = false, or use uint4 for zero points per block")
        if blocks.vocabulary_bits is not None and self.weights.bits == 8:
            raise ConfigError("blocks.vocabulary_bits chooses the token table's and lm_head's bits among 4-bit "
                              "weights; with int8 weights they are 8-bit already — drop it, or use int4 / uint4")
        if blocks.int8_nodes and self.weights.bits == 8:
            raise ConfigError("blocks.int8_nodes is the 8-bit tier of 4-bit weights; with int8 weights every "
                              "weight is 8-bit already — drop it, or use int4 / uint4")
        if not self.per_channel:
            raise ConfigError(f"per_channel = false (--per-tensor) with weight-only {dtype} weights: they take a "
                              "scale per block of blocks.size inputs of each output channel, never one per tensor "
                              "— drop it, or use int8 weights in mode auto for per-tensor scales")
        if self.mode not in ("auto", "weight-only"):
            raise ConfigError(f"mode {self.mode} with {dtype} weights: 4-bit weights are weight-only (activations "
                              "stay float); leave mode at auto")
        if self.activation_granularity == "per-token" or self.recipe != "manual":
            raise ConfigError(f"weight-only {dtype} weights: per-token activations and recipe auto quantize "
                              "activations — drop them, or use int8 weights in mode auto")

    @property
    def weight_only(self) -> bool:
        """Only constant weights are quantized (block-wise), activations stay float: 4-bit weights, mode
        weight-only, or mode auto for a target without int8 activations (cuda)."""
        return self.weights.bits == 4 or self.mode == "weight-only" or (
            self.mode == "auto" and bool(int8_activations_refusal(self.target)))

    @property
    def compute_dtype(self) -> str:
        """The float arithmetic the model is written in: compute, or the target's when auto."""
        return target_compute(self.target) if self.compute == "auto" else self.compute

    def exclusion_reason(self, node_name: str, op_type: str) -> str | None:
        """Why the user's config keeps this node in float, or None."""
        if node_name in self.exclude_nodes:
            return "excluded by name"
        if op_type in self.exclude_op_types:
            return f"op type {op_type} excluded"
        if self.exclude_regex is not None and re.search(self.exclude_regex, node_name):
            return f"name matches exclude_regex {self.exclude_regex!r}"
        return None

    def replace(self, **changes: Any) -> QuantConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QuantConfig:
        return build(cls, data, "")

    @classmethod
    def of(cls, given: QuantConfig | Mapping[str, Any] | None) -> QuantConfig:
        """What an API function's config argument gives: the defaults for None, a mapping read as the TOML file's
        keys (checked alike)."""
        if given is None:
            return cls()
        if isinstance(given, Mapping):
            return cls.from_dict(given)
        if not isinstance(given, cls):
            raise ConfigError(f"config is a {type(given).__name__}: pass an onnxq.QuantConfig or a dict of the "
                              "config file's keys (e.g. {\"mode\": \"static\"})")
        return given

    @classmethod
    def from_toml(cls, path: str | Path) -> QuantConfig:
        return cls.from_dict(read_toml(path))

    @classmethod
    def file_fields(cls, path: str | Path | None) -> dict[str, Any]:
        """Every field's value as the TOML file sets it, else its default: each section built and checked on its
        own, the whole not yet. The command line's flags are applied to these, then the config is made once
        (QuantConfig(**fields)), so that the checks across fields see what will run: a file's [blocks] with
        --weights int4 is a weight-only config, not a refusal of the file's int8 default."""
        given = typed_fields(cls, read_toml(path), "") if path else {}
        defaults = cls()
        return {f.name: given.get(f.name, getattr(defaults, f.name)) for f in dataclasses.fields(cls)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: a task metric given as a function is written as its module:name."""
        data = dataclasses.asdict(self)
        if self.verify.task_metric is not None:
            data["verify"]["task_metric"] = hook_name(self.verify.task_metric)
        return data
