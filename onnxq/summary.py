"""The report as text for a terminal: what was quantized, where it ran, how close it is, what hurts."""

from __future__ import annotations

import collections

from onnxq.report import QuantReport
from onnxq.verify.check import OutputCheck, Verification
from onnxq.verify.outcome import UNITS, task_interval

__all__ = ["format_summary", "format_verification"]

def _short(provider: str) -> str:
    return provider.replace("ExecutionProvider", "")


def _table(checks: tuple[OutputCheck, ...]) -> list[str]:
    tasks = any(o.metrics.task for o in checks)
    task_head = f" {'task':>15}" if tasks else ""
    lines = [f"  {'output':<28} {'max abs':>10} {'mean abs':>10} {'cosine':>8} {'min cos':>8} {'SQNR dB':>8}"
             f"{task_head}  result"]
    for o in checks:
        m = o.metrics
        verdict = "ok" if o.passed else "FAIL: " + "; ".join(o.failures) if o.failed else "NOT SHOWN"
        task = (f" {m.task + ' ' + format(m.task_agreement, '.4f'):>15}" if m.task else f" {'-':>15}") if tasks else ""
        lines.append(f"  {o.name[:28]:<28} {m.max_abs_error:10.4g} {m.mean_abs_error:10.4g} {m.cosine_mean:8.4f} "
                     f"{m.cosine_min:8.4f} {m.sqnr_db:8.1f}{task}  {verdict}")
    for o in checks:
        m = o.metrics
        if m.perplexity_ratio is not None:
            lines.append(f"  {o.name[:28]}: perplexity {m.perplexity_reference:.4g} float -> {m.perplexity:.4g} "
                         f"quantized ({m.perplexity_ratio:.3f}x) over {m.scored_tokens} next tokens; next-token "
                         f"agreement {m.task_agreement:.4f}")
    return lines


def _tasks(v: Verification) -> list[str]:
    """Which task metric each output got, by which rule, against which bar, and how to change it."""
    if not v.tasks:
        return []
    lines = ["task metrics (chosen per output by what it is; --task-metric KIND|numeric|MODULE:FUNCTION or "
             "--tolerance OUTPUT:task=KIND to override):"]
    # Many outputs alike (a language model's 60 cache outputs) take one line for them all.
    grouped = {kind: [(n, t) for n, t in v.tasks.items() if t.kind == kind] for kind in ("numeric", "state")}
    for name, task in v.tasks.items():
        if len(grouped.get(task.kind, ())) > 2:
            continue
        stable = v.stability.get(name)
        own = "" if stable is None else f"; float keeps {stable:.4f} of its own under one step of input noise"
        lines.append(f"  {name[:28]}: {task.words} — {task.rule}{own}{_shown(v, name)}")
    for alike in grouped.values():
        if len(alike) > 2:
            name, task = alike[0]
            lines.append(f"  {len(alike)} output(s): {task.words} (e.g. {name[:28]}: {task.rule})")
    return lines


def _shown(v: Verification, name: str) -> str:
    """What the CPU's agreement shows against the output's bar: its 95 % interval, or why it shows nothing."""
    check = next((o for o in v.outputs if o.name == name), None)
    interval = None if check is None or check.bar is None else task_interval(check.metrics)
    if interval is None:
        return ""
    if check.unshown:
        return f"; NOT SHOWN: {check.unshown[0]}"
    return (f"; {interval.share:.4f} on {interval.units} {UNITS[check.metrics.task]} (95% interval "
            f"{interval.low:.3f}–{interval.high:.3f}) against the bar {check.bar:g}")


def format_verification(v: Verification) -> list[str]:
    lines = []
    for message in v.unavailable:
        lines.append(f"warning:     {message}")
    for placement in v.predicted:
        lines += placement.text()
    lines += _tasks(v)
    for check in v.providers:
        if check.placement is not None:
            lines += check.placement.text()
        lines.append(f"verification on {_short(check.provider)}, {v.samples} samples of {v.data}:")
        lines += _table(check.outputs)
        if check.task is not None:
            lines.append(check.task.text())
    for provider, checks in v.agreement.items():
        lines += _agreement(v, provider, checks)
    if v.coverage is not None:
        lines += v.coverage.text()
    return lines


