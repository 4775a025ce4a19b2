"""What reads an activation before the next product, as a function of that activation alone: the chain of
per-element ops (a scalar affine, a hardswish written as Add/Clip/Mul/Div, a ReLU6) between a quantized tensor and
the values read by something else. Evaluated by ONNX Runtime on a 1-D array, so any per-element op it runs is
taken as the model defines it. Used to clip a tensor's range where what reads it saturates
(calibration.range_choice, numerics.saturation)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnxq.io.sessions import session_options
from onnxq.io.irquery import constant_array
from onnxq.targets.providers import CPU_PROVIDER

__all__ = ["ElementwiseReader", "elementwise_reader", "PER_ELEMENT_OPS"]

# Default-domain ops whose output element depends only on the same element of their inputs (constants broadcast).
PER_ELEMENT_OPS = frozenset({
    "Abs", "Add", "Celu", "Ceil", "Clip", "Cos", "Div", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid",
    "HardSwish", "Identity", "LeakyRelu", "Log", "Max", "Min", "Mish", "Mul", "Neg", "Pow", "PRelu", "Reciprocal",
    "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Softplus", "Softsign", "Sqrt", "Sub", "Tanh",
    "ThresholdedRelu"})
# A reader larger than this is cut there (its last values count as read by something else, so nothing is clipped
# that they would tell apart).
_MAX_NODES = 32


@dataclasses.dataclass(frozen=True)
class ElementwiseReader:
    value: str
    nodes: tuple[ir.Node, ...]  # in graph order
    outputs: tuple[str, ...]  # the values read by anything else (the value itself when a product reads it)

    @property
    def nonlinear(self) -> bool:
        """Whether the reader may saturate: anything but a scalar affine (which tells every value apart)."""
        return any(n.op_type not in ("Add", "Sub", "Mul", "Div", "Identity", "Neg") for n in self.nodes)

    def function(self, opsets: dict[str, int]) -> Callable[[np.ndarray], list[np.ndarray]]:
        """The reader as f: a float32 1-D array → its outputs per element, run by ONNX Runtime."""
        if not self.nodes:
            return lambda x: [x]
        session = ort.InferenceSession(_reader_model(self, opsets), session_options(optimize=False, threads=1),
                                       providers=[CPU_PROVIDER])
        names = list(self.outputs)
        return lambda x: [np.ravel(o) for o in session.run(names, {"x": x})]


def elementwise_reader(graph: ir.Graph, value: ir.Value, stops: set[str]) -> ElementwiseReader:
    """The per-element nodes that read `value` (through each other) in `graph`, up to values in `stops` (other
    quantized tensors, whose own range is theirs) and anything read by a node that is not per-element."""
    inside, nodes = {value.name}, []
    frontier = [value]
    while frontier and len(nodes) < _MAX_NODES:
        current = frontier.pop()
        if current.name in stops and current is not value:
            continue
        for node in current.consumers():
            if node in nodes or node.graph is not graph or not _per_element(node, inside):
                continue
            nodes.append(node)
            inside.update(o.name for o in node.outputs)
            frontier.extend(node.outputs)
    order = {id(n): i for i, n in enumerate(graph)}
    nodes.sort(key=lambda n: order[id(n)])
    return ElementwiseReader(value.name, tuple(nodes), _read_outside(graph, value, nodes, stops))


def _per_element(node: ir.Node, inside: set[str]) -> bool:
    """A default-domain per-element op whose inputs are all inside the reader or one-element constants."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in PER_ELEMENT_OPS or len(node.outputs) != 1:
        return False
    for value in node.inputs:
        if value is None or value.name in inside:
            continue
        constant = constant_array(value)
        if constant is None or constant.size != 1 or constant.dtype != np.float32:
            return False
    return any(v is not None and v.name in inside for v in node.inputs)


def _read_outside(graph: ir.Graph, value: ir.Value, nodes: list[ir.Node], stops: set[str]) -> tuple[str, ...]:
    """The reader's values that something outside it reads (or that the graph returns, or that are quantized)."""
    members = set(map(id, nodes))
    returned = {v.name for v in graph.outputs}
    outputs = []
    for v in [value, *(o for n in nodes for o in n.outputs)]:
        if (v.name in returned or (v.name in stops and v is not value)
                or any(id(c) not in members for c in v.consumers())):
            outputs.append(v.name)
    return tuple(outputs)


def _reader_model(reader: ElementwiseReader, opsets: dict[str, int]) -> bytes:
    """The reader alone: input x (float32 [n]), its nodes with their constants, its outputs."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["n"]))
    mapped: dict[str, ir.Value] = {reader.value: x}
    initializers, nodes = [], []
    for node in reader.nodes:
        inputs = []
        for v in node.inputs:
            if v is not None and v.name not in mapped:
                constant = ir.Value(name=f"c{len(initializers)}", const_value=ir.tensor(constant_array(v)))
                initializers.append(constant)
                mapped[v.name] = constant
            inputs.append(None if v is None else mapped[v.name])
        copy = ir.Node("", node.op_type, inputs, attributes=list(node.attributes.values()), name=node.name)
        copy.outputs[0].name = node.outputs[0].name
        mapped[node.outputs[0].name] = copy.outputs[0]
        nodes.append(copy)
    if reader.value in reader.outputs:  # read as it is too: an Identity, as a graph output is no graph input
        nodes.append(ir.Node("", "Identity", [x], name="read_as_is"))
        mapped[reader.value] = nodes[-1].outputs[0]
    outputs = [mapped[name] for name in reader.outputs]
    for v in outputs:
        v.type = ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph([x], outputs, nodes=nodes, initializers=initializers, opset_imports={"": opsets.get("", 13)})
    return ir.serde.serialize_model(ir.Model(graph, ir_version=8)).SerializeToString()
