"""A large model run a segment of nodes at a time, each segment its own session over the weights it reads.

Why: a session without graph optimizations computes on the model's memory-mapped weights in place (io.ort_model),
but one run of the whole graph touches every weight, so all of them are resident at its end — the whole float
model counted in the process's memory in every calibration, reference and sensitivity run. Run segment by segment,
with each segment's memory-mapped weights paged out once it has run (the next run faults them back from the page
cache), at most one segment's weights are resident; what passes between segments is the activations at the cuts.
The same cut is what a model larger than memory needs: its weights are read from the file as each segment runs.

The plan is data (Segment: the names each segment reads, makes and owns); the session acts on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx_ir as ir
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from onnxq.io.memory import hold_mmap_threshold, trim_heap

__all__ = ["Segment", "plan_segments", "SegmentedSession", "segment_budget", "SEGMENT_FROM_BYTES"]

# Models with fewer bytes of weights run whole: the saving is small beside the interpreter's and ORT's own memory
# (about 150 MB), and every model the default tests use stays on the one-session path.
SEGMENT_FROM_BYTES = 256 << 20
# An eighth of the weights resident at a time, no segment under 64 MB: fewer, larger segments cost fewer runs.
_SEGMENTS = 8
_MIN_SEGMENT_BYTES = 64 << 20


def segment_budget(weight_bytes: int) -> int | None:
    """The bytes of weights one segment may read, or None: run the model whole."""
    if weight_bytes < SEGMENT_FROM_BYTES:
        return None
    return max(_MIN_SEGMENT_BYTES, weight_bytes // _SEGMENTS)


@dataclasses.dataclass(frozen=True)
class Segment:
    """A run of consecutive main-graph nodes: the values it reads from the graph's inputs and earlier segments,
    the values it makes for later segments and the graph's outputs, the initializers its nodes (bodies included)
    read."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    initializers: tuple[str, ...]


def plan_segments(graph: ir.Graph, budget_bytes: int) -> list[Segment]:
    """The main graph's nodes, in their (topological) order, cut wherever the next node's new initializers would take
    the segment past budget_bytes (a node over the budget alone is a segment of its own). [] where the graph cannot
    be cut this way: an output that no node makes (an initializer or an input returned as it is), or a node listed
    before what it reads."""
    produced_by_node = {id(v) for node in graph for v in node.outputs}
    if any(id(v) not in produced_by_node for v in graph.outputs):
        return []
    groups: list[list[ir.Node]] = [[]]
    reads_of: dict[int, list[ir.Value]] = {}
    made: set[int] = set()
    held: set[int] = set()
    size = 0
    for node in graph:
        reads = reads_of[id(node)] = _reads(node, graph)
        if any(id(v) in produced_by_node and id(v) not in made for v in reads):
            return []
        made.update(id(v) for v in node.outputs)
        new = [v for v in reads if v.is_initializer() and id(v) not in held]
        extra = sum(_nbytes(v) for v in new)
        if size and size + extra > budget_bytes:
            groups.append([])
            held, size = set(), 0
        groups[-1].append(node)
        held.update(id(v) for v in new)
        size += extra
    return _segments(graph, groups, reads_of)


def _segments(graph: ir.Graph, groups: list[list[ir.Node]], reads_of: dict[int, list[ir.Value]]) -> list[Segment]:
    """Each group's boundary: what it reads from outside it, and what it makes that later groups or the graph's
    outputs read. reads_of: each node's reads (_reads), by id."""
    index_of = {id(node): i for i, group in enumerate(groups) for node in group}
    wanted_after: dict[int, int] = {id(v): len(groups) for v in graph.outputs}  # value → the last group reading it
    reads = [[v for node in group for v in reads_of[id(node)]] for group in groups]
    for i, values in enumerate(reads):
        for v in values:
            wanted_after[id(v)] = max(wanted_after.get(id(v), -1), i)
    segments = []
    for i, group in enumerate(groups):
        inputs = [v for v in reads[i] if not v.is_initializer() and
                  (v.producer() is None or index_of[id(v.producer())] != i)]
        outputs = [v for node in group for v in node.outputs if wanted_after.get(id(v), -1) > i]
        initializers = [v for v in reads[i] if v.is_initializer()]
        segments.append(Segment(_names(inputs), _names(outputs), _names(initializers)))
    return segments


