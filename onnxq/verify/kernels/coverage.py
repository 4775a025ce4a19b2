"""Where a verification holds: the CPU it ran on, and every CPU target the model is meant for.

A target is checked by running (this machine's own), by the exact quantization (ORT_DISABLE_ALL: DequantizeLinear
and float products, which is what VNNI and ARM kernels compute, every product added exactly in int32), or by
emulation (AVX2's U8S8 int16 pair saturation in numpy, onnxq.verify.kernels.emulate). The gap between this machine's
deployed kernels and the exact quantization is reported too: a gap is a kernel problem, not a quantization one.
"""

from __future__ import annotations

import dataclasses
import html
import platform
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnxq.data.batching import samples_in
from onnxq.config import Tolerance, VerifyConfig
from onnxq.passes.float16.emulation import float16_emulation, holds_float16
from onnxq.targets import TARGETS, covered_targets, cpu_flags, cpu_model, cpu_target, resolve_target
from onnxq.verify.kernels.emulate import NodeSaturation, SaturationEmulator, this_cpu_saturates
from onnxq.verify.tasks.detection_sets import aligned_pairs, sets_of
from onnxq.verify.metrics import MetricsAccumulator, Operand
from onnxq.verify.outcome import REPORTED, JudgedChecks, OutputCheck, checks_of
from onnxq.verify.tasks.user_metric import TaskAccumulator, TaskMetric, TaskMetrics
from onnxq.verify.tasks.types import OutputTask
from onnxq.verify.tasks.rules import accumulator
from onnxq.verify.verdict import NOT_SHOWN, OUT, WITHIN
from onnxq.targets.providers import short_provider_name

__all__ = ["TargetCheck", "Coverage", "CoverageRun", "platform_info"]

_HOW_RUN = "ran on this CPU (ORT's deployed kernels)"
# How a target off this machine is checked, by its Target.checked_by (targets.registry.CHECKS).
_HOW = {"exact": ("exact quantization (ORT_DISABLE_ALL, less any emulated AVX2 saturation): these kernels add every "
                  "product exactly in int32"),
        "emulated": "emulated: AVX2 U8S8 int16 pair saturation in numpy, added to the exact quantization"}
# This CPU's kernels may lose this much mean cosine to float against the exact quantization before the summary
# says the kernels, not the quantization, cost accuracy. Rounding differences between ORT's fused and unfused
# float ops flip single quantization steps, which alone moves MiniLM's outputs by ~5e-4 (measured) both ways.
KERNEL_LOSS_LIMIT = 0.001


def platform_info(here: str) -> dict:
    """here: this machine's target, as its kernels behave (see _here)."""
    return {"cpu": cpu_model(), "machine": platform.machine(), "isa_flags": sorted(cpu_flags()),
            "cpu_target": here, "onnxruntime": ort.__version__,
            "providers_available": ort.get_available_providers()}


@dataclasses.dataclass(frozen=True)
class TargetCheck(JudgedChecks):
    target: str
    how: str
    outputs: tuple[OutputCheck, ...]
    saturating_nodes: tuple[NodeSaturation, ...] = ()
    task: TaskMetrics | None = None  # verify.task_metric on this target's outputs

    def to_dict(self) -> dict:
        return {"target": self.target, "how": self.how, "passed": self.passed, "verdict": self.verdict,
                "outputs": {o.name: o.to_dict() for o in self.outputs},
                "saturating_nodes": [n.to_dict() for n in self.saturating_nodes],
                "task": None if self.task is None else self.task.to_dict()}


