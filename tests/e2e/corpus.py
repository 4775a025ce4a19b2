"""A corpus of broken, hostile and unusual inputs, generated (nothing binary is checked in).

Each case writes what it needs into a work folder and says what onnxq must do with it: refuse with one line naming
the problem (exit 2, nothing written, input unchanged), or quantize it (exit 0) with a check on the result. The
models are built with onnx.helper, not onnx_ir, so that they can be as broken as files in the wild.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["Case", "CASES", "matmul_model", "save"]

K, N = 16, 8


@dataclasses.dataclass(frozen=True)
class Case:
    # Writes the inputs into the folder; returns the CLI arguments (the model path first).
    build: Callable[[Path], list[str]]
    # Refused: a fragment of the one error line. None: quantized (exit 0), then `check` on the output path.
    refused: str | None = None
    check: Callable[[Path], None] | None = None
    # Quantized cases: where the output goes (the default: q.onnx in the work folder).
    output: str = "q.onnx"
    # File permissions do not bind root: such a case cannot be made there.
    needs_non_root: bool = False


def save(model: onnx.ModelProto, path: Path) -> str:
    path.write_bytes(model.SerializeToString())
    return str(path)


def _weight(shape=(K, N), fill=None, dtype=np.float32, seed=0) -> np.ndarray:
    if fill is not None:
        return np.full(shape, fill, dtype)
    return np.random.default_rng(seed).normal(0, 0.5, shape).astype(dtype)


def matmul_model(w: np.ndarray | None = None, *, opset: int = 17, ir_version: int = 8, extra_nodes=(),
                 extra_inits=(), elem=TensorProto.FLOAT, x_shape=("batch", K), outputs=None,
                 inputs=None, domains=()) -> onnx.ModelProto:
    """x [batch, K] → MatMul(w) → y, plus whatever the case adds."""
    w = _weight() if w is None else w
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), *extra_nodes]
    graph = helper.make_graph(
        nodes, "g", inputs or [helper.make_tensor_value_info("x", elem, list(x_shape))],
        outputs or [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(w, "w"), *extra_inits])
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = ir_version
    return model


def _model(work: Path, name: str = "m.onnx", **kwargs) -> list[str]:
    return [save(matmul_model(**kwargs), work / name)]


def _runs(expected_ops: dict[str, int] | None = None) -> Callable[[Path], None]:
    """The output loads in ORT and runs on zeros ([2, K] for a rank-2 input); with expected_ops, those op types
    appear that often."""
    def check(path: Path) -> None:
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {}
        for i in session.get_inputs():
            shape = [2, K] if len(i.shape) == 2 else [d if isinstance(d, int) else 2 for d in i.shape]
            dtype = np.float16 if i.type == "tensor(float16)" else np.float32 if "float" in i.type else np.int64
            feed[i.name] = np.zeros(shape, dtype)
        session.run(None, feed)
        if expected_ops:
            ops = [n.op_type for n in onnx.load(str(path)).graph.node]
            for op, count in expected_ops.items():
                assert ops.count(op) == count, (op, ops)
    return check


def _opset_is(path: Path, opset: int) -> None:
    """The output runs and imports this ONNX opset."""
    _runs()(path)
    assert {o.domain: o.version for o in onnx.load(str(path)).opset_import}[""] == opset


def _ir_version_at_least(version: int) -> Callable[[Path], None]:
    def check(path: Path) -> None:
        assert onnx.load(str(path)).ir_version >= version
        _runs()(path)
    return check


def _bytes(work: Path, name: str, content: bytes) -> list[str]:
    (work / name).write_bytes(content)
    return [str(work / name)]


def _npz(work: Path, name: str = "d.npz", **arrays) -> str:
    np.savez(work / name, **arrays)
    return str(work / name)


def _good_model(work: Path) -> str:
    return save(matmul_model(), work / "m.onnx")


def _calib(work: Path, **arrays) -> list[str]:
    return [_good_model(work), "--calib", _npz(work, **arrays)]


# ---- external data -------------------------------------------------------------------------------------------

def _external(work: Path, location: str, offset: int = 0, length: int | None = None, write_data=True,
              declared_offset: int | None = None) -> list[str]:
    """The weight stored as external data at `location` (relative to the model's folder), written at `offset`;
    the model may declare another offset or length than the file has."""
    model = matmul_model()
    declared = offset if declared_offset is None else declared_offset
    raw = _make_external(model.graph.initializer[0], location, declared, length)
    models = work / "models"
    models.mkdir(exist_ok=True)
    if write_data:
        target = Path(location) if os.path.isabs(location) else models / location
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"\0" * offset + raw)
    return [save(model, models / "m.onnx")]


def _make_external(tensor: TensorProto, location: str, offset: int = 0, length: int | None = None) -> bytes:
    """Declare the tensor's data external (at location, offset, length); return the bytes it held."""
    raw = numpy_helper.to_array(tensor).tobytes()
    tensor.ClearField("float_data")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset), "length": str(len(raw) if length is None else length)}
    for key, value in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return raw


