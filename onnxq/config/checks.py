"""Every numeric setting has a stated range (docs/reference/config.md), checked when a config is made — from
the API, the command line or a TOML file alike — so that a NaN tolerance, `--min-cosine 2` or a block of 2**40
values is refused with one line instead of misbehaving later."""

from __future__ import annotations

import dataclasses
import math

from onnxq.errors import ConfigError
from onnxq.targets.providers import provider_aliases

__all__ = ["Range", "RANGES", "check_ranges", "check_providers", "setting_name", "KNOWN_PROVIDER_ALIASES", "TOPK_MAX"]

TOPK_MAX = 10  # top-k agreement is measured (verify.metrics) and gated for k = 1 … TOPK_MAX

# Every registered provider's short names (targets.providers): read when asked, so a provider registered later counts.
KNOWN_PROVIDER_ALIASES = provider_aliases()


@dataclasses.dataclass(frozen=True)
class Range:
    low: float | None
    high: float | None
    integer: bool = False
    low_open: bool = False  # low itself excluded
    power_of_two: bool = False
    flag: str = ""  # the command-line flag that sets it, for the message

    def problem(self, value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {value!r}"
        if not math.isfinite(value):
            return f"must be finite, got {value!r}"
        if self.integer and value != int(value):
            return f"must be a whole number, got {value!r}"
        low_fails = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        if low_fails or (self.high is not None and value > self.high):
            return f"= {value!r} is outside its range {self.describe()}"
        if self.power_of_two and int(value) & (int(value) - 1):
            return f"= {value!r} must be a power of two in {self.describe()}"
        return None

    def describe(self) -> str:
        low = "-∞" if self.low is None else _number(self.low)
        high = "∞" if self.high is None else _number(self.high)
        return f"{'(' if self.low_open or self.low is None else '['}{low}, {high}{')' if self.high is None else ']'}"


def _number(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


# (dataclass name, field) → its range. None values mean "off" where the field allows None and are not checked.
RANGES: dict[tuple[str, str], Range] = {
    ("CalibrationConfig", "percentile"): Range(0, 100, low_open=True, flag="--percentile"),
    # Bins over the observed range per observed tensor: 8 bytes each (65536 bins: 0.5 MB per tensor).
    ("CalibrationConfig", "histogram_bins"): Range(256, 65536, integer=True),
    ("CalibrationConfig", "batch_size"): Range(1, 65536, integer=True, flag="--calib-batch-size"),
    ("CalibrationConfig", "max_samples"): Range(1, None, integer=True, flag="--calib-samples"),
    ("Tolerance", "min_cosine"): Range(-1, 1, flag="--min-cosine, cosine="),
    ("Tolerance", "min_sqnr_db"): Range(-1000, 1000, flag="--min-sqnr, sqnr="),
    ("Tolerance", "max_abs_error"): Range(0, None, flag="--max-abs, max_abs="),
    ("Tolerance", "min_argmax_agreement"): Range(0, 1, flag="argmax="),
    ("Tolerance", "min_topk_agreement"): Range(0, 1, flag="topK="),
    ("Tolerance", "topk"): Range(1, TOPK_MAX, integer=True, flag="topK="),
    ("Tolerance", "min_task_agreement"): Range(0, 1, flag="task="),
    ("Tolerance", "max_perplexity_ratio"): Range(1, None, flag="perplexity="),
    ("Tolerance", "task_threshold"): Range(None, None, flag="threshold="),
    ("VerifyConfig", "holdout_every"): Range(2, 1_000_000, integer=True),
    ("VerifyConfig", "max_samples"): Range(1, 1_000_000, integer=True),
    ("VerifyConfig", "sensitivity_samples"): Range(0, 1_000_000, integer=True),
    ("VerifyConfig", "sensitivity_max_nodes"): Range(0, None, integer=True),
    ("VerifyConfig", "fallback_reclaim"): Range(0, None, integer=True),
    ("VerifyConfig", "task_max_drop"): Range(0, None, flag="--task-max-drop"),
    # ORT's MatMulNBits needs a power of two >= 16; past 4096 values a block is a per-column scale in all but name,
    # and its padding (up to a block per row) would cost memory for nothing.
    ("BlockConfig", "size"): Range(16, 4096, integer=True, power_of_two=True, flag="--block"),
    ("BlockConfig", "accuracy_level"): Range(0, 4, integer=True),
    ("BlockConfig", "vocabulary_bits"): Range(4, 8, integer=True, power_of_two=True, flag="--vocabulary-bits"),
    ("DataConfig", "max_length"): Range(1, 1_000_000, integer=True, flag="--max-length"),
    ("DataConfig", "window"): Range(2, 1_000_000, integer=True, flag="--window"),
    ("DataConfig", "scale"): Range(0, None, low_open=True, flag="--scale"),
}


def check_ranges(config: object) -> None:
    """Each ranged field of this dataclass instance within its range (None: the setting is off)."""
    kind = type(config).__name__
    for field in dataclasses.fields(config):
        rule = RANGES.get((kind, field.name))
        value = getattr(config, field.name)
        if rule is None or value is None:
            continue
        problem = rule.problem(value)
        if problem is not None:
            where = f" ({rule.flag})" if rule.flag else ""
            raise ConfigError(f"{setting_name(kind, field.name)}{where} {problem}")


def setting_name(kind: str, field: str) -> str:
    """How the docs and the messages name a setting: "calibration.percentile", "tolerance min_cosine"."""
    return f"{_section(kind)}{field}"


def _section(kind: str) -> str:
    return {"CalibrationConfig": "calibration.", "VerifyConfig": "verify.", "BlockConfig": "blocks.",
            "DataConfig": "data.", "Tolerance": "tolerance "}.get(kind, "")


def check_providers(providers: tuple[str, ...]) -> None:
    """Names onnxruntime knows (available here or not: a missing CUDA is skipped with a warning, a typo is not)."""
    import onnxruntime as ort

    known = set(ort.get_all_providers())
    aliases = provider_aliases()
    for name in providers:
        if name == "auto" or name.lower() in aliases or name in known:
            continue
        raise ConfigError(f"unknown execution provider {name!r}; use auto, {', '.join(aliases)} or an onnxruntime "
                          f"provider name (e.g. {', '.join(sorted(known)[:4])}, …)")
