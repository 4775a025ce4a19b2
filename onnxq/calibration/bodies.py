"""Values inside If / Loop / Scan bodies made visible to calibration.

ORT returns only main-graph values, so a body's value is threaded out of its body, level by level, as a "bag": a
1-D tensor of what was observed (its elements flattened, or in reduce mode one [min], [max] or [size] per
execution). An If branch outputs its bag and every other branch an empty one; a Scan or Loop adds a scan output,
one bag per iteration (of one size: a reduced bag is made one element); where a Loop's iterations differ in size,
it carries an accumulator instead (initially empty) that each iteration concatenates its bag onto. In the main
graph each bag is a graph output: empty when the body did not run on the batch (a branch not taken, zero
iterations), which is then no observation at all. Only the copy of the model that calibration runs is changed."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.io.irquery import Body, bodies, unique_name

__all__ = ["BodyValues", "REDUCTIONS"]

# Reduce mode: per execution of a body, the value's minimum, maximum and element count, each as a [1] bag.
REDUCTIONS = ("ReduceMin", "ReduceMax", "Size")


class BodyValues:
    """Threads values of a model's bodies out to its main graph, and reduces values in the graph (the model is
    changed in place)."""

    def __init__(self, model: ir.Model, taken: set[str], loops_stack: bool = True) -> None:
        """loops_stack: a Loop passes bags out as a scan output, one per iteration, like a Scan (linear cost; each
        iteration's bag must have one size), else as a carried accumulator (any sizes; each iteration copies what
        the ones before it gave)."""
        self.taken, self.loops_stack = taken, loops_stack
        self.owner: dict[int, Body] = {id(b.graph): b for b in bodies(model.graph)}

    def owner_graphs(self) -> list[ir.Graph]:
        return [body.graph for body in self.owner.values()]

    def graph_of(self, value: ir.Value) -> ir.Graph | None:
        """The body defining the value (as a node's output or the body's input); None: the main graph."""
        node = value.producer()
        graph = node.graph if node is not None else value.graph
        return graph if graph is not None and id(graph) in self.owner else None

    def observable(self, graph: ir.Graph) -> bool:
        """Whether every body around the graph can pass a bag out (If, Loop, Scan; not e.g. SequenceMap's)."""
        while id(graph) in self.owner:
            body = self.owner[id(graph)]
            if body.owner.op_type not in _THREADS or body.owner.domain not in ("", "ai.onnx"):
                return False
            graph = body.owner.graph
        return True

    def bags(self, value: ir.Value, graph: ir.Graph, reduce: bool) -> list[ir.Value]:
        """Main-graph values holding what the body's value was: [elements], or with reduce [mins, maxs, sizes]."""
        dtype = value.dtype or ir.DataType.FLOAT
        if not reduce:
            flat = self._add(graph, "Reshape", [value, self._const(graph, [-1], np.int64)], dtype)
            return [self._thread(flat, graph, None)]
        made = []
        for op, scalar in zip(REDUCTIONS, self.extremes(value, graph)):
            bag = self._add(graph, "Reshape", [scalar, self._const(graph, [1], np.int64)], scalar.dtype)
            made.append(self._thread(bag, graph, op))
        return made

    def extremes(self, value: ir.Value, graph: ir.Graph) -> list[ir.Value]:
        """The value's minimum, maximum and element count (REDUCTIONS), as scalars computed in `graph` (its own, or
        the main graph for a main-graph value: ORT reduces it there, three scalars come back)."""
        dtype = value.dtype or ir.DataType.FLOAT
        return [self._add(graph, op, [value], ir.DataType.INT64) if op == "Size"
                else self._add(graph, op, [value], dtype, {"keepdims": 0}) for op in REDUCTIONS]

    def _thread(self, bag: ir.Value, graph: ir.Graph, reduction: str | None) -> ir.Value:
        """The bag carried out through each enclosing body up to the main graph. `reduction`: the op that made each
        of its elements (REDUCTIONS), None for elements."""
        while id(graph) in self.owner:
            body = self.owner[id(graph)]
            if body.owner.op_type == "Scan" or body.owner.op_type == "Loop" and self.loops_stack:
                bag = self._stacked(body, self._one(bag, graph, reduction) if reduction else bag)
            else:
                bag = _THREADS[body.owner.op_type](self, body, bag)
            graph = body.owner.graph
        return bag

    def _one(self, bag: ir.Value, graph: ir.Graph, reduction: str) -> ir.Value:
        """The bag reduced to exactly one element, whatever ran in this iteration (a nested branch not taken gives
        none): its min, max or sum, after a neutral element (+inf, -inf, 0) that keeps an empty bag defined."""
        neutral = {"ReduceMin": np.inf, "ReduceMax": -np.inf, "Size": 0}[reduction]
        padded = self._add(graph, "Concat", [bag, self._const(graph, [neutral], bag.dtype.numpy())], bag.dtype,
                           {"axis": 0})
        return self._add(graph, "ReduceSum" if reduction == "Size" else reduction, [padded], bag.dtype,
                         {"keepdims": 1})

    def _through_if(self, body: Body, bag: ir.Value) -> ir.Value:
        node = body.owner
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                branch = attr.value
                branch.outputs.append(bag if branch is body.graph else self._empty(branch, bag.dtype))
        node.resize_outputs(len(node.outputs) + 1)
        return self._named(node.outputs[-1], bag.dtype)

    def _through_loop(self, body: Body, bag: ir.Value) -> ir.Value:
        """Loop: inputs (M, cond, carried…), body inputs (iteration, cond, carried…), body outputs (cond, carried…,
        scan outputs…), node outputs (carried…, scan outputs…): one more carried value, an accumulator (initially
        empty) onto which each iteration concatenates its bag."""
        node, graph = body.owner, body.graph
        carried = len(node.inputs) - 2
        _insert_input(node, 2 + carried, self._empty(node.graph, bag.dtype, before=node))
        accumulated = self._named(ir.Value(), bag.dtype)
        graph.inputs.insert(2 + carried, accumulated)
        graph.outputs.insert(1 + carried, self._add(graph, "Concat", [accumulated, bag], bag.dtype, {"axis": 0}))
        return self._named(_insert_output(node, carried), bag.dtype)

    def _stacked(self, body: Body, bag: ir.Value) -> ir.Value:
        """Scan or Loop: one more scan output (the last, for both), stacked [iterations, bag] and flattened after
        it. Every iteration's bag must then have one size: reduced bags are made one element (_one); flattened
        values that change size fail in ORT (calibration.runner then tries a Loop's accumulator, then no body at
        all). A Scan's state cannot carry an accumulator: ORT's Scan keeps each state's shape."""
        node, graph = body.owner, body.graph
        graph.outputs.append(bag)
        for name in ("scan_output_axes", "scan_output_directions"):
            if name in node.attributes:
                node.attributes[name] = ir.AttrInt64s(name, [*node.attributes[name].value, 0])
        node.resize_outputs(len(node.outputs) + 1)
        stacked = self._named(node.outputs[-1], bag.dtype)
        stacked.shape = None
        return self._add(node.graph, "Reshape", [stacked, self._const(node.graph, [-1], np.int64)], bag.dtype)

    def _add(self, graph: ir.Graph, op: str, inputs: list[ir.Value], dtype: ir.DataType,
             attributes: dict | None = None) -> ir.Value:
        name = unique_name(f"onnxq_observe_{op}", self.taken)
        node = ir.node(op, inputs, attributes or {}, name=name,
                       outputs=[ir.Value(name=unique_name(f"{name}_output", self.taken), type=ir.TensorType(dtype))])
        graph.append(node)
        return node.outputs[0]

    def _const(self, graph: ir.Graph, values: list, dtype, before: ir.Node | None = None) -> ir.Value:
        name = unique_name("onnxq_observe_constant", self.taken)
        node = ir.node("Constant", [], {"value": ir.tensor(np.array(values, dtype=dtype), name=name)}, name=name,
                       outputs=[ir.Value(name=unique_name(f"{name}_output", self.taken))])
        if before is None:
            graph.append(node)
        else:
            graph.insert_before(before, node)
        return node.outputs[0]

    def _empty(self, graph: ir.Graph, dtype: ir.DataType, before: ir.Node | None = None) -> ir.Value:
        return self._const(graph, [], dtype.numpy(), before)

    def _named(self, value: ir.Value, dtype: ir.DataType) -> ir.Value:
        value.name = unique_name("onnxq_observed", self.taken)
        value.type = ir.TensorType(dtype)
        value.shape = ir.Shape([None])
        return value


# How a bag leaves a body, by the op that owns it.
_THREADS = {"If": BodyValues._through_if, "Loop": BodyValues._through_loop, "Scan": BodyValues._stacked}


def _insert_input(node: ir.Node, slot: int, value: ir.Value) -> None:
    """The node's inputs from `slot` on move one place right; `value` takes the slot."""
    inputs = list(node.inputs)
    node.resize_inputs(len(inputs) + 1)
    for i, moved in enumerate(inputs[slot:], start=slot + 1):
        node.replace_input_with(i, moved)
    node.replace_input_with(slot, value)


def _insert_output(node: ir.Node, slot: int) -> ir.Value:
    """A new output at `slot`: the node's outputs from there on keep their values (their uses, names and types),
    now one place right. Returns the value at `slot`, fresh."""
    node.resize_outputs(len(node.outputs) + 1)
    outputs = node.outputs
    for i in range(len(outputs) - 1, slot, -1):
        moved, into = outputs[i - 1], outputs[i]
        name, moved.name = moved.name, None
        into.name = name
        into.type, into.shape = moved.type, moved.shape
        ir.convenience.replace_all_uses_with(moved, into, replace_graph_outputs=True)
    return outputs[slot]