def _external_in_body(work: Path, location: str, length: int | None = None) -> list[str]:
    """The If's then-branch weight stored as external data (the data file written beside the model)."""
    model = _subgraph_model("If")
    then_branch = next(a.g for a in model.graph.node[-1].attribute if a.name == "then_branch")
    raw = _make_external(then_branch.initializer[0], location, length=length)
    models = work / "models"
    models.mkdir(exist_ok=True)
    (models / location).write_bytes(raw)
    return [save(model, models / "m.onnx")]


def _symlinked_data(work: Path) -> list[str]:
    outside = work / "secret.bin"
    outside.write_bytes(_weight().tobytes())
    args = _external(work, "w.bin", write_data=False)
    (work / "models" / "w.bin").symlink_to(outside)
    return args


def _hard_linked_data(work: Path) -> list[str]:
    """A data file that is also another name: torchvision's export linked into a second folder (exit 3 before)."""
    args = _external(work, "w.bin")
    os.link(work / "models" / "w.bin", work / "w_elsewhere.bin")
    return args


# ---- graphs ---------------------------------------------------------------------------------------------------

def _subgraph_model(kind: str) -> onnx.ModelProto:
    """A MatMul inside an If / Loop / Scan body next to one in the main graph."""
    body_w = numpy_helper.from_array(_weight((N, N), seed=1), "bw")
    if kind == "If":
        def branch(name):
            return helper.make_graph([helper.make_node("MatMul", ["y", "bw"], [f"{name}_out"], name=f"{name}_mm")],
                                     name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)],
                                     [body_w])
        cond = numpy_helper.from_array(np.array(True), "cond")
        node = helper.make_node("If", ["cond"], ["z"], name="if", then_branch=branch("then"),
                                else_branch=branch("else"))
        extra_inits = [cond]
    elif kind == "Loop":
        body = helper.make_graph(
            [helper.make_node("Identity", ["c_in"], ["c_out"]),
             helper.make_node("MatMul", ["s_in", "bw2"], ["s_out"], name="loop_mm")], "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
             helper.make_tensor_value_info("s_in", TensorProto.FLOAT, None)],
            [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("s_out", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(_weight((N, N), seed=2), "bw2")])
        node = helper.make_node("Loop", ["trip", "cond", "y"], ["z"], name="loop", body=body)
        extra_inits = [numpy_helper.from_array(np.array(2, np.int64), "trip"),
                       numpy_helper.from_array(np.array(True), "cond")]
    else:  # Scan over the batch axis
        body = helper.make_graph(
            [helper.make_node("MatMul", ["row", "bw3"], ["out_row"], name="scan_mm")], "body",
            [helper.make_tensor_value_info("row", TensorProto.FLOAT, [1, N])],
            [helper.make_tensor_value_info("out_row", TensorProto.FLOAT, [1, N])],
            [numpy_helper.from_array(_weight((N, N), seed=3), "bw3")])
        node = helper.make_node("Scan", ["y3"], ["z"], name="scan", body=body, num_scan_inputs=1)
        extra_inits = []
        return matmul_model(extra_nodes=[helper.make_node("Unsqueeze", ["y", "ax"], ["y3"]), node],
                            extra_inits=[numpy_helper.from_array(np.array([1], np.int64), "ax")],
                            outputs=[helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    return matmul_model(extra_nodes=[node], extra_inits=extra_inits,
                        outputs=[helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])


def _two_matmuls(**kwargs) -> onnx.ModelProto:
    """x → MatMul(w) → Relu → MatMul(w2) → z: quantizable even when a case breaks something beside it."""
    return matmul_model(extra_nodes=[helper.make_node("Relu", ["y"], ["r"]),
                                     helper.make_node("MatMul", ["r", "w2"], ["z"], name="mm2"),
                                     *kwargs.pop("more_nodes", ())],
                        extra_inits=[numpy_helper.from_array(_weight((N, N), seed=4), "w2"),
                                     *kwargs.pop("more_inits", ())],
                        outputs=kwargs.pop("outputs", None) or [helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                                                                               None)], **kwargs)


def _typed_model(elem: int, np_dtype) -> onnx.ModelProto:
    return matmul_model(_weight(dtype=np_dtype), elem=elem)


def _float16_io(path: Path) -> None:
    """A float16 model comes out quantized with its float16 input and output (passes.float16.model)."""
    _runs({"MatMul": 0})(path)
    graph = onnx.load(path).graph
    assert [v.type.tensor_type.elem_type for v in (*graph.input, *graph.output)] == [TensorProto.FLOAT16] * 2


def _gemm(trans_a: int, alpha: float, beta: float) -> onnx.ModelProto:
    w = _weight()
    node = helper.make_node("Gemm", ["xt" if trans_a else "x", "w", "c"], ["y"], name="gemm", transA=trans_a,
                            alpha=alpha, beta=beta)
    nodes = ([helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0])] if trans_a else []) + [node]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(_weight((N,), seed=5), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _already_quantized(kind: str) -> onnx.ModelProto:
    q = numpy_helper.from_array(np.ones((K, N), np.int8), "wq")
    if kind == "QOperator":
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
                 helper.make_node("MatMulInteger", ["xq", "wq", "xz"], ["y"], name="mmi")]
        out = helper.make_tensor_value_info("y", TensorProto.INT32, None)
        inits = [q]
        domains = []
    else:  # MatMulNBits
        nodes = [helper.make_node("MatMulNBits", ["x", "b", "s"], ["y"], name="nbits", domain="com.microsoft",
                                  K=K, N=N, bits=4, block_size=16)]
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        inits = [numpy_helper.from_array(np.full((N, 1, 8), 0x88, np.uint8), "b"),
                 numpy_helper.from_array(np.ones(N, np.float32), "s")]
        domains = [helper.make_opsetid("com.microsoft", 1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])],
                              [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *domains])
    model.ir_version = 8
    return model


