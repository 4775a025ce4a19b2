"""Model-local functions inlined, so that the products inside them are planned like the graph's own.

Exporters write a model's repeated blocks as functions: torch.onnx.export with export_modules_as_functions (each
module a FunctionProto whose weights arrive as inputs), torch's dynamo exporter before it inlined its output
(torch 2.1–2.4: every aten op a function of pkg.onnxscript.torch_lib). A call is one node of a domain no planner
knows, so every MatMul and Gemm inside stayed float, and a model whose products all sit in functions had nothing to
quantize. ONNX Runtime inlines the functions itself when it makes a session, so the inlined graph is the one it runs
anyway: onnx_ir's InlinePass does it here. Each call first gets its own copy of the function whose nodes are named
under the call's ("/b1/Block" + "/fc1/Gemm"), so that the report, --exclude and the fallback name the product in
the block it belongs to, not one of N nodes that share the body's name. A function that cannot be inlined (graph
attributes, an opset other than the model's, a call cycle) stays a call, with a note saying why."""

from __future__ import annotations

import itertools

import onnx_ir as ir
from onnx_ir.passes.common import InlinePass, RemoveUnusedFunctionsPass

from onnxq.errors import one_line

__all__ = ["inlined_functions"]


def inlined_functions(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(a clone without calls of model-local functions, a note), or (the model itself, None) when it calls none."""
    called = _called(model.graph, model.functions)
    if not called:
        return model, None
    reached = _reached(called, model.functions)
    names = ", ".join(sorted(f"{domain}:{name}" for domain, name, _ in reached))
    inlined = model.clone()
    try:
        _check_opsets(model, [model.functions[identifier] for identifier in reached])
        _one_function_per_call(inlined)
        InlinePass()(inlined)
    except (ValueError, ir.passes.PreconditionError) as error:
        return model, (f"model-local function(s) {names} not inlined ({one_line(str(error))}): the products inside "
                       "them stay float — export with functions inlined")
    RemoveUnusedFunctionsPass()(inlined)
    return inlined, (f"model-local function(s) {names} inlined ({len(called)} call(s) in the graph): their "
                     "products are quantized like the graph's own (ONNX Runtime inlines them too)")


def _called(graph_like: ir.Graph | ir.Function, functions) -> list[ir.OperatorIdentifier]:
    """The function each call in graph_like (bodies included) calls, one entry per call."""
    return [node.op_identifier() for node in ir.traversal.RecursiveGraphIterator(graph_like)
            if node.op_identifier() in functions]


def _reached(called: list[ir.OperatorIdentifier], functions) -> set[ir.OperatorIdentifier]:
    """The functions called, and those their bodies call, transitively."""
    reached, pending = set(), list(called)
    while pending:
        identifier = pending.pop()
        if identifier not in reached:
            reached.add(identifier)
            pending.extend(_called(functions[identifier], functions))
    return reached


def _check_opsets(model: ir.Model, functions: list[ir.Function]) -> None:
    """Inlined nodes run at the model's opsets: a function importing another version of one cannot be inlined."""
    for function in functions:
        for domain, version in function.opset_imports.items():
            if model.opset_imports.get(domain, version) != version:
                raise ValueError(f"function {function.domain}:{function.name} imports opset {domain or 'ai.onnx'} "
                                 f"{version}, the model {model.opset_imports[domain]}")


def _one_function_per_call(model: ir.Model) -> None:
    """Point each call at its own copy of the function, its nodes named under the call's name, copies of nested
    calls likewise. A cycle of calls would never end: refused as InlinePass refuses it."""
    originals = dict(model.functions)
    copies = itertools.count()
    pending: list[tuple[ir.Graph | ir.Function, int]] = [(model.graph, 0)]
    while pending:
        graph_like, depth = pending.pop()
        for node in ir.traversal.RecursiveGraphIterator(graph_like):
            function = originals.get(node.op_identifier())
            if function is None:
                continue
            if depth >= len(originals):
                raise ValueError(f"function {function.domain}:{function.name} calls itself through its calls")
            copy = function.clone()
            copy.overload = f"{function.overload}.onnxq{next(copies)}"
            for inner in ir.traversal.RecursiveGraphIterator(copy):
                inner.name = f"{node.name or node.op_type}/{inner.name or inner.op_type}"
            model.functions[copy.identifier()] = copy
            node.overload = copy.overload
            pending.append((copy, depth + 1))
