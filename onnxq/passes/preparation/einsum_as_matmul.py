"""An Einsum of an activation and a constant weight that is a matrix product, made a MatMul before planning: the same
products, in a form the planners quantize.

Keras' EinsumDense (every projection of its MultiHeadAttention: "abc,cde->abde" into heads, "abcd,cde->abe" out of
them) reaches ONNX through tf2onnx as Einsum, and so do PyTorch layers written with torch.einsum: ORT has no integer
Einsum, so onnxq left them float ("onnxq does not quantize Einsum"). An equation whose weight indices are each either
summed with the activation or kept in the output — no index shared by all three (a batched product), none summed
within one operand — is the activation's free indices times the weight's: the activation transposed so that the
summed indices come last (no Transpose where they already do) and reshaped to [..., K], the weight transposed and
reshaped to [K, N] once, a MatMul, then the output reshaped to the weight's free dimensions and transposed into the
equation's order where that differs. Each output value stays one sum over the same products (in another order: the
verification compares with the Einsum as given). Any other Einsum stays one and is listed as left float.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import onnx_ir as ir

from onnxq.handlers.plan import constant_float
from onnxq.io.irquery import attribute
from onnxq.passes.graph.builder import GraphBuilder, replace_node, rewrite_each

__all__ = ["einsums_as_matmuls"]

_ELLIPSIS = "..."


@dataclasses.dataclass(frozen=True)
class _Product:
    """How one Einsum is a MatMul: the activation's input index, the Transposes and Reshapes around the product
    (None: not needed), and how the weight becomes [K, N] (read only when the node is rewritten)."""

    activation: int
    activation_perm: tuple[int, ...] | None
    kept: int  # the activation's dimensions before the summed ones, "..." included
    summed: int  # how many indices are summed (more than one: the activation reshaped to [..., K])
    weight_perm: tuple[int, ...]  # the weight's axes, summed ones first, then reshaped to [K, N]
    k: int  # the product of the summed dimensions
    free_dims: tuple[int, ...]  # the weight's free dimensions (not one: the product reshaped to them)
    output_perm: tuple[int, ...] | None


def einsums_as_matmuls(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(a clone with each Einsum that is an activation × constant matrix product made a MatMul, a note), or (the
    model itself, None)."""
    rewritten, count = rewrite_each(model, _product, _rewrite)
    if not count:
        return model, None
    return rewritten, (f"{count} Einsum node(s) of an activation and a constant weight made MatMul (the same "
                       "products; ORT has an integer MatMul and no integer Einsum)")


def _product(node: ir.Node) -> _Product | None:
    if node.op_type != "Einsum" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    weights = [constant_float(v) for v in node.inputs]
    if (weights[0] is None) == (weights[1] is None):  # two activations, or two constants (not a layer)
        return None
    at = 0 if weights[0] is None else 1
    terms = _terms(str(attribute(node, "equation", "")))
    activation = node.inputs[at]
    if terms is None or activation is None:
        return None
    rank = activation.shape.rank() if activation.shape is not None else None
    shape = tuple(int(d) for d in weights[1 - at].shape)
    return _planned(terms[at], terms[1 - at], terms[2], shape, rank, at)


def _terms(equation: str) -> tuple[str, str, str] | None:
    """(first input's indices, second's, the output's) — the implicit output when there is no "->": the indices
    that occur once, in alphabetical order, after "..." if an input has it. None where an index repeats within a
    term (a diagonal) or "..." is anywhere but in front."""
    equation = equation.replace(" ", "")
    inputs, _, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != 2:
        return None
    if "->" not in equation:
        counts = Counter(c for t in terms for c in t.replace(_ELLIPSIS, ""))
        output = (_ELLIPSIS if any(_ELLIPSIS in t for t in terms) else "") + "".join(
            sorted(c for c, n in counts.items() if n == 1))
    for term in (*terms, output):
        letters = term[len(_ELLIPSIS):] if term.startswith(_ELLIPSIS) else term
        if (letters and not letters.isalpha()) or len(set(letters)) != len(letters):
            return None
    return terms[0], terms[1], output


def _planned(a: str, w: str, out: str, shape: tuple[int, ...], rank: int | None, at: int) -> _Product | None:
    """The product where activation indices a, weight indices w and output indices out make one (see the module)."""
    lead_a, lead_out = a.startswith(_ELLIPSIS), out.startswith(_ELLIPSIS)
    if _ELLIPSIS in w or lead_a != lead_out or (lead_a and rank is None):
        return None
    a, out = a.removeprefix(_ELLIPSIS), out.removeprefix(_ELLIPSIS)
    summed = [c for c in a if c in w and c not in out]
    free_a = [c for c in a if c not in w]
    free_w = [c for c in w if c not in a]
    if not summed or len(shape) != len(w) or any(c in w for c in out if c in a) \
            or sorted(out) != sorted(free_a + free_w):
        return None  # an outer product, a batched one, or an index summed within one operand
    lead = rank - len(a) if lead_a else 0
    if lead < 0:
        return None
    order = [*free_a, *summed]
    activation_perm = tuple(range(lead)) + tuple(lead + a.index(c) for c in order)
    natural = [*free_a, *free_w]
    output_perm = tuple(range(lead)) + tuple(lead + natural.index(c) for c in out)
    dims = dict(zip(w, shape))
    return _Product(at, _unless_identity(activation_perm), lead + len(free_a), len(summed),
                    tuple(w.index(c) for c in (*summed, *free_w)), int(np.prod([dims[c] for c in summed])),
                    tuple(dims[c] for c in free_w), _unless_identity(output_perm))


def _unless_identity(perm: tuple[int, ...]) -> tuple[int, ...] | None:
    return None if perm == tuple(range(len(perm))) else perm


def _rewrite(builder: GraphBuilder, node: ir.Node, product: _Product) -> None:
    name = node.name or "Einsum"
    x = node.inputs[product.activation]
    if product.activation_perm is not None:
        x = builder.node("Transpose", [x], f"{name}_summed_last", node,
                         attributes={"perm": list(product.activation_perm)}).outputs[0]
    if product.summed > 1:
        x = _reshaped(builder, node, x, [0] * product.kept + [product.k], f"{name}_to_matrix")
    matrix = np.transpose(constant_float(node.inputs[1 - product.activation]).numpy(), product.weight_perm)
    weight = builder.initializer(f"{name}_weight_as_matrix",
                                 np.ascontiguousarray(matrix.reshape(product.k, -1), dtype=np.float32))
    matmul = builder.node("MatMul", [x, weight], name, node)
    y = matmul.outputs[0]
    y.type = ir.TensorType(ir.DataType.FLOAT)
    if len(product.free_dims) != 1:
        y = _reshaped(builder, node, y, [0] * product.kept + list(product.free_dims), f"{name}_to_free_dims")
    if product.output_perm is not None:
        y = builder.node("Transpose", [y], f"{name}_in_output_order", node,
                         attributes={"perm": list(product.output_perm)}).outputs[0]
    replace_node(builder.graph, node, y)
    matmul.name = name  # the report and the user's exclude lists know the node by its name


def _reshaped(builder: GraphBuilder, before: ir.Node, x: ir.Value, shape: list[int], base: str) -> ir.Value:
    """x reshaped; a 0 keeps the input's dimension at that place."""
    target = builder.initializer(f"{base}_shape", np.array(shape, np.int64))
    return builder.node("Reshape", [x, target], base, before).outputs[0]