def _npy_with_absurd_header(work: Path) -> list[str]:
    folder = work / "calib"
    folder.mkdir()
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000000, 16), }"
    header = header + " " * (63 - (len(header) + 10) % 64) + "\n"
    (folder / "x.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
                                   + b"\0" * 64)
    return [_good_model(work), "--calib", str(folder)]


def _read_only_folder(work: Path) -> list[str]:
    folder = work / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return [_good_model(work), "-o", str(folder / "q.onnx")]


def _cache_of_another_model(work: Path) -> list[str]:
    from onnxq.cli.main import main

    other = save(_two_matmuls(), work / "other.onnx")
    calib = _npz(work, "c.npz", x=_weight((8, K), seed=6))
    assert main(["calibrate", other, "--calib", calib, "-o", str(work / "cache.json")]) == 0
    (work / "other.onnx").unlink()
    return [_good_model(work), "--calib-cache", str(work / "cache.json")]


def _truncated_cache(work: Path) -> list[str]:
    (work / "cache.json").write_text(json.dumps({"format": "onnxq-calibration"})[:20])
    return [_good_model(work), "--calib-cache", str(work / "cache.json")]


def _inputs_are(names: list[str], expected_ops: dict[str, int]) -> Callable[[Path], None]:
    def check(path: Path) -> None:
        assert [i.name for i in onnx.load(str(path)).graph.input] == names
        _runs(expected_ops)(path)
    return check


