"""The report as text for a terminal: what was quantized, where it ran, how close it is, what hurts."""

from __future__ import annotations

import collections
import re

from onnxq.report.record import NodeEntry, QuantReport
from onnxq.verify.check import OutputCheck, Verification
from onnxq.verify.outcome import UNITS, task_interval
from onnxq.verify.kernels.placement import Placement
from onnxq.verify.tasks.types import TASK_WORDS

__all__ = ["format_summary", "format_verification", "scheme_words", "left_float_groups"]


def _short(provider: str) -> str:
    return provider.replace("ExecutionProvider", "")


# Each figure column of an output's row: (header, the figure's bar in verify.bars, the figure's format, the figure).
_COLUMNS = (("cosine", "cosine", ".4f", lambda m: m.cosine_mean),
            ("min cos", None, ".4f", lambda m: m.cosine_min),
            ("SQNR dB", "SQNR dB", ".1f", lambda m: m.sqnr_db),
            ("max abs", "max abs", ".4g", lambda m: m.max_abs_error))
_MEAN_ABS = ("mean abs", None, ".4g", lambda m: m.mean_abs_error)  # -v only
_IN_COLUMNS = frozenset(c[1] for c in _COLUMNS)


def _cell(o: OutputCheck, column: tuple) -> str:
    """The figure, beside its bar where it was gated on one."""
    _, metric, spec, figure = column
    bar = next((b for b in o.bars if b.metric == metric), None) if metric else None
    return bar.text(spec) if bar is not None else format(figure(o.metrics), spec)


def _task_cell(o: OutputCheck) -> str:
    """The output's task metric and any other bar without a column of its own (argmax, top-K), each beside its bar."""
    m = o.metrics
    bars = [b for b in o.bars if b.metric not in _IN_COLUMNS and b.metric != "perplexity ratio"]
    words = [f"{m.task} " + next((b.text() for b in bars if b.metric == TASK_WORDS.get(m.task)),
                                 format(m.task_agreement, ".4f"))] if m.task else []
    words += [f"{b.metric} {b.text()}" for b in bars if b.metric != TASK_WORDS.get(m.task)]
    return ", ".join(words)


def _table(checks: tuple[OutputCheck, ...], verbose: bool = False) -> list[str]:
    """One row per output, each gated figure beside its bar ('0.9855 (>= 0.98)'); columns as wide as they need."""
    columns = _COLUMNS + ((_MEAN_ABS,) if verbose else ())
    heads = ["output", *(c[0] for c in columns), "task"]
    rows = [[o.name[:28], *(_cell(o, c) for c in columns), _task_cell(o) or "-"] for o in checks]
    if all(row[-1] == "-" for row in rows):
        heads, rows = heads[:-1], [row[:-1] for row in rows]
    widths = [max(len(text) for text in column) for column in zip(heads, *rows)]
    lines = []
    for cells, verdict in [(heads, "result"), *((row, _verdict(o)) for row, o in zip(rows, checks))]:
        aligned = [cells[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(cells[1:], widths[1:]))]
        lines.append("  " + "  ".join(aligned) + f"  {verdict}")
    for o in checks:
        m = o.metrics
        if m.perplexity_ratio is not None:
            bar = next((f", bar <= {b.limit:g}x" for b in o.bars if b.metric == "perplexity ratio"), "")
            lines.append(f"  {o.name[:28]}: perplexity {m.perplexity_reference:.4g} float -> {m.perplexity:.4g} "
                         f"quantized ({m.perplexity_ratio:.3f}x{bar}) over {m.scored_tokens} next tokens; next-token "
                         f"agreement {m.task_agreement:.4f}")
    return lines


def _verdict(o: OutputCheck) -> str:
    return "ok" if o.passed else "FAIL: " + "; ".join(o.failures) if o.failed else "NOT SHOWN"


# The rules that leave an output numeric for want of an answer in it (a name, no rule matched), as against a cause of
# the run's (your own task metric judges; made-up inputs).
_NO_ANSWER = re.compile(r"^named as|^no rule matched|^set by the output's tolerance")


def _tasks(v: Verification, verbose: bool = False) -> list[str]:
    """Which task metric each output got, by which rule, against which bar, and how to change it; outputs held to
    the numeric bars alone take one line (each its own with verbose)."""
    if not v.tasks:
        return []
    if not verbose and all(t.kind in ("numeric", "state") for t in v.tasks.values()):
        names = ", ".join(list(v.tasks)[:3]) + (", …" if len(v.tasks) > 3 else "")
        rules = {t.rule for t in v.tasks.values()}
        if len(rules) == 1 and not _NO_ANSWER.search(next(iter(rules))):  # your metric judges; made-up inputs
            return [f"task:        {names}: numeric bars — {rules.pop()}"]
        return [f"task:        none — numeric bars only ({names}: no answer to judge; --tolerance OUTPUT:task=KIND "
                "sets one)"]
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


