"""--check-speed, per node kind: a kind of quantized node whose integer kernel is slower than float on this CPU is
kept float, by measurement (never by a table that another CPU would contradict).

The kinds are what ORT runs on different kernels: MatMul, Gemm, and Conv as depthwise, 1×1 and k×k (MLAS has a
depthwise QLinearConv kernel and a GEMM one; on an AVX2 EPYC the depthwise one ran far slower than float NCHWc Conv,
docs/guides/cnns.md). Each kind, most nodes first, is tried float on top of the decisions so far; the two models take
turns on one verification batch and the kind goes float when that is faster by more than MARGIN twice in a row.
Then the model as chosen is timed against every kind float, and the kinds left quantized go float while it is
slower by the same rule (WholeModel): costs within the noise one by one can add up. Only those within the noise: a
kind its own timing found faster quantized by more than MARGIN stays quantized whatever the whole model's timing
says (on a shared machine one timing of the whole model can swing past a tie; the decision never goes against the
measurement of the kind itself). The chosen model is verified
like any search's candidate, so the gate still decides. A model written in float16 (target cuda) is first timed
against itself in float32 (ComputeTiming), by the same rule."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import onnx_ir as ir

from onnxq.data.specs import Batch
from onnxq.handlers.conv import is_depthwise
from onnxq.handlers.plan import NodePlan
from onnxq.handlers.registry import product_op_types
from onnxq.report.record import escape
from onnxq.search.build import Builder, Built, Overrides
from onnxq.verify.speed.latency import check_speed
from onnxq.targets.providers import short_provider_name

__all__ = ["MARGIN", "node_kind", "KindTiming", "WholeModel", "SpeedByKind", "choose_kinds", "ComputeTiming",
           "choose_compute"]

# Faster by less than this is noise on a shared machine: the kind stays quantized (smaller, and as asked).
MARGIN = 0.05


def node_kind(plan: NodePlan, node: ir.Node) -> str | None:
    """The kernel family a planned node runs on, from its float node; None for a node that computes no product (a
    Gather's table)."""
    if node.op_type not in product_op_types() or plan.weight_only:
        return None
    if node.op_type != "Conv":
        return node.op_type
    weight = ir.convenience.get_const_tensor(node.inputs[1])
    if weight is None:
        return "Conv"
    if is_depthwise(node, weight.shape):
        return "Conv depthwise"
    return "Conv 1x1" if all(k == 1 for k in weight.shape[2:]) else "Conv kxk"


@dataclasses.dataclass(frozen=True)
class KindTiming:
    kind: str
    nodes: int
    quantized_ms: float  # the model with this kind quantized (and the kinds decided before as decided)
    float_ms: float  # the same with this kind float
    kept_float: bool

    def text(self) -> str:
        verdict = "kept float" if self.kept_float else "quantized"
        return (f"  {self.kind} ({self.nodes} node(s)): {self.quantized_ms:.2f} ms quantized, {self.float_ms:.2f} ms "
                f"float -> {verdict}")


@dataclasses.dataclass(frozen=True)
class WholeModel:
    """The model the kinds chose timed against every kind float; while it is slower, the kinds that stayed
    quantized go float too, least measured gain first (each kind's own test was within the noise, but their
    costs add up: PP-OCR's classifier kept its 1×1 Convs at 1.93 ms vs 1.86 ms and ended 8 % slower than float)."""

    quantized_ms: float  # the last model timed
    float_ms: float
    kept_float: tuple[str, ...]  # the kinds this step made float
    # The first timing of the model as the kinds chose it (what started the step), where the step changed it.
    first: tuple[float, float] | None = None
    # Kinds left quantized although the whole model was slower: each measured faster quantized by its own timing.
    measured_faster: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"quantized_ms": self.quantized_ms, "float_ms": self.float_ms, "kept_float": list(self.kept_float),
                "first": None if self.first is None else list(self.first),
                "measured_faster": list(self.measured_faster)}

    def text(self) -> str:
        then = f"-> {', '.join(self.kept_float)} kept float too" if self.kept_float else "-> as chosen"
        timed = (f"{self.first[0]:.2f} ms quantized, {self.first[1]:.2f} ms float {then}; then "
                 f"{self.quantized_ms:.2f} vs {self.float_ms:.2f} ms" if self.first else
                 f"{self.quantized_ms:.2f} ms quantized, {self.float_ms:.2f} ms float {then}")
        kept = (f" ({', '.join(self.measured_faster)} kept quantized: faster by its own timing)"
                if self.measured_faster else "")
        return f"  the model as a whole: {timed}{kept}"


