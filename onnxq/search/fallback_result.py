"""The fallback's outcome: the report section (FallbackResult), and its story in words for a person — what it tried,
what it kept float, and why it stopped."""

from __future__ import annotations

import dataclasses

from onnxq.report.record import escape
from onnxq.search.probing import ProbeLog
from onnxq.verify import Verification
from onnxq.verify.runner import finite_or_none

__all__ = ["FallbackResult", "fallback_story", "worst_figures"]


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


@dataclasses.dataclass(frozen=True)
class FallbackResult:
    met: bool
    kept_float: tuple[tuple[str, float], ...]  # (node, harm) in ranking order
    before: Verification
    after: Verification | None  # the chosen attempt's verification (None when not met)
    log: ProbeLog  # the candidates verified, on how many samples, in how long
    kept_int8: tuple[tuple[str, float], ...] = ()  # 4-bit weights: (node, harm) moved to 8-bit blocks
    reclaimed: tuple[str, ...] = ()  # in the bisection's float prefix, quantized again (search.reclaim)
    back_at_4: tuple[str, ...] = ()  # moved to 8 bits by the bisection, back at 4 bits (search.reclaim)
    ranking: tuple[tuple[str, float], ...] = ()  # (node, harm), most harmful first: the order it tried them in
    tiered: bool = False  # 4-bit weights: nodes went to 8 bits before float
    key = "fallback"  # report.Section

    @property
    def probes(self) -> int:
        """Candidate models verified, on part or all of the inputs."""
        return self.log.probes + self.log.confirmations

    def text(self) -> list[str]:
        if not self.met:
            return ["fallback: the tolerance cannot be met even with all but one node float"]
        lines = []
        if self.kept_int8:
            lines.append(f"fallback: {len(self.kept_int8)} node(s) at 8 bits: "
                         + ", ".join(n for n, _ in self.kept_int8))
        if self.kept_float or not self.kept_int8:
            lines.append(f"fallback: kept {len(self.kept_float)} node(s) float: "
                         + ", ".join(n for n, _ in self.kept_float))
        if self.reclaimed:
            lines.append(f"fallback: {len(self.reclaimed)} node(s) of the ranking's float prefix quantized again, "
                         "the tolerance still met: " + ", ".join(self.reclaimed))
        if self.back_at_4:
            lines.append(f"fallback: {len(self.back_at_4)} node(s) the bisection moved to 8 bits back at 4, the "
                         "tolerance still met: " + ", ".join(self.back_at_4))
        return lines + [f"fallback: verified {self.log.text()}"]

    def html(self) -> str:
        kept = "".join(f"<li>{escape(name)} (harm {harm:.4f}): float</li>" for name, harm in self.kept_float)
        kept += "".join(f"<li>{escape(name)} (harm {harm:.4f}): 8 bits</li>" for name, harm in self.kept_int8)
        status = "the tolerance cannot be met"
        if self.met:
            status = f"met by keeping {len(self.kept_float)} node(s) float" + (
                f" and {len(self.kept_int8)} at 8 bits" if self.kept_int8 else "")
        return (f"<h2>Fallback: {status}</h2>" + "".join(f"<p>{escape(p)}</p>" for p in fallback_story(self))
                + (f"<ol>{kept}</ol>" if kept else ""))

    def to_dict(self) -> dict:
        def cpu(v: Verification | None):
            return None if v is None else {o.name: o.to_dict() for o in v.outputs}

        return {"met": self.met, "kept_float": [{"name": n, "harm": finite_or_none(h)} for n, h in self.kept_float],
                "kept_int8": [{"name": n, "harm": finite_or_none(h)} for n, h in self.kept_int8],
                "reclaimed": list(self.reclaimed), "back_at_4": list(self.back_at_4),
                "before": cpu(self.before), "after": cpu(self.after), "probes": self.probes,
                "verification": self.log.to_dict()}