def format_verification(v: Verification, verbose: bool = False) -> list[str]:
    """The verification's lines; verbose adds the plumbing (each kernel ORT ran, how each target was checked, the
    kernels' gap to the exact quantization, AVX2 pair sums)."""
    lines = []
    for message in v.unavailable:
        lines.append(f"warning:     {message}")
    for placement in v.predicted:
        lines += _placement(placement, verbose)
    lines += _tasks(v, verbose)
    for check in v.providers:
        if check.placement is not None:
            lines += _placement(check.placement, verbose)
        lines.append(f"verification on {_short(check.provider)}, {v.samples} samples of {v.data}:")
        lines += _table(check.outputs, verbose)
        if check.task is not None:
            lines.append(check.task.text())
    for provider, checks in v.agreement.items():
        lines += _agreement(v, provider, checks, verbose)
    if v.coverage is not None:
        lines += v.coverage.text() if verbose else _coverage(v)
    return lines


def _placement(placement: Placement, verbose: bool) -> list[str]:
    """How many quantized nodes run on integer kernels, and what did not run as planned (-v: every kernel)."""
    if verbose:
        return placement.text()
    return [f"kernels:     {placement.brief()}"] + [f"  ! {finding}" for finding in placement.findings()]


# How a target was checked, in a word, by the first word of TargetCheck.how (verify.kernels.coverage).
_CHECKED_BY = {"ran": "this CPU", "emulated": "emulated", "exact": "exact arithmetic"}


def _checked_by(how: str) -> str:
    """A target's check in a few words: "this CPU", "ran on OpenVINO" (its provider), "emulated", …"""
    if how.startswith("ran on ") and not how.startswith("ran on this CPU"):
        return how.split(" (")[0]
    return _CHECKED_BY.get(how.split()[0], how.split(":")[0])


def _coverage(v: Verification) -> list[str]:
    """Where the check holds, on one line; below it only what fails there and not on this CPU's run already, the
    kernels where they cost accuracy, and AVX2 saturation where it happens."""
    coverage = v.coverage
    info = coverage.platform
    checked = [f"{t.target} ({_checked_by(t.how)})" for t in coverage.targets]
    failing = [t.target for t in coverage.targets if t.failed]
    unshown = [t.target for t in coverage.targets if not t.failed and not t.passed]
    verdict = "; ".join([*([f"OUT OF TOLERANCE on {', '.join(failing)}"] if failing else []),
                         *([f"not shown on {', '.join(unshown)} (the result line says why)"] if unshown else [])]) \
        or "within tolerance on each"
    lines = [f"checked on:  {info['cpu']}" + (f"; target {coverage.target}: {', '.join(checked)} — {verdict}"
                                              if checked else "")]
    seen = {f"{o.name} {'; '.join(o.failures)}" for o in v.outputs if o.failures}
    for t in coverage.targets:
        found = [f"{o.name} {'; '.join(o.failures)}" for o in t.outputs if o.failures]
        found += [] if t.task is None else list(t.task.failures)
        lines += [f"  ! on {t.target}: {failure}" for failure in found if failure not in seen]
    if coverage.kernels_cost_accuracy:
        worst = max(coverage.kernel_loss.items(), key=lambda kv: kv[1])
        lines.append(f"  ! this CPU's kernels, not the quantization, cost accuracy: {worst[0]} loses {worst[1]:.4f} "
                     "cosine against the exact quantization (-v)")
    saturating = [n for n in coverage.saturation if n.saturated]
    if saturating:
        lines.append(f"  ! on AVX2 CPUs {len(saturating)} of {len(coverage.saturation)} integer products overflow "
                     "their int16 pair sums (-v lists them)")
    return lines


def _agreement(v: Verification, provider: str, checks: tuple[OutputCheck, ...], verbose: bool) -> list[str]:
    """The float model's own difference on the provider, then the quantized model's agreement with the CPU's,
    against the bound two in-tolerance providers meet."""
    drift = next(c.float_drift for c in v.providers if c.provider == provider)
    lines = []
    if drift:
        worst = min(drift, key=lambda o: o.metrics.cosine_mean)
        lines.append(f"float model on {_short(provider)} vs the reference (its own arithmetic): {worst.name} cosine "
                     f"{worst.metrics.cosine_mean:.6f}, max abs {worst.metrics.max_abs_error:.3g}")
    return lines + [f"agreement, quantized on CPU vs on {_short(provider)} (bound: what two in-tolerance providers "
                    "meet):", *_table(checks, verbose)]


def format_summary(report: QuantReport, verbose: bool = False) -> str:
    """The summary: one renderer per section, in order; a report without verification stops after the notes.
    verbose (the CLI's -v) adds the plumbing: each distinct reason a node stayed float, every kernel ORT ran, how
    each target was checked."""
    sections = _BEFORE_VERIFICATION if report.verification is None else _BEFORE_VERIFICATION + _VERIFIED
    return "\n".join(line for section in sections for line in section(report, verbose))