@dataclasses.dataclass(frozen=True)
class SpeedByKind:
    """The report section: each kind's timing and decision on this CPU, then the whole model's."""

    provider: str
    timings: tuple[KindTiming, ...]
    float_nodes: tuple[str, ...]
    whole: WholeModel | None = None  # None: every kind went float by its own timing
    key: str = "speed_by_kind"

    def kept_float(self) -> list[str]:
        return [t.kind for t in self.timings if t.kept_float] + list(self.whole.kept_float if self.whole else ())

    def to_dict(self) -> dict:
        return {"provider": self.provider, "margin": MARGIN, "float_nodes": list(self.float_nodes),
                "kinds": [dataclasses.asdict(t) for t in self.timings],
                "whole_model": None if self.whole is None else self.whole.to_dict()}

    def text(self) -> list[str]:
        kept = self.kept_float()
        head = (f"speed by node kind on {short_provider_name(self.provider)} (each kind float vs "
                f"quantized, interleaved): {'kept float: ' + ', '.join(kept) if kept else 'every kind quantized'}")
        return [head, *(t.text() for t in self.timings), *([self.whole.text()] if self.whole else [])]

    def html(self) -> str:
        rows = "".join(f"<tr><td>{escape(t.kind)}</td><td>{t.nodes}</td><td>{t.quantized_ms:.2f}</td>"
                       f"<td>{t.float_ms:.2f}</td><td>{'kept float' if t.kept_float else 'quantized'}</td></tr>"
                       for t in self.timings)
        whole = "" if self.whole is None else f"<p>{escape(self.whole.text().strip())}</p>"
        return ("<h2>Speed by node kind</h2><table><tr><th>kind</th><th>nodes</th><th>quantized ms</th>"
                f"<th>float ms</th><th>decision</th></tr>{rows}</table>{whole}")


@dataclasses.dataclass(frozen=True)
class ComputeTiming:
    """--check-speed's first question for a model written in float16 (target cuda): is it faster than the same
    model in float32 on the provider it is deployed on? float32 is kept when float16 is slower by more than MARGIN
    twice (the report section "speed_by_compute")."""

    provider: str
    float16_ms: float
    float32_ms: float
    kept_float32: bool
    key: str = "speed_by_compute"

    def to_dict(self) -> dict:
        return {"provider": self.provider, "margin": MARGIN, "float16_ms": self.float16_ms,
                "float32_ms": self.float32_ms, "kept_float32": self.kept_float32}

    def text(self) -> list[str]:
        verdict = "float32 kept" if self.kept_float32 else "float16"
        return [f"speed by compute on {short_provider_name(self.provider)}: float16 {self.float16_ms:.2f} "
                f"ms, float32 {self.float32_ms:.2f} ms -> {verdict}"]

    def html(self) -> str:
        return f"<h2>Speed by compute</h2><p>{escape(self.text()[0])}</p>"


def choose_compute(builder: Builder, model: ir.Model, batch: Batch, provider: str,
                   rounds: int = 10) -> tuple[ComputeTiming, Built | None]:
    """(the timing, the model built in float32 — None when float16 stays)."""
    wide = builder.build(Overrides(compute="float32"))
    float16_ms, float32_ms, slower = _slower_twice(model, wide.model, batch, provider, rounds)
    return ComputeTiming(provider, float16_ms, float32_ms, slower), wide if slower else None