def _agreement(v: Verification, provider: str, checks: tuple[OutputCheck, ...]) -> list[str]:
    """The float model's own difference on the provider, then the quantized model's agreement with the CPU's,
    against the bound two in-tolerance providers meet."""
    drift = next(c.float_drift for c in v.providers if c.provider == provider)
    lines = []
    if drift:
        worst = min(drift, key=lambda o: o.metrics.cosine_mean)
        lines.append(f"float model on {_short(provider)} vs the reference (its own arithmetic): {worst.name} cosine "
                     f"{worst.metrics.cosine_mean:.6f}, max abs {worst.metrics.max_abs_error:.3g}")
    bounds = sorted({b.min_cosine for b in v.agreement_bounds.values() if b.min_cosine is not None})
    bound = f" (bound: cosine >= {bounds[0]:.4f}, what two in-tolerance providers meet)" if len(bounds) == 1 else ""
    return lines + [f"agreement, quantized on CPU vs on {_short(provider)}{bound}:", *_table(checks)]


def format_summary(report: QuantReport) -> str:
    """The summary: one renderer per section, in order; a report without verification stops after the notes."""
    sections = _BEFORE_VERIFICATION if report.verification is None else _BEFORE_VERIFICATION + _VERIFIED
    return "\n".join(line for section in sections for line in section(report))


def _header(report: QuantReport) -> list[str]:
    config = report.config
    kind = "per-token" if config.get("activation_granularity") == "per-token" else report.mode
    switched = report.recipe is not None and report.recipe.per_token
    if (config.get("per_token_nodes") or switched) and kind != "per-token":
        kind += " + per-token"
    form = config.get("format", "qdq") if report.mode == "static" and kind != "per-token" else "integer operators"
    what = f"{kind} int8, {form}"
    if report.mode == "weight-only":
        blocks = config["blocks"]
        what = (f"weight-only {config['weights']['dtype']}, blocks of {blocks['size']}, {blocks['format']}, "
                f"{blocks['method']}")
    return [f"onnxq: {report.input} -> {report.output or '(in memory)'}  [{what}, target {config.get('target')}]"]


def _nodes(report: QuantReport) -> list[str]:
    by_op = collections.Counter(e.op_type for e in report.quantized)
    # Nothing left quantized happens after planning only: a search kept every node float (--check-speed, fallback).
    counts = ", ".join(f"{n} {op}" for op, n in sorted(by_op.items())) or "none (every node kept float: see below)"
    lines = ["quantized:   " + counts]
    if report.left_float:
        reasons = collections.Counter((e.op_type, e.detail) for e in report.left_float)
        lines.append(f"left float:  {len(report.left_float)} node(s)")
        lines += [f"  {n:4d} {op}: {reason}" for (op, reason), n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return lines


def _calibration(report: QuantReport) -> list[str]:
    if not report.calibration_samples:
        return []
    v = report.verification
    held = f" (+{v.samples} held back for verification)" if v and v.data.startswith("held-out") else ""
    calibration = report.config["calibration"]
    method = calibration["method"] + (f" {calibration['percentile']}" if calibration["method"] == "percentile"
                                      else "")
    return [f"calibration: {method}, {report.calibration_samples} samples{held}, "
            f"{report.seconds.get('calibrate', 0.0):.1f} s"]


def _size(report: QuantReport) -> list[str]:
    ratio = report.quant_bytes / max(report.float_bytes, 1)
    return [f"size:        {report.float_bytes / 1e6:.1f} MB -> {report.quant_bytes / 1e6:.1f} MB ({ratio:.2f}x)"]


def _smoothing(report: QuantReport) -> list[str]:
    return report.smoothing.text()


def _names_and_notes(report: QuantReport) -> list[str]:
    lines = []
    if report.renamed_nodes:
        first = report.renamed_nodes[0]
        lines.append(f"node names:  {len(report.renamed_nodes)} node(s) had no name or a repeated one and were named "
                     f"(e.g. {first.name} = node {first.position} of the {first.graph} graph); the JSON report's "
                     "renamed_nodes lists them")
    lines += [f"note:        {note}" for note in report.notes]
    return lines + (["verification: skipped"] if report.verification is None else [])


def _speed(report: QuantReport) -> list[str]:
    return [c.text() for c in report.speed]


def _sections(report: QuantReport) -> list[str]:
    """Each search's (and any new step's) section renders its own lines, in the order they ran."""
    return [line for section in report.sections for line in section.text()]


def _result(report: QuantReport) -> list[str]:
    return [f"  ! {failure}" for failure in report.gate_failures] + [f"result: {report.result}"]


_BEFORE_VERIFICATION = (_header, _nodes, _calibration, _size, _smoothing, _names_and_notes)
_VERIFIED = (lambda r: format_verification(r.verification), _speed, _sections, _result)