def scheme_words(report: QuantReport) -> str:
    """What the model became, in words: 'static int8, qdq' or 'weight-only int4, blocks of 32, matmulnbits, rtn'."""
    config = report.config
    kind = "per-token" if config.get("activation_granularity") == "per-token" else report.mode
    switched = report.recipe is not None and report.recipe.per_token
    if (config.get("per_token_nodes") or switched) and kind != "per-token":
        kind += " + per-token"
    form = config.get("format", "qdq") if report.mode == "static" and kind != "per-token" else "integer operators"
    if report.mode == "weight-only":
        blocks = config["blocks"]
        return (f"weight-only {config['weights']['dtype']}, blocks of {blocks['size']}, {blocks['format']}, "
                f"{blocks['method']}")
    return f"{kind} int8, {form}"


def _header(report: QuantReport, verbose: bool = False) -> list[str]:
    return [f"onnxq: {report.input} -> {report.output or '(in memory)'}  [{scheme_words(report)}, target "
            f"{report.config.get('target')}]"]


# The parts of a reason that name one node's tensors, figures or where it sits (a parenthesis holding a shape or a
# number, or "inside" a body): reasons that differ only there are one line.
_NAMED = re.compile(r" \((?:inside [^()]*|[^()]*\d[^()]*)\)")


def left_float_groups(entries: tuple[NodeEntry, ...]) -> list[tuple[int, str, str]]:
    """(count, op type, reason) per kind of reason, most first: reasons that differ only in the tensors they name
    (a bias's name and shape, the body a node sits in) are one, with the first one's names as an example."""
    groups: dict[tuple[str, str], list[str]] = {}
    for e in entries:
        groups.setdefault((e.op_type, _NAMED.sub("", e.detail)), []).append(e.detail)
    found = []
    for (op, reason), details in groups.items():
        if len(set(details)) > 1:
            example = _NAMED.search(details[0])
            reason += f" (e.g. {example.group(0).strip()[1:-1]})" if example else ""
        else:
            reason = details[0]
        found.append((len(details), op, reason))
    return sorted(found, key=lambda group: -group[0])


def _nodes(report: QuantReport, verbose: bool = False) -> list[str]:
    by_op = collections.Counter(e.op_type for e in report.quantized)
    # Nothing left quantized happens after planning only: a search kept every node float (--check-speed, fallback).
    counts = ", ".join(f"{n} {op}" for op, n in sorted(by_op.items())) or "none (every node kept float: see below)"
    lines = ["quantized:   " + counts]
    if report.left_float:
        lines.append(f"left float:  {len(report.left_float)} node(s)")
        if verbose:  # every distinct reason
            reasons = collections.Counter((e.op_type, e.detail) for e in report.left_float)
            groups = [(n, op, reason) for (op, reason), n in sorted(reasons.items(), key=lambda kv: -kv[1])]
        else:
            groups = left_float_groups(report.left_float)
        lines += [f"  {n:4d} {op}: {reason}" for n, op, reason in groups]
    return lines


def _calibration(report: QuantReport, verbose: bool = False) -> list[str]:
    if not report.calibration_samples:
        return []
    v = report.verification
    held = f" (+{v.samples} held back for verification)" if v and v.data.startswith("held-out") else ""
    calibration = report.config["calibration"]
    method = calibration["method"] + (f" {calibration['percentile']}" if calibration["method"] == "percentile"
                                      else "")
    return [f"calibration: {method}, {report.calibration_samples} samples{held}, "
            f"{report.seconds.get('calibrate', 0.0):.1f} s"]


def _size(report: QuantReport, verbose: bool = False) -> list[str]:
    ratio = report.quant_bytes / max(report.float_bytes, 1)
    return [f"size:        {report.float_bytes / 1e6:.1f} MB -> {report.quant_bytes / 1e6:.1f} MB ({ratio:.2f}x)"]


def _smoothing(report: QuantReport, verbose: bool = False) -> list[str]:
    return report.smoothing.text()


def _names_and_notes(report: QuantReport, verbose: bool = False) -> list[str]:
    lines = []
    if report.renamed_nodes:
        first = report.renamed_nodes[0]
        lines.append(f"node names:  {len(report.renamed_nodes)} node(s) had no name or a repeated one and were named "
                     f"(e.g. {first.name} = node {first.position} of the {first.graph} graph); the JSON report's "
                     "renamed_nodes lists them")
    said = set(_sections(report, True))  # a note a section's own line says already is not repeated
    lines += [f"note:        {note}" for note in report.notes if note not in said]
    return lines + (["verification: skipped"] if report.verification is None else [])


def _speed(report: QuantReport, verbose: bool = False) -> list[str]:
    return [c.text() for c in report.speed]


def _sections(report: QuantReport, verbose: bool = False) -> list[str]:
    """Each search's (and any new step's) section renders its own lines, in the order they ran; a section that is
    a detail (Section's `detail`) only with -v."""
    return [line for section in report.sections if verbose or not getattr(section, "detail", False)
            for line in section.text()]


def _result(report: QuantReport) -> list[str]:
    return [f"  ! {failure}" for failure in report.gate_failures] + [f"result: {report.result}"]


_BEFORE_VERIFICATION = (_header, _nodes, _calibration, _size, _smoothing, _names_and_notes)
_VERIFIED = (lambda r, verbose: format_verification(r.verification, verbose), _speed, _sections,
             lambda r, verbose: _result(r))
