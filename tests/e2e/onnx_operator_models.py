"""Each ONNX operator between two quantized products, built from onnx's own node tests (onnx.backend.test.case):
x → MatMul(A) → the operator → MatMul(B) for operators on [..., K] tensors, or the same with 1×1 Convs for
[N, C, H, W] ones. The operator's first input and output are then activations onnxq quantizes around (QDQ
propagation, QLinear fusions, its task rules on the output); its other float inputs are constants, its integer
inputs (axes, shape, indices, k) given once in the data. The input goes through A's inverse, so the operator sees
its test's own values. Found on first run: an LSTM with an omitted first output crashed the sensitivity, Slice /
Reshape / TopK inputs given once were refused, an opset past onnxruntime's failed at its first session."""

from __future__ import annotations

import collections
import dataclasses
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

COPIES = 12  # copies of the test's input, each shrunk a little: the calibration samples (every 10th batch held back)


@dataclasses.dataclass(frozen=True)
class OperatorModel:
    name: str  # the node test's
    op_type: str
    model: onnx.ModelProto
    data: dict[str, np.ndarray]


def operator_models(per_op: int = 1, seed: int = 0) -> Iterator[OperatorModel]:
    """The first `per_op` node tests of each operator that fit (one node, a float first input and output of rank 2
    or more), wrapped; seeded."""
    from onnx.backend.test.case import node as node_cases

    rng = np.random.default_rng(seed)
    taken: collections.Counter = collections.Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cases' own numpy warnings (divide by zero in their expectations)
        cases = node_cases.collect_testcases(None)
    for case in cases:
        wrapped = _wrapped(case, rng) if case.model is not None and len(case.model.graph.node) == 1 else None
        if wrapped is None or taken[wrapped.op_type] >= per_op:
            continue
        taken[wrapped.op_type] += 1
        yield wrapped


def _wrapped(case, rng: np.random.Generator) -> OperatorModel | None:
    model, node = case.model, case.model.graph.node[0]
    if not case.data_sets or node.domain not in ("", "ai.onnx"):
        return None
    inputs, outputs = case.data_sets[0]
    if not inputs or len(inputs) != len(model.graph.input) or not outputs:
        return None
    try:
        x, y = np.asarray(inputs[0]), np.asarray(outputs[0])
    except ValueError:  # a sequence
        return None
    if x.dtype != np.float32 or y.dtype != np.float32 or x.ndim < 2 or y.ndim < 2 or not x.size:
        return None
    conv = x.ndim == 4 and y.ndim == 4
    k, n = (x.shape[1], y.shape[1]) if conv else (x.shape[-1], y.shape[-1])
    if k < 2 or n < 2:
        return None
    a, b = _mix(rng, k), _mix(rng, n)
    constants, feeds, kept = [], {}, []
    for info, array in list(zip(model.graph.input, inputs))[1:]:
        array = np.asarray(array)
        if array.dtype == np.float32:
            constants.append(numpy_helper.from_array(array, info.name))
        else:
            feeds[info.name] = array
            kept.append(info)
    wrapped = _graph(model, node, x.shape, y.shape, kept, constants, a, b, conv)
    try:
        onnx.checker.check_model(wrapped, full_check=True)
    except Exception:  # noqa: BLE001 — a case whose wrapping onnx refuses is not one to sweep
        return None
    # Each copy shrinks the test's values by up to 5 %: their signs and domains kept (Log's, Asin's, Sqrt's).
    copies = [_through_inverse(x * (1 - 0.05 * rng.random(x.shape)), a, conv) for _ in range(COPIES)]
    return OperatorModel(case.name, node.op_type, wrapped,
                         {"x_in": np.concatenate(copies).astype(np.float32), **feeds})


def _through_inverse(x: np.ndarray, a: np.ndarray, conv: bool) -> np.ndarray:
    """The input that `pre` (a MatMul by A, or a 1×1 Conv mixing channels by A) turns into x."""
    if conv:
        return np.einsum("oc,nchw->nohw", np.linalg.inv(a), x)
    return np.linalg.solve(a.T, x.reshape(-1, a.shape[0]).T).T.reshape(x.shape)


def _mix(rng: np.random.Generator, size: int) -> np.ndarray:
    """A well-conditioned mixing matrix near the identity (float64: its inverse feeds the test's values back)."""
    return np.eye(size) + rng.normal(0, 0.3, (size, size)) / np.sqrt(size)


def _graph(model: onnx.ModelProto, node: onnx.NodeProto, x_shape, y_shape, kept, constants, a, b,
           conv: bool) -> onnx.ModelProto:
    op, shape = ("Conv", (lambda m: m.astype(np.float32)[:, :, None, None])) if conv else (
        "MatMul", (lambda m: m.astype(np.float32)))
    pre = helper.make_node(op, ["x_in", "A_w"], [node.input[0]], name="pre")
    post = helper.make_node(op, [node.output[0], "B_w"], ["y_out"], name="post")
    others = [o for o in model.graph.output if o.name != node.output[0]]
    graph = helper.make_graph(
        [pre, node, post], "wrapped", [helper.make_tensor_value_info("x_in", TensorProto.FLOAT, list(x_shape)), *kept],
        [helper.make_tensor_value_info("y_out", TensorProto.FLOAT, list(y_shape)), *others],
        [*constants, numpy_helper.from_array(shape(a), "A_w"), numpy_helper.from_array(shape(b), "B_w")])
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def save(case: OperatorModel, folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(case.model, folder / "model.onnx")
    np.savez(folder / "data.npz", **case.data)
    return folder / "model.onnx", folder / "data.npz"
