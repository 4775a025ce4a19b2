"""Per-layer sensitivity: the end-to-end error each quantized node causes on its own.

One ONNX Runtime session over a "switch model": every planned node exists twice, quantized (rewritten by the
same passes as the real model) and float, and a boolean graph input per node selects which output flows on
(Where). Run once with every switch off (the float model, which also yields each node's local error: its
quantized twin sees float inputs), then once per node with only that switch on. One session, N + 1 runs on a
few samples: about 10 s for MiniLM's 38 nodes and 6 groups on 16 sentences.

The session runs ORT's deployed kernels (ORT_ENABLE_ALL: what the gate judges) when ORT fuses every quantized twin
of the switch model into the kernel it runs in the real model; otherwise the exact quantization (ORT_DISABLE_ALL),
and the result says so.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnxq.data.batching import pieces, samples_in, take
from onnxq.data.specs import Batch
from onnxq.handlers.plan import NodePlan
from onnxq.io import OrtModel
from onnxq.io.irquery import bodies, model_names, unique_name
from onnxq.io.sessions import session_options
from onnxq.targets.providers import CPU_PROVIDER
from onnxq.passes.graph.bodies import body_as_model
from onnxq.passes.forms.registry import RewriteInputs
from onnxq.passes.forms.quantize import QuantizePass
from onnxq.report.record import bar_chart, escape, share_level
from onnxq.search.build import Builder
from onnxq.search.local_error import LocalSums, add_local_sums
from onnxq.verify.runner import (OUTPUT_BUDGET, OutputComparison, OutputMetrics, TaskMetric, TaskMetrics,
                                 bar_budgets, finite_or_none, gate_tasks, profiled_session, reference_store,
                                 task_metric)
from onnxq.verify.tasks.types import OutputTask

__all__ = ["NodeSensitivity", "Sensitivity", "layer_sensitivity", "group_pattern", "ranked"]

logger = logging.getLogger(__name__)

_TOP_NODES = 8  # nodes the summary lists
_TOP_OUTPUTS = 4  # outputs each listed node shows: those with a task first, then the lowest cosines

_SWITCH = "onnxq_switch_{}"
_KEPT = "onnxq.sensitivity.kept_twin"  # value.meta: a twin's output held as a graph output while the passes run


def _harm(outputs: Mapping[str, OutputMetrics], budgets: Mapping[str, float], task: TaskMetrics | None) -> float:
    """The ranking key: the worst output's 1 - mean cosine, as a share of that output's budget (1 - its
    min_cosine tolerance) when one is given, so that the output with the tightest tolerance weighs most; an output's
    task metric (verify.tasks.rules) as the share of its answer lost per unit of 1 - its bar, and the user's task
    metric's drop per unit of task_max_drop, when worse. An output that is not finite (NaN, inf) is infinitely
    harmful."""
    if not all(m.finite for m in outputs.values()) or (task is not None and not math.isfinite(task.drop)):
        return math.inf
    harm = max(((1.0 - m.cosine_mean) / budgets.get(name, 1.0) for name, m in outputs.items()), default=0.0)
    lost = max(((1.0 - m.task_agreement) / budgets.get(f"task:{name}", 1.0) for name, m in outputs.items()
                if m.task), default=0.0)
    harm = max(harm, lost)
    return harm if task is None else max(harm, task.drop / max(task.max_drop, 1e-6))


@dataclasses.dataclass(frozen=True)
class NodeSensitivity:
    name: str
    op_type: str
    # Every model output when only this node is quantized, against the float model.
    outputs: dict[str, OutputMetrics]
    # The node's own output, quantized twin vs float, both on float inputs.
    local_sqnr_db: float
    harm: float
    task: TaskMetrics | None = None  # verify.task_metric when only this node is quantized

    @property
    def displacement(self) -> float:
        """How far the node alone moves the outputs (the worst 1 − mean cosine): what orders nodes whose harm ties —
        a task metric counts whole answers (one string of 64 is 1/64), and many nodes change the same number."""
        return max((1.0 - m.cosine_mean for m in self.outputs.values()), default=0.0)

    def to_dict(self) -> dict:
        return {"name": self.name, "op_type": self.op_type, "harm": finite_or_none(self.harm),
                "local_sqnr_db": finite_or_none(self.local_sqnr_db),
                "outputs": {k: m.to_dict() for k, m in self.outputs.items()},
                "task": None if self.task is None else self.task.to_dict()}


def ranked(nodes: Sequence[NodeSensitivity]) -> tuple[NodeSensitivity, ...]:
    """Most harmful first; among equal harms (whole answers changed), the one that moves the outputs most."""
    return tuple(sorted(nodes, key=lambda s: (-s.harm, -s.displacement, s.name)))


@dataclasses.dataclass(frozen=True)
class GroupSensitivity:
    """Nodes of the same role in every layer (names equal once digits are replaced by *), quantized together."""

    pattern: str
    members: tuple[str, ...]
    outputs: dict[str, OutputMetrics]
    harm: float
    task: TaskMetrics | None = None

    def to_dict(self) -> dict:
        return {"pattern": self.pattern, "members": list(self.members), "harm": finite_or_none(self.harm),
                "outputs": {k: m.to_dict() for k, m in self.outputs.items()},
                "task": None if self.task is None else self.task.to_dict()}


@dataclasses.dataclass(frozen=True)
class Sensitivity:
    samples: int
    nodes: tuple[NodeSensitivity, ...]  # most harmful first
    groups: tuple[GroupSensitivity, ...]  # most harmful first
    # Ranked on ORT's deployed kernels on this CPU, or on the exact quantization (ORT_DISABLE_ALL), and why.
    kernels: str = "exact"
    kernels_reason: str = ""
    # Whether every node was ranked alone; else (groups only) `nodes` holds the nodes alone in their group.
    per_node: bool = True
    # Each node's own output error, quantized twin against float on float inputs (dB): measured for every node
    # in the one all-off pass, whether or not it was ranked alone (what orders a group's members for the fallback).
    local_sqnr_db: Mapping[str, float] = dataclasses.field(default_factory=dict)
    key = "sensitivity"  # report.Section

    def to_dict(self) -> dict:
        return {"samples": self.samples, "kernels": self.kernels, "kernels_reason": self.kernels_reason,
                "nodes": [n.to_dict() for n in self.nodes], "groups": [g.to_dict() for g in self.groups]}

    def text(self) -> list[str]:
        lines = []
        if self.nodes:
            lines.append(f"most sensitive nodes (each quantized alone, {self.samples} samples, {self._on}; harm = the "
                         f"share of its tolerance the worst output uses, 1.0 = at the bar{self._task_words}):")
        for node in self.nodes[:_TOP_NODES]:
            shown = sorted(node.outputs.items(), key=lambda item: (not item[1].task, item[1].cosine_mean))
            cosines = " ".join(f"{k[:18]}={m.cosine_mean:.4f}" + (f" {m.task} {m.task_agreement:.4f}" if m.task else "")
                               for k, m in shown[:_TOP_OUTPUTS])
            more = f" … {len(shown) - _TOP_OUTPUTS} more outputs" if len(shown) > _TOP_OUTPUTS else ""
            lines.append(f"  {node.harm:8.4f}  {node.name}  ({cosines}{more})")
        if self.groups:
            top = self.groups[0]
            lines.append(f"most sensitive group: {top.pattern} ({len(top.members)} nodes, harm {top.harm:.4f})")
        return lines

    def html(self) -> str:
        parts = [f"<h2>Per-layer sensitivity</h2><p>Each node quantized alone, {self.samples} samples, "
                 f"{escape(self._on)} ({escape(self.kernels_reason)}). Harm is the share of its tolerance the worst "
                 "output uses with only that node quantized (its 1 − cosine, or the share of its task answer lost, "
                 f"against what the bar allows){escape(self._task_words)}: the dashed line at 1.0 is the bar; green "
                 "bars use under half of it, amber more, red past it.</p>",
                 bar_chart([(n.name, n.harm) for n in self.nodes], "harm per node", limit=1.0)]
        rows = "".join(f"<tr><td>{escape(g.pattern)}</td><td>{len(g.members)}</td><td class='{share_level(g.harm)}'>"
                       f"{g.harm:.5f}</td></tr>" for g in self.groups)
        if rows:
            parts.append(f"<h3>Groups quantized together</h3><table><tr><th>group</th><th>nodes</th><th>harm</th>"
                         f"</tr>{rows}</table>")
        return "".join(parts)

    @property
    def _task_words(self) -> str:
        ranked = next((n.task for n in (*self.nodes, *self.groups) if n.task is not None), None)
        return "" if ranked is None else f", or task metric {ranked.metric}'s drop per unit of task_max_drop if worse"

    @property
    def _on(self) -> str:
        return ("on this CPU's deployed kernels" if self.kernels == "deployed"
                else "on the exact quantization")

    def nonfinite(self) -> list[str]:
        """Nodes (or groups) whose quantization alone makes an output NaN or inf."""
        return ([n.name for n in self.nodes if math.isinf(n.harm)]
                + [g.pattern for g in self.groups if math.isinf(g.harm)])


def group_pattern(name: str) -> str:
    return re.sub(r"\d+", "*", name)


def layer_sensitivity(builder: Builder, plans: Sequence[NodePlan], batches: Sequence[Batch], per_node: bool = True,
                      deployed: Mapping[str, str] | None = None, why_exact: str = "",
                      tasks: Mapping[str, OutputTask] | None = None) -> Sensitivity:
    """Nodes and groups ranked most harmful first (nodes' ties by how far they move the outputs, then by name; groups'
    by name: the order is deterministic): each planned node of `plans` quantized alone, as `builder` quantizes it,
    against builder's float graph.

    per_node False ranks the groups, and alone only the nodes alone in their group: one run per group instead of
    one per node. deployed: the kernel each
    quantized node runs as in the real model on this CPU (its placement); given, the ranking runs on the deployed
    kernels when the switch model gets the same ones, else on the exact quantization (Sensitivity.kernels says
    which, and why; why_exact: the reason when deployed is None). tasks: each output's task metric as the
    verification chose it (verify.tasks.rules); None: chosen here on the first batch."""
    model, twins = _switch_model(builder, plans)
    runner = _SwitchRuns(model, [o.name for o in builder.float_model.graph.outputs], twins, batches,
                         (deployed, why_exact), task_metric(builder.effective_config.verify))
    verify = builder.effective_config.verify
    runner.use_tasks(dict(tasks) if tasks is not None else gate_tasks(
        verify, builder.float_model, runner.names, runner.references[0], samples_in(runner.batches[0])))
    budgets = bar_budgets(verify, runner.names, runner.comparison.tasks)
    members: dict[str, list[int]] = {}
    for i, (node_name, *_) in enumerate(twins):
        members.setdefault(group_pattern(node_name), []).append(i)
    local = [math.nan if a is None else a.sqnr_db for a in runner.local]
    alone = {index[0] for index in members.values() if len(index) == 1}  # ranked alone even when groups only
    nodes = []
    for i, (node_name, op_type, *_) in enumerate(twins):
        if per_node or i in alone:
            outputs, task = runner.errors({i})
            nodes.append(NodeSensitivity(node_name, op_type, outputs, local[i], _harm(outputs, budgets, task), task))
    groups = []
    for pattern, index in members.items():
        if len(index) > 1:
            outputs, task = runner.errors(set(index))
            groups.append(GroupSensitivity(pattern, tuple(twins[i][0] for i in index), outputs,
                                           _harm(outputs, budgets, task), task))
    return Sensitivity(samples=sum(samples_in(b) for b in batches),
                       nodes=ranked(nodes),
                       groups=tuple(sorted(groups, key=lambda g: (-g.harm, g.pattern))),
                       kernels=runner.kernels, kernels_reason=runner.kernels_reason, per_node=per_node,
                       local_sqnr_db={twin[0]: sqnr for twin, sqnr in zip(twins, local)})


class _SwitchRuns:
    """One session over the switch model: the all-off run (each model output's reference and every twin pair's
    local error), then one run per set of switches on. Both sides of every comparison come from the same session,
    so the float parts' kernels cancel out and only the switched nodes differ."""

    def __init__(self, model: ir.Model, names: list[str], twins: list[tuple[str, str, str, str]],
                 batches: Sequence[Batch], kernels: tuple[Mapping[str, str] | None, str],
                 metric: TaskMetric | None) -> None:
        self.names, self.batches, self.metric = names, list(batches), metric
        # Compared as the gate compares, by each output's task metric (set by the caller: use_tasks).
        self.comparison = OutputComparison(names, {}, metric)
        self.switches = [_SWITCH.format(i) for i in range(len(twins))]
        all_on = self._feed(batches[0], set(range(len(twins))))
        self.session, self.kernels, self.kernels_reason = _session(model, twins, all_on, kernels)
        local_outputs = [name for twin in twins if twin[2] for name in twin[2:]]
        self.batches = self._fitted(names + local_outputs)
        # The all-off outputs, on disk beyond the float reference's budget (a decoder's logits: 25 MB a window).
        self.references, self.task_references = reference_store(model), []
        # A body's twins have no local error (their sums are not graph outputs): None.
        self.local = [LocalSums() if twin[2] else None for twin in twins]
        measured = [sums for sums in self.local if sums is not None]
        for batch in self.batches:
            values = self.session.run(names + local_outputs, self._feed(batch, set()))
            self.references.append(values[:len(names)])
            if metric is not None:  # the float model's answer, once per batch
                self.task_references.append(metric(names, values[:len(names)], samples_in(batch)))
            pairs = values[len(names):]
            for i, sums in enumerate(measured):
                sums.add(pairs[2 * i], pairs[2 * i + 1])
            del values, pairs

    def _fitted(self, fetched: list[str]) -> list[Batch]:
        """The batches cut so that one run's fetched values (the outputs and every twin pair's local sums) hold at
        most OUTPUT_BUDGET bytes: a decoder's logits and 300 twin values of 16 windows took SmolLM2's run from 4.8
        to 11.3 GB. Not for a model whose inputs fix the batch size."""
        first = self.batches[0]
        if samples_in(first) <= 1 or any(isinstance(i.shape[0], int) and i.shape[0] > 1
                                         for i in self.session.get_inputs() if i.shape):
            return self.batches
        one = sum(np.asarray(v).nbytes for v in self.session.run(fetched, self._feed(take(first, slice(0, 1)), set())))
        size = max(1, OUTPUT_BUDGET // max(one, 1))
        return [piece for b in self.batches for piece in pieces(b, size)]

    def _feed(self, batch: Batch, on: set[int]) -> dict:
        return {**batch, **{s: np.array(i in on) for i, s in enumerate(self.switches)}}

    def use_tasks(self, tasks: Mapping[str, OutputTask]) -> None:
        self.comparison = OutputComparison(self.names, tasks, self.metric)

    def errors(self, on: set[int]) -> tuple[dict[str, OutputMetrics], TaskMetrics | None]:
        """Every model output's error with the switches `on` quantized, and the task metric's (None without one)."""
        self.comparison.start()
        for i, (batch, reference) in enumerate(zip(self.batches, self.references)):
            values = self.session.run(self.names, self._feed(batch, on))
            self.comparison.add(reference, values, samples_in(batch),
                                self.task_references[i] if self.metric is not None else None)
        return self.comparison.result()


def _session(model: ir.Model, twins: list[tuple[str, str, str, str]], all_on: Batch,
             kernels: tuple[Mapping[str, str] | None, str]) -> tuple[ort.InferenceSession, str, str]:
    """(session, "deployed" | "exact", why): the deployed kernels (ORT_ENABLE_ALL) when, with every switch on, ORT
    runs each quantized twin as the kernel the real model runs it as; else the exact quantization (no fusion)."""
    deployed, why_exact = kernels
    if deployed is None:
        return _exact(model), "exact", why_exact or "no placement of the deployed model to compare kernels with"
    session, placement = profiled_session(model, CPU_PROVIDER, all_on, {t[0]: t[1] for t in twins})
    differ = [(t[0], None if placement.quantized[t[0]] is None else placement.quantized[t[0]].op_type,
               deployed.get(t[0])) for t in twins]
    differ = [d for d in differ if d[1] != d[2]]
    if differ:
        del session  # its copy of the weights goes before the exact session is made
        name, got, want = differ[0]
        return _exact(model), "exact", (f"with the switches, ORT fuses {len(differ)} node(s) differently from the "
                                        f"deployed model (e.g. {name}: {got} instead of {want})")
    return session, "deployed", "each node's kernel in the switch model is the deployed model's (ORT_ENABLE_ALL)"


def _exact(model: ir.Model) -> ort.InferenceSession:
    # Exact float and QDQ arithmetic, no fusion: the same for every run, so only the switches differ. A wide
    # MatMulNBits stays whole here: with verify.kernels.narrow_view's slices SmolLM2's 4-bit sensitivity peaked no lower
    # (983-985 MiB, against 948-966 whole; Optimum's file, its packed weights on file: 835 MiB with 16 MB slices,
    # 792 with 40 MB, 778 whole, one run each): the lm_head's 108 MiB buffer went, the heap grew as much (508 MiB
    # at the peak against 366). Measured before glibc's mmap threshold was held (io.memory.hold_mmap_threshold),
    # which took the pinned heap away: not measured since.
    return OrtModel(model).session(session_options(optimize=False), [CPU_PROVIDER])


def _switch_model(builder: Builder, plans: Sequence[NodePlan]) -> tuple[ir.Model, list[tuple[str, str, str, str]]]:
    """The float model with each planned node doubled behind a switch; returns (model, [(node name, op type, the
    names of its twins' local sums Σ float² and Σ (quantized − float)²)]). Every output the model reads (LSTM's Y_h
    and Y_c too) is switched; the first is the one whose local error is summed. A node inside an If / Loop / Scan
    body is doubled there, its switch read from the main graph's inputs; its twins' sums cannot be graph outputs (a
    body's values cannot be), so its local error is not measured (names "")."""
    model = builder.float_model.clone()
    model_outputs = len(model.graph.outputs)
    by_name = {n.name: n for n in model.graph.all_nodes()}
    own_plans, pairs = [], []
    for plan in plans:
        node = by_name[plan.node.name]
        pairs.append(_doubled(node, model.graph))
        # A requantized output (Conv's) lies past the switch, where both twins would read it: each node is ranked on
        # its input and weight quantization (a quantized reader's input puts the output's grid in its own rank).
        own_plans.append(dataclasses.replace(plan, node=node, output=None))
    _quantize_twins(model, own_plans, builder)
    _drop_kept_twins(model)
    # By name: a rewrite form may replace a node and its output value (the name stays).
    values = {v.name: v for node in model.graph.all_nodes() for v in node.outputs}
    taken = model_names(model)
    for i, outputs in enumerate(pairs):
        switch = ir.val(_SWITCH.format(i), ir.DataType.BOOL, [])
        model.graph.inputs.append(switch)
        for quantized_name, float_name in outputs:
            graph = values[float_name].producer().graph
            _switch(values[quantized_name], values[float_name], switch,
                    model_outputs if graph is model.graph else len(graph.outputs), taken)
    # The first pair's local sums (search.local_error) take the place of its values among the graph's outputs: none
    # for a body's twins or a dead node's outputs.
    del model.graph.outputs[model_outputs:]
    sums = add_local_sums(model.graph, [(values[outputs[0][0]], values[outputs[0][1]])
                                        if not plan.scope and outputs else None
                                        for plan, outputs in zip(own_plans, pairs)])
    model.graph.sort()
    return model, [(plan.node.name, plan.node.op_type, *names) for plan, names in zip(own_plans, sums)]


def _doubled(node: ir.Node, main: ir.Graph) -> list[tuple[str, str]]:
    """A float twin of the node put before it; (quantized, float) output names for each output it gives. In the
    main graph the first pair also become graph outputs (kept through the passes; their local sums then take their
    place); the twin's other outputs are its graph's outputs while the passes run (_KEPT marks them)."""
    twin = ir.node(node.op_type, list(node.inputs), dict(node.attributes), domain=node.domain,
                   name=f"{node.name}_onnxq_float", num_outputs=len(node.outputs))
    node.graph.insert_before(node, twin)
    pairs, read = [], []
    for given, double in zip(node.outputs, twin.outputs):
        if given.name and (given.uses() or given.is_graph_output()):  # the outputs the model reads
            double.name = f"{given.name}_onnxq_float"
            double.type, double.shape = given.type, given.shape  # a body may need them (SequenceMap's does)
            pairs.append((given.name, double.name))
            read.append((given, double))
    # By the pairs, not by the twin's named outputs: the graph names those it omits too (val_N), and an omitted
    # output of the node (LSTM's Y, named "") made a graph output is one no rewrite can take away.
    if node.graph is main and read:
        main.outputs.extend(read.pop(0))
    for _, double in read:
        double.meta[_KEPT] = True
        node.graph.outputs.append(double)
    return pairs


def _drop_kept_twins(model: ir.Model) -> None:
    """The twins' outputs held as graph outputs for the passes (_KEPT) leave them again: the Where nodes read
    them now."""
    for graph in (model.graph, *(body.graph for body in bodies(model.graph))):
        kept = [v for v in graph.outputs if v.meta.get(_KEPT)]
        for value in kept:
            graph.outputs.remove(value)


def _quantize_twins(model: ir.Model, plans: list[NodePlan], builder: Builder) -> None:
    """The quantize pass on each body's twins as a model of its own (passes.graph.bodies), then on the main graph's — the
    order passes.graph.apply rewrites in."""
    inputs = RewriteInputs(builder.stats.ranges, builder.effective_config, builder.stats.moments)
    by_graph: dict[int, list[NodePlan]] = {}
    for plan in sorted(plans, key=lambda p: p.node.graph is model.graph):
        by_graph.setdefault(id(plan.node.graph), []).append(plan)
    for graph_plans in by_graph.values():
        graph = graph_plans[0].node.graph
        if graph is model.graph:
            QuantizePass(graph_plans, inputs)(model)
            continue
        with body_as_model(model, graph) as body:
            QuantizePass(graph_plans, inputs)(body)


def _switch(quantized: ir.Value, floating: ir.Value, switch: ir.Value, outputs: int, taken: set[str]) -> None:
    """Where(switch, quantized, float) takes the quantized output's place: its readers, and (keeping its name) its
    place among the first `outputs` outputs of its graph — the model's own, past which the main graph lists the
    twins whose local error is read. Its output is named apart from every name in the model (taken): left to
    onnx_ir, it would be val_N, which an exporter's own val_N in an outer graph shadows — a body's reader of that
    outer value would then read the Where, after it: a cycle (an unrolled voice-activity detector's exporter names
    its values so)."""
    graph, name = floating.producer().graph, quantized.name
    where = ir.node("Where", [switch, quantized, floating], name=unique_name(f"{name}_onnxq_switch", taken))
    graph.insert_after(quantized.producer(), where)
    selected = where.outputs[0]
    selected.name = unique_name(f"{name}_onnxq_selected", taken)
    selected.type, selected.shape = floating.type, floating.shape
    for usage in list(quantized.uses()):
        if usage.node is not where:
            usage.node.replace_input_with(usage.idx, selected)
    for j in range(outputs):
        if graph.outputs[j] is quantized:
            graph.outputs[j] = selected
            quantized.name, selected.name = f"{name}_onnxq_quantized", name