@dataclasses.dataclass
class _Choice:
    """The decisions so far: the float nodes, and the model built with them (built None: the model as quantized)."""

    model: ir.Model
    floats: list[str]
    built: Built | None = None

    def take(self, names: Sequence[str], built: Built) -> None:
        """names float too, as built."""
        self.floats += names
        self.model, self.built = built.model, built


def choose_kinds(builder: Builder, plans: Sequence[NodePlan], model: ir.Model, batch: Batch, provider: str,
                 rounds: int = 10) -> tuple[SpeedByKind, Built | None]:
    """(the timings, the model with the slow kinds float — None when every kind stays quantized)."""
    kinds: dict[str, list[str]] = {}
    float_nodes = {n.name: n for n in builder.float_model.graph.all_nodes()}  # a body's nodes too
    for plan in plans:
        kind = node_kind(plan, float_nodes[plan.node.name])
        if kind is not None:
            kinds.setdefault(kind, []).append(plan.node.name or "")
    choice, timings = _Choice(model, []), []
    for kind, names in sorted(kinds.items(), key=lambda item: -len(item[1])):
        candidate = builder.build(Overrides(float_nodes=tuple(choice.floats + names)))
        quantized_ms, float_ms, slower = _slower_twice(choice.model, candidate.model, batch, provider, rounds)
        timings.append(KindTiming(kind, len(names), quantized_ms, float_ms, slower))
        if slower:
            choice.take(names, candidate)
    whole = _whole_model(builder, choice, timings, kinds, (batch, provider, rounds))
    return SpeedByKind(provider, tuple(timings), tuple(choice.floats), whole), choice.built


def _whole_model(builder: Builder, choice: _Choice, timings: list[KindTiming], kinds: dict[str, list[str]],
                 timing: tuple[Batch, str, int]) -> WholeModel | None:
    """WholeModel's rule on the choice (changed in place); None when no kind stayed quantized."""
    quantized = [t for t in timings if not t.kept_float]
    if not quantized:
        return None
    # Candidates: the kinds within the noise of float by their own timing, least measured gain first.
    remaining = sorted((t for t in quantized if not _clearly_faster(t)), key=lambda t: t.float_ms / t.quantized_ms)
    all_float = builder.build(Overrides(float_nodes=tuple(n for names in kinds.values() for n in names))).model
    made_float: list[str] = []
    first = None
    while True:
        quantized_ms, float_ms, slower = _slower_twice(choice.model, all_float, *timing)
        first = first or (quantized_ms, float_ms)
        if not slower or not remaining:
            faster = tuple(t.kind for t in quantized if _clearly_faster(t)) if slower else ()
            return WholeModel(quantized_ms, float_ms, tuple(made_float), first if made_float else None, faster)
        kind = remaining.pop(0).kind
        made_float.append(kind)
        choice.take(kinds[kind], builder.build(Overrides(float_nodes=tuple(choice.floats + kinds[kind]))))


def _clearly_faster(timing: KindTiming) -> bool:
    """The kind ran faster quantized than float by more than MARGIN in its own timing."""
    return timing.float_ms > timing.quantized_ms * (1 + MARGIN)


def _slower_twice(quantized: ir.Model, floating: ir.Model, batch: Batch, provider: str,
                  rounds: int) -> tuple[float, float, bool]:
    """(ms quantized, ms float, slower by more than MARGIN in two measurements): one noisy round of medians must
    not decide."""
    quantized_ms, float_ms = _timed(quantized, floating, batch, provider, rounds)
    if quantized_ms > float_ms * (1 + MARGIN):
        quantized_ms, float_ms = _timed(quantized, floating, batch, provider, rounds)
    return quantized_ms, float_ms, quantized_ms > float_ms * (1 + MARGIN)


def _timed(quantized: ir.Model, floating: ir.Model, batch: Batch, provider: str, rounds: int) -> tuple[float, float]:
    """(ms with the kind quantized, ms with it float): interleaved medians (verify.speed.latency)."""
    timing = check_speed(quantized, floating, batch, [provider], rounds)[0]
    return timing.float_ms, timing.quantized_ms  # check_speed names its first model "float"