@dataclasses.dataclass(frozen=True)
class Coverage:
    platform: dict
    target: str
    exact: tuple[OutputCheck, ...]  # the exact quantization vs float
    kernel_gap: tuple[OutputCheck, ...]  # deployed on this CPU vs the exact quantization (metrics only)
    # Per output whose cosine gates: mean cosine to float of the exact quantization minus that of this CPU's
    # deployed kernels.
    kernel_loss: dict[str, float]
    targets: tuple[TargetCheck, ...]
    saturation: tuple[NodeSaturation, ...]  # per integer product, AVX2 emulation

    @property
    def kernels_cost_accuracy(self) -> bool:
        return any(loss > KERNEL_LOSS_LIMIT for loss in self.kernel_loss.values())

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.targets)

    @property
    def failed(self) -> bool:
        return any(t.failed for t in self.targets)

    def unshown(self) -> list[tuple[str, str]]:
        """(target, reason) for each reason a target's check shows no verdict."""
        return [(t.target, reason) for t in self.targets
                for reason in [u for o in t.outputs for u in o.unshown] + list(t.task.unshown if t.task else ())]

    def failures(self) -> list[str]:
        lines = []
        for t in self.targets:
            nodes = ", ".join(n.name for n in sorted(t.saturating_nodes, key=lambda n: -n.saturated)[:5])
            culprit = f" — saturating nodes: {nodes}" if nodes else ""
            found = [f"{o.name} {'; '.join(o.failures)}" for o in t.outputs if o.failures]
            found += [] if t.task is None else list(t.task.failures)
            lines += [f"on {t.target} ({t.how.split(':')[0]}): {failure}{culprit}" for failure in found]
        return lines

    def text(self) -> list[str]:
        """Summary lines: where the check holds, the kernels' gap, AVX2 saturation, failures."""
        info = self.platform
        lines = [f"checked on:  {info['cpu']} ({', '.join(info['isa_flags']) or 'no int8 ISA flags'}; "
                 f"kernels of {info['cpu_target']}), onnxruntime {info['onnxruntime']}; target {self.target}:"]
        for t in self.targets:
            verdict = {WITHIN: "ok", OUT: "OUT OF TOLERANCE", NOT_SHOWN: "NOT SHOWN"}[t.verdict]
            lines.append(f"  {t.target:<9} {verdict:<16} {t.how.split(':')[0]}")
        worst = max(self.kernel_loss.items(), key=lambda kv: kv[1], default=None)
        if worst is not None:
            exact = next(o.metrics.cosine_mean for o in self.exact if o.name == worst[0])
            blame = "  ! the kernels, not the quantization, cost accuracy" if self.kernels_cost_accuracy else ""
            lines.append(f"  this CPU's kernels vs the exact quantization: {worst[0]} cosine to float "
                         f"{exact - worst[1]:.4f} deployed, {exact:.4f} exact{blame}")
        risky = [n for n in self.saturation if n.can_saturate]
        saturating = sorted((n for n in risky if n.saturated), key=lambda n: -n.fraction)
        # No line without U8S8 integer products (weight-only 4-bit models have none).
        if self.saturation and not risky:
            lines.append(f"  AVX2 U8S8 saturation: impossible in all {len(self.saturation)} integer products "
                         "(K pairs within ±128)")
        elif risky:
            listed = "".join(f"\n    {n.name}: {n.fraction:.2%} of pair sums, max error {n.max_abs_error:.3g}"
                            for n in saturating[:5])
            lines.append(f"  AVX2 U8S8 saturation: {len(saturating)} of {len(self.saturation)} integer products "
                         f"saturate{listed}")
        lines += [f"  ! {line}" for line in self.failures()]
        return lines

    def html(self) -> str:
        rows = "".join(f"<tr><td>{html.escape(t.target)}</td><td class='{_CLASS[t.verdict]}'>"
                       f"{'ok' if t.passed else t.verdict}</td><td>{html.escape(t.how)}</td></tr>"
                       for t in self.targets)
        info = self.platform
        return (f"<h3>Where it holds: target {html.escape(self.target)}</h3><p>Checked on {html.escape(info['cpu'])} "
                f"({html.escape(', '.join(info['isa_flags']) or 'no int8 ISA flags')}; kernels of "
                f"{html.escape(info['cpu_target'])}), onnxruntime {html.escape(info['onnxruntime'])}.</p><table><tr>"
                f"<th>target</th><th>result</th><th>how</th></tr>{rows}</table>")

    def to_dict(self) -> dict:
        return {"platform": self.platform, "target": self.target,
                "exact": {o.name: o.to_dict() for o in self.exact},
                "kernel_gap": {o.name: o.to_dict() for o in self.kernel_gap},
                "kernel_loss": self.kernel_loss,
                "targets": [t.to_dict() for t in self.targets],
                "saturation": [n.to_dict() for n in self.saturation]}


# A target's result as the HTML colours it: amber where the data cannot show a bar (not a failure).
_CLASS = {WITHIN: "ok", OUT: "fail", NOT_SHOWN: "warn"}