def _reads(node: ir.Node, graph: ir.Graph) -> list[ir.Value]:
    """The main-graph values a node reads: its inputs and what its bodies read from the main graph."""
    values = [v for v in node.inputs if v is not None]
    for attr in node.attributes.values():
        if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            subgraphs = [attr.value] if attr.type == ir.AttributeType.GRAPH else list(attr.value)
            values += [v for sub in subgraphs for inner in sub.all_nodes() for v in inner.inputs
                       if v is not None and v.graph is graph]
    return values


def _nbytes(value: ir.Value) -> int:
    tensor = value.const_value
    return 0 if tensor is None else tensor.nbytes


def _names(values: list[ir.Value]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v.name for v in values))


SessionMaker = Callable[[ir.Model, Sequence[str]], object]  # (segment model, its initializers) → a session


class SegmentedSession:
    """A session's run() over segments run in turn, each by a session of its own, made when first needed (the types
    of a cut's values ONNX cannot infer, a contrib op's output, are read from the arrays that reach it). After a
    segment runs, `page_out(names)` drops its memory-mapped weights from resident memory. get_inputs() and
    get_outputs() describe the whole model."""

    def __init__(self, model: ir.Model, segments: list[Segment], make: SessionMaker,
                 page_out: Callable[[Sequence[str]], None]) -> None:
        self._model, self._segments, self._make, self._page_out = model, segments, make, page_out
        self._sessions: list[object | None] = [None] * len(segments)
        # A value is dropped once the last segment reading it has run.
        self._last_read = {name: i for i, s in enumerate(segments) for name in s.inputs}
        self._inputs = [_Arg.of(v) for v in model.graph.inputs if not v.is_initializer()]
        self._outputs = [_Arg.of(v) for v in model.graph.outputs]
        self._known = {a.name for a in (*self._inputs, *self._outputs)}.union(*(s.outputs for s in segments))
        hold_mmap_threshold()  # the segments' sessions run without an arena: their large buffers mapped, not heaped

    def get_inputs(self) -> list[_Arg]:
        return self._inputs

    def get_outputs(self) -> list[_Arg]:
        return self._outputs

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, np.ndarray], run_options=None):
        """As InferenceSession.run; each segment's session runs with its own run options."""
        names = [o.name for o in self._outputs] if output_names is None else list(output_names)
        unknown = [n for n in names if n not in self._known]
        if unknown:
            raise InvalidArgument(f"Invalid output name: {unknown[0]}")
        values = dict(input_feed)
        results: dict[str, np.ndarray] = {}
        for i, segment in enumerate(self._segments):
            feed = {n: values[n] for n in segment.inputs if n in values}  # ORT names what is missing
            session = self._sessions[i] or self._session(i, feed)
            made = session.run(list(segment.outputs), feed)
            self._page_out(segment.initializers)
            values.update(zip(segment.outputs, made))
            results.update((n, values[n]) for n in names if n in values)
            for name in [n for n in values if self._last_read.get(n, -1) <= i and n not in input_feed]:
                del values[name]  # nothing later reads it
        trim_heap()  # the segments' buffers, freed to glibc's heap, go back (SmolLM2's sensitivity: 1.40 -> 1.28 GB)
        return [results[n] for n in names]

    def _session(self, i: int, feed: Mapping[str, np.ndarray]) -> object:
        segment = self._segments[i]
        graph = ir.convenience.extract(self._model.graph, list(segment.inputs), list(segment.outputs))
        for value in graph.inputs:
            if value.name in feed and value.producer() is None and value.type is None:
                value.dtype = ir.DataType.from_numpy(np.asarray(feed[value.name]).dtype)
        model_io = {a.name for a in (*self._inputs, *self._outputs)}
        for value in [*graph.inputs, *graph.outputs]:
            if value.name not in model_io:
                value.shape = None  # a cut's shape as inferred may fix dimensions the data varies
        model = ir.Model(graph, ir_version=self._model.ir_version, functions=list(self._model.functions.values()))
        self._sessions[i] = self._make(model, segment.initializers)
        return self._sessions[i]


@dataclasses.dataclass(frozen=True)
class _Arg:
    """What callers read of onnxruntime's NodeArg: name, shape (ints, names or None), type."""
    name: str
    shape: list
    type: str

    @classmethod
    def of(cls, value: ir.Value) -> _Arg:
        shape = [] if value.shape is None else [d if isinstance(d, int) else (d.value if d.value else None)
                                                 for d in value.shape]
        element = value.dtype.name.lower() if value.dtype is not None else "undefined"
        return cls(value.name, shape, f"tensor({element})")
