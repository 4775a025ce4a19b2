"""The report as a standalone HTML page for people: verification tables and a per-layer error chart (SVG)."""

from __future__ import annotations

from onnxq.report import QuantReport, escape
from onnxq.verify.check import OutputCheck

__all__ = ["render_html"]

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:72em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
td:first-child,th:first-child{text-align:left}.fail{color:#b00020;font-weight:600}.ok{color:#1b5e20}
svg text{font-size:11px;font-family:monospace}"""


_e = escape


def _task_cell(o: OutputCheck) -> str:
    """The output's task metric (verify.task_rules) and its agreement, or a dash for a numeric output."""
    return f"{_e(o.metrics.task)} {o.metrics.task_agreement:.4f}" if o.metrics.task else "–"


def _checks_table(checks: tuple[OutputCheck, ...]) -> str:
    rows = "".join(
        f"<tr><td>{_e(o.name)}</td><td>{o.metrics.max_abs_error:.4g}</td><td>{o.metrics.mean_abs_error:.4g}</td>"
        f"<td>{o.metrics.cosine_mean:.5f}</td><td>{o.metrics.cosine_min:.5f}</td><td>{o.metrics.sqnr_db:.1f}</td>"
        f"<td>{_task_cell(o)}</td>"
        f"<td class='{'ok' if o.passed else 'fail'}'>{'ok' if o.passed else _e('; '.join(o.failures or o.unshown))}"
        "</td></tr>"
        for o in checks)
    return ("<table><tr><th>output</th><th>max abs</th><th>mean abs</th><th>cosine</th><th>min cosine</th>"
            f"<th>SQNR dB</th><th>task</th><th>result</th></tr>{rows}</table>")


def render_html(report: QuantReport) -> str:
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>onnxq report: {_e(report.input)}</title>"
             f"<style>{_STYLE}</style></head><body>",
             f"<h1>onnxq report</h1><p><b>{_e(report.input)}</b> → <b>{_e(report.output or '(in memory)')}</b>, "
             f"{_e(report.mode)} int8; {len(report.quantized)} node(s) quantized, {len(report.left_float)} left "
             f"float; {report.float_bytes / 1e6:.1f} MB → {report.quant_bytes / 1e6:.1f} MB.</p>"]
    v = report.verification
    if v is not None:
        verdict = report.result  # its caveat too: made-up inputs, not shown, nothing quantized
        parts.append(f"<h2>Verification: <span class='{'ok' if report.passed else 'fail'}'>{verdict}</span></h2>"
                     f"<p>{v.samples} samples of {_e(v.data)}; the float model on CPU is the reference.</p>")
        parts += [f"<p class='fail'>{_e(failure)}</p>" for failure in report.gate_failures]
        for message in v.unavailable:
            parts.append(f"<p class='fail'>{_e(message)}</p>")
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
    parts += [check.html() for check in report.speed]
    parts.append(report.smoothing.html())
    parts += [section.html() for section in report.sections]  # each search's result renders itself
    if report.left_float:
        rows = "".join(f"<tr><td>{_e(e.name)}</td><td>{_e(e.op_type)}</td><td>{_e(e.detail)}</td></tr>"
                       for e in report.left_float)
        parts.append(f"<h2>Left float</h2><table><tr><th>node</th><th>op</th><th>why</th></tr>{rows}</table>")
    parts.append("</body></html>")
    return "\n".join(parts)