def _zipmap_model() -> onnx.ModelProto:
    """A classifier as skl2onnx exports it by default: its probabilities as a sequence of {class: probability}."""
    maps = helper.make_sequence_type_proto(helper.make_map_type_proto(TensorProto.INT64,
                                                                      helper.make_tensor_type_proto(1, None)))
    return matmul_model(extra_nodes=[
        helper.make_node("ZipMap", ["y"], ["p"], classlabels_int64s=list(range(N)), domain="ai.onnx.ml")],
        outputs=[helper.make_tensor_value_info("y", 1, None), helper.make_value_info("p", maps)],
        domains=["ai.onnx.ml"])


def _output_is_graph_output_weight(path: Path) -> None:
    """The weight is also a graph output: it must still come out as the float weight."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    w_out = session.run(["w"], {"x": np.zeros((2, K), np.float32)})[0]
    assert np.array_equal(w_out, _weight())


CASES: dict[str, Case] = {
    # -- files that are not models
    "not onnx (text)": Case(lambda w: _bytes(w, "m.onnx", b"hello, I am not a model\n"), "not a readable ONNX"),
    "empty file": Case(lambda w: _bytes(w, "m.onnx", b""), "is empty"),
    "random bytes": Case(lambda w: _bytes(w, "m.onnx", np.random.default_rng(1).bytes(4096)), "not a readable ONNX"),
    "truncated": Case(lambda w: _bytes(w, "m.onnx", matmul_model().SerializeToString()[:300]), "not a readable"),
    "a folder": Case(lambda w: [str(w)], "is a folder"),
    "zero nodes": Case(lambda w: [save(helper.make_model(helper.make_graph(
        [], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])])), w / "m.onnx")], "no nodes"),
    # -- opsets and IR versions
    "no default opset": Case(lambda w: [save(_strip_default_opset(matmul_model()), w / "m.onnx")], "imports no ONNX"),
    # Converted to opset 13 (onnx's version converter), not refused; refused when the conversion fails.
    "opset 11": Case(lambda w: _model(w, opset=11), check=lambda p: _opset_is(p, 13)),
    "opset 12": Case(lambda w: _model(w, opset=12), check=lambda p: _opset_is(p, 13)),
    "opset 11 that cannot be converted": Case(lambda w: [save(matmul_model(opset=11, extra_nodes=[
        helper.make_node("FrobnicateX", ["y"], ["q"])], outputs=[helper.make_tensor_value_info("q", 1, None)]),
        w / "m.onnx")], "version converter could not convert it"),
    "future opset 99": Case(lambda w: _model(w, opset=99), "opset 99"),
    "ir_version 99": Case(lambda w: _model(w, ir_version=99), "ir_version 99"),
    "ir_version 2 (below what opset 17 needs)": Case(lambda w: _model(w, ir_version=2), check=_ir_version_at_least(8)),
    # -- ops the runtime cannot run
    "unknown op": Case(lambda w: [save(_two_matmuls(more_nodes=[helper.make_node("FrobnicateX", ["z"], ["q"])],
                                                    outputs=[helper.make_tensor_value_info("q", 1, None)]),
                                       w / "m.onnx")], "FrobnicateX"),
    "custom domain op": Case(lambda w: [save(_two_matmuls(
        more_nodes=[helper.make_node("Swizzle", ["z"], ["q"], domain="com.example")],
        outputs=[helper.make_tensor_value_info("q", 1, None)], domains=["com.example"]), w / "m.onnx")],
        "com.example"),
    "unknown com.microsoft op": Case(lambda w: [save(_two_matmuls(
        more_nodes=[helper.make_node("NoSuchKernel", ["z"], ["q"], domain="com.microsoft")],
        outputs=[helper.make_tensor_value_info("q", 1, None)], domains=["com.microsoft"]), w / "m.onnx")],
        "onnxruntime cannot run the model"),
    # Keras' EinsumDense through tf2onnx: the projection into heads, made a MatMul (passes.preparation.einsum_as_matmul).
    "Einsum projection into heads": Case(lambda w: [save(helper.make_model(helper.make_graph(
        [helper.make_node("Einsum", ["x", "w"], ["y"], equation="bk,khd->bhd", name="proj")], "g",
        [helper.make_tensor_value_info("x", 1, ["batch", K])], [helper.make_tensor_value_info("y", 1, None)],
        [numpy_helper.from_array(_weight((K, 2, N // 2)), "w")]), opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8), w / "m.onnx")], check=_runs({"Einsum": 0, "MatMulInteger": 1})),
    "ZipMap output (a sequence of maps)": Case(lambda w: [save(_zipmap_model(), w / "m.onnx")], "options={'zipmap'"),
    # -- broken graphs
    "missing initializer": Case(lambda w: [save(_drop_initializer(matmul_model()), w / "m.onnx")], "'w'"),
    "missing producer": Case(lambda w: [save(matmul_model(extra_nodes=[helper.make_node("Relu", ["ghost"], ["r"])],
                                                          outputs=[helper.make_tensor_value_info("r", 1, None)]),
                                             w / "m.onnx")], "'ghost'"),
    "cycle": Case(lambda w: [save(_cycle(), w / "m.onnx")], "cycle"),
    "duplicate value names": Case(lambda w: [save(matmul_model(extra_nodes=[helper.make_node("Relu", ["x"], ["y"])]),
                                                  w / "m.onnx")], "'y'"),
    "output produced by nothing": Case(lambda w: [save(matmul_model(outputs=[
        helper.make_tensor_value_info("y", 1, None), helper.make_tensor_value_info("nowhere", 1, None)]),
        w / "m.onnx")], "'nowhere'"),
    # -- weights with unusual values
    "NaN weight": Case(lambda w: _model(w, w=_weight(fill=np.nan)), "NaN"),
    "Inf weight": Case(lambda w: _model(w, w=np.where(_weight() > 0.5, np.inf, _weight())), "Inf"),
    "zero weight": Case(lambda w: _model(w, w=_weight(fill=0.0)), check=_runs({"MatMul": 0})),
    "denormal weight": Case(lambda w: _model(w, w=_weight(fill=1e-40)), "underflow"),
    "tiny weight beside a normal one": Case(lambda w: [save(_two_matmuls(w=_weight(fill=1e-35)), w / "m.onnx")],
                                            check=_runs({"MatMul": 1})),
    "1e30 weight": Case(lambda w: _model(w, w=_weight() * np.float32(1e30)), check=_runs()),
    "constant channels": Case(lambda w: _model(w, w=np.repeat(_weight((K, 1)), N, axis=1)), check=_runs()),
    # -- element types
    "float16 MatMul": Case(lambda w: [save(_typed_model(TensorProto.FLOAT16, np.float16), w / "m.onnx")],
                           check=_float16_io),
    "bfloat16 MatMul": Case(lambda w: [save(_bf16_model(), w / "m.onnx")], "bfloat16"),
    "float64 MatMul": Case(lambda w: [save(_typed_model(TensorProto.DOUBLE, np.float64), w / "m.onnx")], "float64"),
    "int32 MatMul": Case(lambda w: [save(_typed_model(TensorProto.INT32, np.int32), w / "m.onnx")], "int32"),
    # -- weight shapes and roles
    "1-D weight": Case(lambda w: _model(w, w=_weight((K,))), "nothing to quantize"),
    "3-D weight": Case(lambda w: _model(w, w=_weight((3, K, N)), x_shape=(3, "batch", K)), "rank 3"),
    # An initializer listed as an input (every one is, before IR version 4) is read as the constant it is.
    "weight is a graph input": Case(lambda w: [save(matmul_model(inputs=[
        helper.make_tensor_value_info("x", 1, ["batch", K]), helper.make_tensor_value_info("w", 1, [K, N])]),
        w / "m.onnx")], check=_inputs_are(["x"], {"MatMul": 0})),
    "IR version 3, opset 9: every initializer an input": Case(lambda w: [save(matmul_model(
        opset=9, ir_version=3, inputs=[helper.make_tensor_value_info("x", 1, ["batch", K]),
                                       helper.make_tensor_value_info("w", 1, [K, N])]),
        w / "m.onnx")], check=_inputs_are(["x"], {"MatMul": 0})),
    "weight is a graph output": Case(lambda w: _model(w, outputs=[
        helper.make_tensor_value_info("y", 1, None), helper.make_tensor_value_info("w", 1, [K, N])]),
        check=_output_is_graph_output_weight),
    "input is an output": Case(lambda w: _model(w, outputs=[
        helper.make_tensor_value_info("y", 1, None), helper.make_tensor_value_info("x", 1, None)]), check=_runs()),
    "symbolic shapes": Case(lambda w: _model(w, x_shape=("b", "k_dim")), check=_runs()),
    "Gemm transA, static": Case(lambda w: [save(_gemm(1, 1.0, 1.0), w / "m.onnx"), "--calib",
                                           _npz(w, x=_weight((8, K), seed=7))], check=_runs({"Gemm": 1})),
    "Gemm alpha beta, static": Case(lambda w: [save(_gemm(0, 0.5, 2.0), w / "m.onnx"), "--calib",
                                               _npz(w, x=_weight((8, K), seed=7))], check=_runs({"Gemm": 1})),
    # Made standard first (passes.preparation.gemm_standard_form): the dynamic form quantizes them too, no float Gemm left.
    "Gemm transA, dynamic": Case(lambda w: [save(_gemm(1, 1.0, 1.0), w / "m.onnx")], check=_runs({"Gemm": 0})),
    "Gemm alpha beta, dynamic": Case(lambda w: [save(_gemm(0, 0.5, 2.0), w / "m.onnx")], check=_runs({"Gemm": 0})),
    # -- subgraphs
    "MatMul in If": Case(lambda w: [save(_subgraph_model("If"), w / "m.onnx")], check=_runs({"MatMul": 0})),
    "MatMul in Loop": Case(lambda w: [save(_subgraph_model("Loop"), w / "m.onnx")], check=_runs({"MatMul": 0})),
    "MatMul in Scan": Case(lambda w: [save(_subgraph_model("Scan"), w / "m.onnx")], check=_runs({"MatMul": 0})),
    # -- already quantized
    "QDQ model": Case(lambda w: [save(_qdq_model(), w / "m.onnx")], "already quantized"),
    "QOperator model": Case(lambda w: [save(_already_quantized("QOperator"), w / "m.onnx")], "already quantized"),
    "MatMulNBits model": Case(lambda w: [save(_already_quantized("MatMulNBits"), w / "m.onnx")],
                              "already quantized"),
    # -- external data
    "external data absolute path": Case(lambda w: _external(w, str(w / "abs" / "w.bin")), "outside the model's"),
    "external data ..": Case(lambda w: _external(w, "../w.bin"), "outside the model's"),
    "external data symlink outside": Case(_symlinked_data, "outside the model's"),
    "external data hard-linked": Case(_hard_linked_data, "hard links"),
    "external data past the end": Case(lambda w: _external(w, "w.bin", length=K * N * 4 * 2), "past the end"),
    "external data offset past the end": Case(lambda w: _external(w, "w.bin", declared_offset=10**9), "past the end"),
    "external data missing": Case(lambda w: _external(w, "w.bin", write_data=False), "is missing"),
    # The body's MatMul is quantized (dynamic): its weight is read from beside the input, the int8 one stored in the
    # output itself.
    "external data in an If body": Case(lambda w: _external_in_body(w, "bw.bin"), check=_runs({"MatMul": 0})),
    "external data .. in an If body": Case(lambda w: _external_in_body(w, "../bw.bin"), "outside the model's"),
    "external data past the end in an If body": Case(lambda w: _external_in_body(w, "bw.bin", length=N * N * 8),
                                                     "past the end"),
    # -- output paths
    "output = input": Case(lambda w: [_good_model(w), "-o", str(w / "m.onnx")], "would overwrite the input"),
    "output folder missing": Case(lambda w: [_good_model(w), "-o", str(w / "no" / "q.onnx")], "does not exist"),
    "output is a folder": Case(lambda w: [_good_model(w), "-o", str(w)], "is a folder"),
    "output folder read-only": Case(_read_only_folder, "not writable", needs_non_root=True),
    "output folder is a file": Case(lambda w: [_good_model(w), "-o", str(Path(_good_model(w)) / "q.onnx")],
                                    "is a file, not a folder"),
    "report folder missing": Case(lambda w: [_good_model(w), "--report", str(w / "no" / "r.json")],
                                  "does not exist"),
    # -- configs and caches
    "TOML syntax error": Case(lambda w: [_good_model(w), "--config", _text(w, "c.toml", "mode = \n")], "c.toml"),
    "TOML wrong type": Case(lambda w: [_good_model(w), "--config", _text(w, "c.toml", 'per_channel = "yes"\n')],
                            "per_channel"),
    "TOML unknown section": Case(lambda w: [_good_model(w), "--config", _text(w, "c.toml", "[calibraton]\n")],
                                 "calibraton"),
    "config not found": Case(lambda w: [_good_model(w), "--config", str(w / "none.toml")], "none.toml"),
    "truncated calibration cache": Case(_truncated_cache, "cache.json"),
    "calibration cache of another model": Case(_cache_of_another_model, "another model"),
    # -- calibration data
    "object array (pickle)": Case(lambda w: [_good_model(w), "--calib", _pickled(w)], "never unpickles"),
    "corrupt npz": Case(lambda w: [_good_model(w), "--calib", str(_text(w, "d.npz", "PK\x03\x04 garbage"))],
                        "not a readable .npz"),
    "empty arrays": Case(lambda w: _calib(w, x=np.zeros((0, K), np.float32)), "no samples"),
    "zero-sized dimension": Case(lambda w: _calib(w, x=np.zeros((4, 0), np.float32)), "shape (4, 0)"),
    "absurd declared dimensions": Case(_npy_with_absurd_header, "x.npy"),
    "Inf in calibration data": Case(lambda w: _calib(w, x=np.full((4, K), np.inf, np.float32)), "contains inf"),
    "NaN in calibration data": Case(lambda w: _calib(w, x=np.full((4, K), np.nan, np.float32)), "NaN"),
    "mixed folder": Case(lambda w: [_good_model(w), "--calib", _mixed_folder(w)], "mixes .npz and .npy"),
    "wrong input name": Case(lambda w: _calib(w, q=np.zeros((4, K), np.float32)), "matches no model input"),
}


def _text(work: Path, name: str, text: str) -> str:
    (work / name).write_text(text)
    return str(work / name)


def _pickled(work: Path) -> str:
    np.savez(work / "d.npz", x=np.array([{"a": 1}, None], dtype=object))
    return str(work / "d.npz")


def _mixed_folder(work: Path) -> str:
    folder = work / "calib"
    folder.mkdir()
    np.savez(folder / "a.npz", x=np.zeros((2, K), np.float32))
    np.save(folder / "x.npy", np.zeros((2, K), np.float32))
    return str(folder)


def _strip_default_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    return model


def _drop_initializer(model: onnx.ModelProto) -> onnx.ModelProto:
    del model.graph.initializer[:]
    return model


def _cycle() -> onnx.ModelProto:
    return matmul_model(extra_nodes=[helper.make_node("Add", ["y", "b"], ["a"]),
                                     helper.make_node("Relu", ["a"], ["b"])],
                        outputs=[helper.make_tensor_value_info("b", 1, None)])


def _bf16_model() -> onnx.ModelProto:
    model = matmul_model(elem=TensorProto.BFLOAT16)
    w = helper.make_tensor("w", TensorProto.BFLOAT16, [K, N], np.zeros(K * N, np.uint16).tobytes(), raw=True)
    model.graph.initializer[0].CopyFrom(w)
    return model


def _qdq_model() -> onnx.ModelProto:
    model = matmul_model(extra_nodes=[helper.make_node("QuantizeLinear", ["y", "s"], ["yq"]),
                                      helper.make_node("DequantizeLinear", ["yq", "s"], ["yd"])],
                         extra_inits=[numpy_helper.from_array(np.array(0.1, np.float32), "s")],
                         outputs=[helper.make_tensor_value_info("yd", 1, None)])
    return model
