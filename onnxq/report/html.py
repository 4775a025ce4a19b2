"""The report as a standalone HTML page for people: the verdict and its caveats first, how the report was made, then
the verification with each figure beside its bar, coloured by the share of the tolerance it uses, and every
section (sensitivity chart with the tolerance line, fallback in words, ...)."""

from __future__ import annotations

import json
import math

from onnxq.config import QuantConfig
from onnxq.report.record import SHARE_COLOURS, QuantReport, escape, share_level
from onnxq.report.summary import left_float_groups, scheme_words
from onnxq.verify.check import OutputCheck, Verification
from onnxq.verify.result import SYNTHETIC
from onnxq.verify.verdict import NOT_SHOWN, OUT, WITHIN

__all__ = ["render_html", "caveats", "headline"]

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#222;text-align:left;line-height:1.4}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;
vertical-align:top}th{background:#f4f4f4}td.num,th.num{text-align:right;white-space:nowrap}
.fail,.over{color:#c62828;font-weight:600}.ok,.within{color:#2e7d32}.near,.warn{color:#b26a00;font-weight:600}
.bar{color:#666;font-weight:normal;font-size:90%}
.headline{border-left:.5em solid;padding:.6em 1em;margin:1em 0 1.5em;background:#fafafa}
.headline.verdict-ok{border-color:#2e7d32}.headline.verdict-warn{border-color:#ef8f00}
.headline.verdict-fail{border-color:#c62828}.headline .verdict{font-size:1.5em;font-weight:700;margin:0 0 .3em}
.verdict-ok .verdict{color:#2e7d32}.verdict-warn .verdict{color:#b26a00}.verdict-fail .verdict{color:#c62828}
.caveats li{color:#8a5300}
.meter{position:relative;display:inline-block;width:5em;height:.8em;background:#eee;vertical-align:middle}
.meter span{position:absolute;left:0;top:0;bottom:0}.meter i{position:absolute;top:-.2em;bottom:-.2em;width:0;
border-left:2px dashed #222}pre{background:#f6f6f6;padding:.6em;overflow-x:auto;white-space:pre-wrap}
svg text{font-size:11px;font-family:monospace}"""

# The verification inputs' label when onnxq made them up for want of data (steps.plan.SYNTHETIC).
_MADE_UP = SYNTHETIC
# A meter's scale: the tolerance line sits at 1 of this.
_METER_SPAN = 1.5

_e = escape


def caveats(report: QuantReport) -> list[str]:
    """What the verdict does not say by itself: it was reached on made-up inputs, nothing was quantized, the data
    cannot show a bar, nothing was verified."""
    found = []
    v = report.verification
    if v is None:
        found.append("Not verified: the model was not compared with the float model (verification was off).")
    elif v.data == _MADE_UP:
        found.append("Verified on made-up random inputs, for want of data: a smoke test, not a measure of accuracy "
                     "— pass --verify-data (or --calib) with real inputs for figures that mean something.")
    if not report.quantized:
        found.append("Nothing is quantized: every node stayed float, so the output is the float model.")
    return found  # not shown and out of tolerance are the headline's own words


def headline(report: QuantReport) -> str:
    """The verdict, what became of the model, its caveats and any failure of the gate, in one box."""
    said = caveats(report)
    level = "fail" if report.verdict == OUT else "ok" if report.verdict == WITHIN and not said else "warn"
    ratio = report.quant_bytes / max(report.float_bytes, 1)
    parts = [f"<div class='headline verdict-{level}'><p class='verdict'>{_e(report.result)}</p>",
             f"<p><b>{_e(report.input)}</b> → <b>{_e(report.output or '(in memory)')}</b>: {_e(scheme_words(report))}"
             f", target {_e(report.config.get('target'))}; {len(report.quantized)} node(s) quantized, "
             f"{len(report.left_float)} left float; {_bytes(report.float_bytes)} → "
             f"{_bytes(report.quant_bytes)} ({ratio:.2f}x).</p>"]
    if said:
        parts.append("<ul class='caveats'>" + "".join(f"<li>{_e(c)}</li>" for c in said) + "</ul>")
    parts += [f"<p class='fail'>{_e(failure)}</p>" for failure in (*_failing(report), *report.gate_failures)]
    fallback = report.fallback
    if fallback is not None and fallback.met:
        parts.append(f"<p>The fallback kept {len(fallback.kept_float)} node(s) float"
                     + (f" and {len(fallback.kept_int8)} at 8 bits" if fallback.kept_int8 else "")
                     + " to meet the tolerance (section Fallback).</p>")
    elif fallback is not None:
        parts.append("<p>The fallback could not meet the tolerance by keeping nodes float (section Fallback).</p>")
    return "".join(parts) + "</div>"


def _bytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e6 else f"{count / 1e3:.0f} kB"


def _failing(report: QuantReport) -> list[str]:
    """Each output out of tolerance, by provider: what fails."""
    v = report.verification
    if v is None:
        return []
    return [f"{_short(check.provider)}: {o.name}: {'; '.join(o.failures)}" for check in v.providers
            for o in check.outputs if o.failures]


def _short(provider: str) -> str:
    return provider.replace("ExecutionProvider", "")


def _flat(data: dict, prefix: str = "") -> dict[str, object]:
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _how_made(report: QuantReport) -> str:
    """The command, the settings that differ from the defaults, and the whole configuration (folded)."""
    defaults = _flat(QuantConfig().to_dict())
    # A setting whose default is "auto" is recorded as what it resolved to: a change only the command shows.
    changed = {k: v for k, v in _flat(report.config).items() if defaults.get(k, object()) not in (v, "auto")}
    settings = "\n".join(f"{k} = {json.dumps(v)}" for k, v in changed.items()) or "(every setting at its default)"
    return (f"<h2>How this report was made</h2><pre class='command'>{_e(report.command)}</pre>"
            "<p>Settings that differ from the defaults (those left to 'auto' are in the whole configuration, as "
            "resolved):</p>"
            f"<pre>{_e(settings)}</pre><details><summary>The whole configuration</summary>"
            f"<pre>{_e(json.dumps(report.config, indent=2))}</pre></details>")


def _figure(o: OutputCheck, metric: str | None, value: float, spec: str) -> str:
    """A figure, beside its bar and coloured by its share where it was gated on one."""
    figure = format(value, spec) if math.isfinite(value) else str(value)
    bar = next((b for b in o.bars if b.metric == metric), None) if metric else None
    if bar is None:
        return f"<td class='num'>{figure}</td>"
    return (f"<td class='num {share_level(bar.share)}' title='{bar.share:.0%} of the tolerance'>{figure} "
            f"<br><span class='bar'>({_e(bar.op)} {bar.limit:g})</span></td>")


def _meter(o: OutputCheck) -> str:
    """How much of its tolerance the output uses, its worst bar's share, against the dashed line of the bar."""
    if not o.bars:
        return "<td>–</td>"
    worst = max(o.bars, key=lambda b: b.share)
    share = worst.share
    width = 100 * min(share, _METER_SPAN) / _METER_SPAN if math.isfinite(share) else 100
    colour = SHARE_COLOURS[share_level(share)]
    return (f"<td class='num'><span class='meter' title='{_e(worst.metric)}: {share:.0%} of its tolerance'><span "
            f"style='width:{width:.0f}%;background:{colour}'></span><i style='left:{100 / _METER_SPAN:.0f}%'></i>"
            f"</span> {share:.0%}<br><span class='bar'>({_e(worst.metric)})</span></td>")


def _task_cell(o: OutputCheck) -> str:
    """The output's task metric and its agreement, beside its bar where it is gated on it, or a dash."""
    m = o.metrics
    if not m.task:
        return "<td class='num'>–</td>"
    bar = next((b for b in o.bars if b.metric not in ("cosine", "SQNR dB", "max abs", "perplexity ratio")), None)
    if bar is None:
        return f"<td class='num'>{_e(m.task)} {m.task_agreement:.4f}</td>"
    return (f"<td class='num {share_level(bar.share)}'>{_e(m.task)} {m.task_agreement:.4f} "
            f"<br><span class='bar'>({_e(bar.op)} {bar.limit:g})</span></td>")


_RESULT_WORDS = {WITHIN: "ok", OUT: "FAIL", NOT_SHOWN: "NOT SHOWN"}
_RESULT_CLASS = {WITHIN: "ok", OUT: "fail", NOT_SHOWN: "warn"}


def _checks_table(checks: tuple[OutputCheck, ...]) -> str:
    rows = "".join(
        f"<tr><td>{_e(o.name)}</td>{_figure(o, 'cosine', o.metrics.cosine_mean, '.5f')}"
        f"{_figure(o, None, o.metrics.cosine_min, '.5f')}{_figure(o, 'SQNR dB', o.metrics.sqnr_db, '.1f')}"
        f"{_figure(o, 'max abs', o.metrics.max_abs_error, '.4g')}{_figure(o, None, o.metrics.mean_abs_error, '.4g')}"
        f"{_task_cell(o)}{_meter(o)}<td class='{_RESULT_CLASS[o.verdict]}'>{_RESULT_WORDS[o.verdict]}</td>"
        "</tr>" for o in checks)
    failures = "".join(f"<p class='{_RESULT_CLASS[o.verdict]}'>{_e(o.name)}: {_e('; '.join(o.failures or o.unshown))}</p>"
                       for o in checks if o.failures or o.unshown)
    heads = "".join(f"<th class='num'>{h}</th>" for h in ("cosine", "min cosine", "SQNR dB", "max abs", "mean abs",
                                                           "task", "tolerance used"))
    return f"<table><tr><th>output</th>{heads}<th>result</th></tr>{rows}</table>{failures}"


def _verification(v: Verification) -> list[str]:
    parts = [f"<h2>Verification</h2><p>{v.samples} samples of {_e(v.data)}; the float model on CPU is the "
             "reference. Each gated figure stands beside its bar, green well within it, amber past half of what it "
             "allows, red over it; the meter shows the share of the tolerance the output uses, the dashed line "
             "the bar.</p>"]
    parts += [f"<p class='warn'>{_e(message)}</p>" for message in v.unavailable]
    for check in v.providers:
        parts.append(f"<h3>{_e(check.provider)}</h3>{_checks_table(check.outputs)}")
        if check.task is not None:
            parts.append(f"<p class='{'ok' if check.task.passed else 'fail'}'>{_e(check.task.text().strip())}</p>")
        if check.placement is not None:
            parts.append(check.placement.html())
        if check.float_drift:
            parts.append(f"<h4>The float model on {_e(check.provider)} vs the reference</h4>"
                         f"{_checks_table(check.float_drift)}")
    for placement in v.predicted:
        parts.append(f"<h3>{_e(placement.provider)} (absent here)</h3>{placement.html()}")
    for provider, checks in v.agreement.items():
        parts.append(f"<h3>Agreement: quantized on CPU vs on {_e(provider)}</h3><p>Each output against the "
                     "bound two providers within tolerance of the float model always meet.</p>"
                     f"{_checks_table(checks)}")
    if v.coverage is not None:
        parts.append(v.coverage.html())
    return parts


def _nodes(report: QuantReport) -> list[str]:
    """What stayed float, one row per kind of reason, and every node as quantized or left float (folded)."""
    parts = []
    if report.left_float:
        rows = "".join(f"<tr><td class='num'>{n}</td><td>{_e(op)}</td><td>{_e(why)}</td></tr>"
                       for n, op, why in left_float_groups(report.left_float))
        parts.append(f"<h2>Left float</h2><table><tr><th>nodes</th><th>op</th><th>why"
                     f"</th></tr>{rows}</table>")
    entries = [("quantized", e) for e in report.quantized] + [("float", e) for e in report.left_float]
    if entries:
        rows = "".join(f"<tr><td>{_e(e.name)}</td><td>{_e(e.op_type)}</td><td>{what}</td>"
                       f"<td>{_e(e.detail)}</td></tr>" for what, e in entries)
        parts.append(f"<details><summary>Every node, as quantized or left float ({len(entries)})</summary><table>"
                     "<tr><th>node</th><th>op</th><th>as</th><th>how, or "
                     f"why not</th></tr>{rows}</table></details>")
    return parts


def render_html(report: QuantReport) -> str:
    said = {line for section in report.sections for line in section.text()}
    notes = [note for note in report.notes if note not in said]
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>onnxq report: {_e(report.input)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>onnxq report</h1>", headline(report), _how_made(report)]
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(note)}</li>" for note in notes) + "</ul>")
    if report.verification is not None:
        parts += _verification(report.verification)
    parts += [check.html() for check in report.speed]
    parts.append(report.smoothing.html())
    parts += [section.html() for section in report.sections]  # each search's result renders itself
    parts += _nodes(report)
    parts.append("</body></html>")
    return "\n".join(parts)
