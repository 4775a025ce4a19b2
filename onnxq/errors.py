"""Errors a user can cause. Each message names the problem and the fix in one line."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable

__all__ = [
    "OnnxqError",
    "ModelLoadError",
    "UnsupportedModelError",
    "CalibrationDataError",
    "ConfigError",
    "OutputPathError",
    "InputChangedError",
    "one_line",
    "ort_reason",
    "whole_message",
    "closest",
    "did_you_mean",
]


class OnnxqError(Exception):
    """Base class for user-facing errors; the CLI prints the message and exits 2."""


class ModelLoadError(OnnxqError):
    """The model file is missing, not ONNX, or truncated."""


class UnsupportedModelError(OnnxqError):
    """The model loads but cannot be quantized (opset too old, nothing to quantize, ...)."""


class CalibrationDataError(OnnxqError):
    """Calibration or verification data does not fit the model's inputs."""


class ConfigError(OnnxqError):
    """A configuration value or file is invalid."""


class OutputPathError(OnnxqError):
    """The output path is unusable (it is the input, or its folder does not exist)."""


class InputChangedError(OnnxqError):
    """A file the run reads was changed, truncated or replaced while it ran."""


# Where in its C++ sources ONNX Runtime raised ("/onnxruntime_src/…/model_load_utils.h:46 void onnxruntime::…::
# ValidateOpsetForDomain(const std::unordered_map<…>&, …, int) "): 200 characters that say nothing to a user.
_ORT_SOURCE = re.compile(r"\S*onnxruntime_src/\S+:\d+ [^()]*\([^()]*\)(?: const)?\s*")


def whole_message(error: BaseException) -> str:
    """An exception's whole text on one line, less ONNX Runtime's source locations. ONNX Runtime names the dimension
    or value at fault past its first line ("index: 0 Got: 8 Expected: 1", "requested shape:{3,-1}"): cutting it
    there hides the cause."""
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    text = _ORT_SOURCE.sub("", text)
    return one_line(text) if text else type(error).__name__


def ort_reason(error: BaseException) -> str:
    """ONNX Runtime's reason for an exception it raised: whole_message less its "[ONNXRuntimeError] : " prefix."""
    return whole_message(error).removeprefix("[ONNXRuntimeError] : ")


def one_line(text: object) -> str:
    """The text with every control character escaped (a newline in a node name or a path shows as \\n), so that a
    message stays on one line whatever names it quotes."""
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in str(text))


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice nearest a misspelt word (difflib's ratio, case aside), or None when none is near enough to be what
    was meant. A word cut short (--cal) means the shortest choice it begins (--calib), before any lookalike
    (--scale)."""
    by_key = {choice.lower(): choice for choice in choices}
    key = word.lower()
    begun = sorted((choice for choice in by_key if choice.startswith(key) and len(key.strip("-")) >= 2), key=len)
    if begun:
        return by_key[begun[0]]
    found = difflib.get_close_matches(key, list(by_key), n=1, cutoff=0.6)
    return by_key[found[0]] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """" — did you mean 'x'?" for the nearest choice, or "" when none is near."""
    match = closest(word, choices)
    return f" — did you mean {match!r}?" if match is not None else ""
