"""The result a run or a check ends on, in one line: its verdict (verify.verdict) with what the verdict rests on —
the caveat of inputs that cannot judge the model (made up, or the calibration data itself), the reason the data
shows nothing, or why nothing was quantized — so that the line alone (all `-q` prints) is never more sure than the
run was."""

from __future__ import annotations

from collections.abc import Sequence

from onnxq.verify.check import Verification
from onnxq.verify.verdict import NOT_SHOWN, NOT_VERIFIED, NOTHING_QUANTIZED, OUT, WITHIN

__all__ = ["SYNTHETIC", "CALIBRATION_SAMPLES", "result_words", "verification_result", "EXIT_CODES",
           "EXIT_NOT_SHOWN", "most_common"]

SYNTHETIC = "synthetic inputs"  # the label of verification inputs made up for want of data
CALIBRATION_SAMPLES = "calibration samples"  # the label of verification on calibration data (none held back)

EXIT_NOT_SHOWN = 4
# The command line's exit status per verdict: 0 a quantized model shown within tolerance, 1 a bar measured below,
# 4 a model written that proves nothing about a quantized one (nothing quantized, or a bar the data cannot show).
EXIT_CODES = {WITHIN: 0, NOT_VERIFIED: 0, OUT: 1, NOT_SHOWN: EXIT_NOT_SHOWN, NOTHING_QUANTIZED: EXIT_NOT_SHOWN}

_CAVEATS = {SYNTHETIC: " on made-up inputs — pass --verify-data for a verdict on yours",
            CALIBRATION_SAMPLES: " on calibration data, which flatters it — verify on data held out from "
                                 "calibration for a verdict"}


def verification_result(verification: Verification) -> str:
    """A check's result words: within tolerance, OUT OF TOLERANCE, or NOT SHOWN with the reason."""
    return result_words(verification.verdict, verification)


def result_words(verdict: str, verification: Verification | None, why_float: str = "",
                 wrote: bool = True) -> str:
    """The result line's words (after "result: "). why_float: what kept every node float (nothing quantized);
    wrote: whether a model file was written."""
    if verdict == NOTHING_QUANTIZED:
        written = "wrote the float model unchanged" if wrote else "the model is the float model unchanged"
        because = f" ({why_float})" if why_float else ""
        return f"NOTHING QUANTIZED — every node kept float{because}; {written}"
    if verdict == NOT_VERIFIED or verification is None:
        return "not verified"
    caveat = _CAVEATS.get(verification.data, "") + _unchecked(verification)
    if verdict == WITHIN:
        return "within tolerance" + caveat
    if verdict == OUT:
        return "OUT OF TOLERANCE" + caveat
    reasons = verification.unshown()
    more = f" (and {len(reasons) - 1} more, above)" if len(reasons) > 1 else ""
    return f"NOT SHOWN — {reasons[0] if reasons else 'the data cannot show the bars'}{more}{caveat}"


def _unchecked(verification: Verification) -> str:
    """The providers asked for that this onnxruntime lacks: a verdict that never ran on them says so, so that a gate
    reading the one line (-q) does not take a check on the CPU for a check on OpenVINO or CUDA."""
    names = [message.split(" ", 1)[0] for message in verification.unavailable]
    return f"; not checked on {', '.join(names)} (not in this onnxruntime)" if names else ""


def most_common(reasons: Sequence[str]) -> str:
    """The reason most nodes share (the first of equals)."""
    return max(dict.fromkeys(reasons), key=list(reasons).count, default="")