class CoverageRun:
    """Fed batch by batch with the float outputs and this CPU's deployed outputs; runs the exact quantization and,
    when a covered target is AVX2 and this CPU is not, the emulation."""

    def __init__(self, quant_model: ir.Model, names: Sequence[str], config: VerifyConfig, target: str,
                 task: TaskMetric | None = None, tasks: Mapping[str, OutputTask] | None = None,
                 tolerance_for: Callable[[str], Tolerance] | None = None) -> None:
        """tasks: each output's task metric (verify.tasks.rules); tolerance_for: the tolerances with their task bars
        resolved (verify.outcome.task_tolerances), else the config's."""
        self.names = list(names)
        self.tasks = dict(tasks or {})
        self.sets = sets_of(self.tasks)  # detection sets: rows matched before comparing
        self.tolerance_for = tolerance_for or config.tolerance_for
        self.task = task
        self.config = config
        self.target = target
        saturates = this_cpu_saturates()
        self.here = _here(saturates)
        self.targets = covered_targets(target)
        # A float16 model's exact arithmetic rounds every float16 value (ORT's CPU would not: passes.float16.emulation).
        exact = float16_emulation(quant_model) if holds_float16(quant_model) else quant_model
        self._emulator = SaturationEmulator(exact, self.names, base_saturates=saturates)
        self._emulate = any(TARGETS[t].checked_by == "emulated" for t in self.targets if t != self.here)
        self._exact = self._accumulators()
        self._gap = self._accumulators()
        self._emulated = self._accumulators()
        self._task = {kind: None if task is None else TaskAccumulator(task) for kind in ("exact", "emulated")}

    def _accumulators(self) -> dict[str, MetricsAccumulator]:
        return {n: accumulator(self.tasks.get(n)) for n in self.names}

    def add(self, batch, expected: Sequence[np.ndarray | Operand], deployed: Sequence[np.ndarray | Operand],
            expected_task: float | list | None = None) -> None:
        """expected_task: the task metric's answer on the float outputs (with a task metric)."""
        base, emulated, exact = self._emulator.run(batch)
        self._add_task("exact", exact or base, batch, expected_task)
        exact = [Operand(x, e.sample_axis if isinstance(e, Operand) else 0) for x, e in zip(exact or base, expected)]
        for name, e, x in aligned_pairs(self.names, expected, exact, self.sets):
            self._exact[name].add(e, x)
        for name, x, d in aligned_pairs(self.names, exact, deployed, self.sets):
            self._gap[name].add(x, d)
        if self._emulate:
            self._add_task("emulated", emulated or base, batch, expected_task)
            for name, e, m in aligned_pairs(self.names, expected, emulated or base, self.sets):
                self._emulated[name].add(e, m)

    def _add_task(self, kind: str, outputs: Sequence[np.ndarray], batch, expected: float | list | None) -> None:
        if self.task is not None:
            samples = samples_in(batch)
            self._task[kind].add(expected, self.task(self.names, outputs, samples), samples)

    def result(self, deployed_checks: tuple, deployed_task: TaskMetrics | None = None,
               providers: Mapping[str, tuple[tuple, TaskMetrics | None]] | None = None) -> Coverage:
        """deployed_*: this CPU's checks (ORT_ENABLE_ALL); providers: every other provider verified, its checks
        and task metrics, for the targets deployed there (targets.cuda)."""
        exact = checks_of(self._exact, self.tolerance_for)
        gap = checks_of(self._gap, lambda _: REPORTED)
        deployed = {o.name: o.metrics.cosine_mean for o in deployed_checks}
        # Over the outputs whose cosine gates: a cache judged through the logits, a detection set's zero rows for a
        # missing detection, move their cosine by what no kernel costs.
        loss = {o.name: o.metrics.cosine_mean - deployed[o.name] for o in exact
                if self.tolerance_for(o.name).min_cosine is not None}
        by_check = {"exact": exact, "emulated": checks_of(self._emulated, self.tolerance_for)}
        checks = [self._check(t, (deployed_checks, deployed_task), by_check, providers or {}) for t in self.targets]
        return Coverage(platform_info(self.here), resolve_target(self.target), exact, gap, loss, tuple(checks),
                        self._emulator.nodes)

    def _check(self, target: str, deployed: tuple, by_check: Mapping[str, tuple],
               providers: Mapping[str, tuple]) -> TargetCheck:
        """How one target is checked: run here, run on its provider, or the exact / emulated arithmetic."""
        nodes = tuple(n for n in self._emulator.nodes if n.saturated) if TARGETS[target].saturates_u8s8 else ()
        if target == self.here:
            return TargetCheck(target, _HOW_RUN, deployed[0], nodes, deployed[1])
        how, provider = TARGETS[target].checked_by, TARGETS[target].provider
        if how == "provider" and provider in providers:
            outputs, task = providers[provider]
            return TargetCheck(target, f"ran on {short_provider_name(provider)} (ORT's deployed kernels)",
                               outputs, nodes, task)
        kind = "exact" if how == "provider" else how
        task = self._task[kind]
        return TargetCheck(target, TARGETS[target].exact_check or _HOW[how], by_check[kind], nodes,
                           None if task is None else task.result())


def _here(saturates: bool) -> str:
    """This machine's target: the kernel's own answer decides saturation; the flags the CPU family."""
    return cpu_target(saturates, cpu_flags())
