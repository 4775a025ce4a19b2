"""Float16 compute: the nodes passes.float16.plan chose compute in float16, the rest stays float32, and a Cast joins
the two wherever a value crosses (one per value and direction). The model's inputs and outputs keep their names and
types (float32, or float16 for a float16 model: passes.float16.model), so whatever feeds and reads the model (a
pipeline, onnxruntime-genai's config) is unchanged.

Why: CUDA EP runs float16 products on tensor cores with float32 accumulation (cuBLAS), at twice float32's rate or
more and half its memory traffic; onnxruntime-genai's builder pairs int4 weights with float16 activations for CUDA
the same way. Constants become float16 copies (the float32 original goes when nothing reads it any more).
A machine without CUDA checks the file by its exact arithmetic (passes.float16.emulation: every float16 value
rounded where it is made, float32 between), not by ORT's CPU run of it, which skips roundings.
"""

from __future__ import annotations

import collections
import dataclasses
import html
from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

from onnxq.passes.graph.builder import GraphBuilder
from onnxq.passes.float16.plan import Float16Plan, Kept, plan_float16

__all__ = ["Float16Result", "to_float16"]

_HALF = ir.DataType.FLOAT16


@dataclasses.dataclass(frozen=True)
class Float16Result:
    """What the pass did; a report section (key "precision") that renders itself."""

    converted: int  # nodes computing in float16
    kept: dict[str, Kept]  # node name → why it stays float32
    casts: int  # Cast nodes added between the two
    key: str = "precision"

    def to_dict(self) -> dict:
        return {"compute": "float16", "float16_nodes": self.converted, "casts": self.casts,
                "float32_nodes": {n: k.detail for n, k in self.kept.items()}}

    def text(self) -> list[str]:
        reasons = collections.Counter(k.kind for k in self.kept.values())
        kept = "; ".join(f"{n} {why}" for why, n in reasons.most_common(4))
        return [f"compute:     float16 in {self.converted} node(s), float32 kept in {len(self.kept)}"
                + (f" ({kept})" if kept else "") + f"; {self.casts} Cast(s) between them"]

    def html(self) -> str:
        rows = "".join(f"<tr><td>{html.escape(n)}</td><td>{html.escape(k.detail)}</td></tr>"
                       for n, k in self.kept.items())
        return (f"<h2>Compute: float16</h2><p>{html.escape(self.text()[0][len('compute:'):].strip())}.</p>"
                f"<table><tr><th>kept float32</th><th>why</th></tr>{rows}</table>")


def to_float16(model: ir.Model, magnitudes: Mapping[str, float] | None = None) -> Float16Result:
    """Rewrite the main graph in place (subgraphs stay float32 with the nodes that own them). magnitudes: max |x|
    per value name observed on data (calibration.magnitudes); without them only constants are checked."""
    graph = model.graph
    plan = plan_float16(graph, model.opset_imports, magnitudes)
    if not plan.converted:
        return Float16Result(0, plan.kept, 0)
    joins = _Joins(graph, plan)
    for node in list(graph):
        operands = plan.converted.get(node)
        if operands is None:
            continue
        for i in operands.inputs:
            node.replace_input_with(i, joins.half(node.inputs[i]))
        for i in operands.outputs:  # a new type: clones share their type objects, which .dtype = would change
            node.outputs[i].type = ir.TensorType(_HALF)
        if node.op_type == "Cast" and operands.outputs:  # a Cast to float; one to bool or int keeps its `to`
            node.attributes["to"] = ir.AttrInt64("to", _HALF.value)
    joins.widen_the_rest()
    _drop_unread_initializers(graph)
    _drop_casts_to_their_own_type(graph)
    return Float16Result(len(plan.converted), plan.kept, joins.casts)


class _Joins:
    """Float16 forms of float32 values (constants copied, others cast once) and float32 forms of the values that
    became float16, for the readers that stay float32."""

    def __init__(self, graph: ir.Graph, plan: Float16Plan) -> None:
        self.graph, self.plan = graph, plan
        self.builder = GraphBuilder(graph)
        self._half: dict[ir.Value, ir.Value] = {}
        self.casts = 0

    def half(self, value: ir.Value) -> ir.Value:
        if value.dtype == _HALF:  # made by a node already converted
            return value
        if value not in self._half:
            tensor = ir.convenience.get_const_tensor(value)
            if tensor is not None:
                copy = self.builder.initializer(f"{value.name or 'constant'}_fp16", tensor.numpy().astype(np.float16))
                copy.shape = value.shape
                self._half[value] = copy
            else:
                self._half[value] = self._cast(value, _HALF, f"{value.name}_fp16")
        return self._half[value]

    def widen_the_rest(self) -> None:
        """Every reader of a converted value that reads float32 (a node kept float32, an operand that stays
        float32, a graph output) reads it through one Cast back."""
        for node, operands in self.plan.converted.items():
            for i in operands.outputs:
                value = node.outputs[i]
                readers = [(user, j) for user, j in value.uses()
                           if user not in self.plan.converted or j not in self.plan.converted[user].inputs]
                if not readers and not value.is_graph_output():
                    continue
                wide = self._cast(value, ir.DataType.FLOAT, f"{value.name}_fp32")
                for user, j in readers:
                    user.replace_input_with(j, wide)
                if value.is_graph_output():
                    self._take_output_place(value, wide)

    def _take_output_place(self, value: ir.Value, wide: ir.Value) -> None:
        """The float32 value becomes the graph output, under its name."""
        outputs = self.graph.outputs
        outputs[outputs.index(value)] = wide
        name = value.name
        value.name = self.builder.unique(f"{name}_fp16")
        wide.name = name

    def _cast(self, value: ir.Value, to: ir.DataType, base: str) -> ir.Value:
        producer = value.producer()
        cast = self.builder.node("Cast", [value], base, None, attributes={"to": to.value})
        if producer is not None and producer.graph is self.graph:
            self.graph.insert_after(producer, cast)
        elif len(self.graph):
            self.graph.insert_before(next(iter(self.graph)), cast)
        else:
            self.graph.append(cast)
        out = cast.outputs[0]
        out.type, out.shape = ir.TensorType(to), value.shape
        self.casts += 1
        return out


def _drop_unread_initializers(graph: ir.Graph) -> None:
    """Float32 constants that only converted nodes read are gone: their float16 copies replace them."""
    for node in list(graph):
        if node.op_type == "Constant" and not any(v.uses() or v.is_graph_output() for v in node.outputs):
            graph.remove(node, safe=True)
    for name, value in list(graph.initializers.items()):
        if not value.uses() and not value.is_graph_output() and value not in graph.inputs:
            del graph.initializers[name]


def _drop_casts_to_their_own_type(graph: ir.Graph) -> None:
    """Casts that now read what they make (a float16 model's Casts at its float16 inputs and outputs, once the
    compute between is float16): their readers read the source, a graph output takes the source under its name.
    ORT removes such a Cast before an input but keeps one as a graph output (a copy of the output each run)."""
    for node in list(graph):
        if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or node.inputs[0] is None:
            continue
        source, made = node.inputs[0], node.outputs[0]
        if source.dtype is None or source.dtype.value != node.attributes["to"].value:
            continue
        if made.is_graph_output() and (source.is_graph_input() or source.is_graph_output()
                                       or source.is_initializer()):
            continue  # one value cannot take both places (nor an input's name)
        name, output = made.name, made.is_graph_output()
        ir.convenience.replace_all_uses_with(made, source, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        if output:
            made.name, source.name = None, name
