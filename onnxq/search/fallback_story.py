"""The fallback's outcome in words, for a person: what it tried, what it kept float, and why it stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxq.verify.check import Verification

if TYPE_CHECKING:
    from onnxq.search.fallback import FallbackResult

__all__ = ["fallback_story", "worst_figures"]


def worst_figures(verification: Verification) -> str:
    """What fails, output by output; or, within tolerance, the figure nearest its bar: 'logits SQNR 33.9 dB < 40'."""
    failing = [f"{o.name}: {'; '.join(o.failures)}" for o in verification.outputs if o.failures]
    if failing:
        return "; ".join(failing)
    bars = [(bar.share, o.name, bar) for o in verification.outputs for bar in o.bars]
    if not bars:
        return "every output within its bars"
    _, name, bar = max(bars, key=lambda item: item[0])
    return f"{name} {bar.metric} {bar.text()}, the figure nearest its bar"


def fallback_story(result: FallbackResult) -> list[str]:
    """Three short paragraphs: where it started, what it tried, how it ended and why it stopped there."""
    n = len(result.ranking)
    lines = [f"The model as planned missed its tolerance on {result.log.samples} samples "
             f"({worst_figures(result.before)})."]
    if result.met:
        return lines + _met(result, n)
    if n < 2:
        lines.append("Only one node is quantized: keeping it float would give back the float model, so there was "
                     "nothing to try." if n == 1 else "No quantized node was ranked, so there was nothing to try.")
    else:
        last = result.ranking[-1][0]
        rest = ", the rest at 8 bits" if result.tiered else ""
        lines.append(f"The fallback ranked the {n} quantized nodes by harm (their sensitivity) and verified "
                     f"the model with all but the least harmful float ({n - 1} float, only {last} quantized{rest}; "
                     f"{result.log.text()}): even that misses the tolerance.")
    lines.append("Keeping every node float would give back the float model, so it stopped there: the model is "
                 "written as planned, every node quantized, out of tolerance. The way forward is in how the model is "
                 "quantized, or in the bar it is held to — not in keeping more of it float.")
    return lines


def _met(result: FallbackResult, n: int) -> list[str]:
    eight = " (with 4-bit weights, the nodes not kept float at 8 bits first)" if result.tiered else ""
    kept = f"{len(result.kept_float)} node(s) float" + (
        f" and {len(result.kept_int8)} at 8 bits" if result.kept_int8 else "")
    again = ""
    if result.reclaimed:
        again = (f" {len(result.reclaimed)} node(s) of the bisection's float prefix were tried quantized again and "
                 "stay quantized, the tolerance still met.")
    after = "" if result.after is None else f" ({worst_figures(result.after)})"
    return [f"The fallback ranked the {n} quantized nodes by harm (their sensitivity) and searched, by "
            f"bisection, the fewest of the most harmful to keep float{eight}: {result.log.text()}.",
            f"It keeps {kept}, listed below with their harm; the model then meets the tolerance on all "
            f"{result.log.samples} samples{after}.{again} It stopped at the fewest it found that meet the tolerance: "
            "every other node stays quantized."]
