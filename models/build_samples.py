"""Build onnxq's small sample models and their calibration data (seeded, byte-for-byte reproducible).

    python models/build_samples.py [OUT_DIR]     # default: this folder

mlp.onnx               MLP 32-128-128-10: Gemm (transB=1, as PyTorch exports Linear) + Relu; input x [batch, 32]
tiny_transformer.onnx  one BERT-style encoder block, hidden 64, 4 heads: token embedding (Gather), LayerNorm,
                       attention (MatMul Q/K/V/out, Q·Kᵀ, Softmax, scores·V), GELU FFN; input_ids [batch, seq]
*_calib.npz            calibration inputs, first axis = samples
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx_ir as ir

OPSET = 17
IR_VERSION = 8


def _init(tape: ir.tape.Tape, rng: np.random.Generator, name: str, shape: tuple[int, ...],
          scale: float | None = None) -> ir.Value:
    fan_in = shape[0] if len(shape) > 1 else 1
    std = scale if scale is not None else (2.0 / fan_in) ** 0.5
    return tape.initializer(ir.tensor(rng.normal(0.0, std, shape).astype(np.float32), name=name))


def _const(tape: ir.tape.Tape, name: str, array: np.ndarray) -> ir.Value:
    return tape.initializer(ir.tensor(np.asarray(array), name=name))


def _model(tape: ir.tape.Tape, inputs: list[ir.Value], outputs: list[ir.Value]) -> ir.Model:
    graph = ir.Graph(inputs, outputs, nodes=tape.nodes, initializers=tape.initializers,
                     opset_imports={"": OPSET}, name="onnxq_sample")
    return ir.Model(graph, ir_version=IR_VERSION, producer_name="onnxq models/build_samples.py")


def build_mlp(rng: np.random.Generator) -> ir.Model:
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 32])
    h = x
    sizes = [32, 128, 128, 10]
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        w = _init(tape, rng, f"fc{i}.weight", (n_out, n_in), scale=(2.0 / n_in) ** 0.5)
        b = _init(tape, rng, f"fc{i}.bias", (n_out,), scale=0.1)
        h = tape.op("Gemm", [h, w, b], {"transB": 1}, name=f"/fc{i}/Gemm")
        if i < len(sizes) - 2:
            h = tape.op("Relu", [h], name=f"/relu{i}/Relu")
    h.name = "logits"
    return _model(tape, [x], [h])


def build_tiny_transformer(rng: np.random.Generator, vocab: int = 2048, hidden: int = 64, heads: int = 4,
                           ffn: int = 256) -> ir.Model:
    tape = ir.tape.Tape()
    ids = ir.val("input_ids", ir.DataType.INT64, ["batch", "sequence"])
    head_dim = hidden // heads
    table = _init(tape, rng, "embeddings.word.weight", (vocab, hidden), scale=0.5)
    x = tape.op("Gather", [table, ids], {"axis": 0}, name="/embeddings/Gather")

    def layer_norm(v: ir.Value, prefix: str) -> ir.Value:
        gamma = _const(tape, f"{prefix}.weight", np.ones(hidden, np.float32))
        beta = _const(tape, f"{prefix}.bias", np.zeros(hidden, np.float32))
        return tape.op("LayerNormalization", [v, gamma, beta], {"axis": -1, "epsilon": 1e-12},
                       name=f"/{prefix}/LayerNormalization")

    def linear(v: ir.Value, prefix: str, n_in: int, n_out: int) -> ir.Value:
        w = _init(tape, rng, f"{prefix}.weight", (n_in, n_out), scale=(1.0 / n_in) ** 0.5)
        b = _init(tape, rng, f"{prefix}.bias", (n_out,), scale=0.02)
        y = tape.op("MatMul", [v, w], name=f"/{prefix}/MatMul")
        return tape.op("Add", [y, b], name=f"/{prefix}/Add")

    x = layer_norm(x, "embeddings.LayerNorm")
    split_shape = _const(tape, "split_heads_shape", np.array([0, 0, heads, head_dim], np.int64))
    merge_shape = _const(tape, "merge_heads_shape", np.array([0, 0, hidden], np.int64))

    def heads_first(v: ir.Value, name: str) -> ir.Value:
        v = tape.op("Reshape", [v, split_shape], name=f"/attention/{name}/Reshape")
        return tape.op("Transpose", [v], {"perm": [0, 2, 1, 3]}, name=f"/attention/{name}/Transpose")

    q = heads_first(linear(x, "attention.query", hidden, hidden), "query")
    k = heads_first(linear(x, "attention.key", hidden, hidden), "key")
    v = heads_first(linear(x, "attention.value", hidden, hidden), "value")
    k_t = tape.op("Transpose", [k], {"perm": [0, 1, 3, 2]}, name="/attention/key/Transpose_1")
    scores = tape.op("MatMul", [q, k_t], name="/attention/scores/MatMul")
    scores = tape.op("Div", [scores, _const(tape, "attention.scale", np.array(head_dim ** 0.5, np.float32))],
                     name="/attention/scores/Div")
    probs = tape.op("Softmax", [scores], {"axis": -1}, name="/attention/Softmax")
    context = tape.op("MatMul", [probs, v], name="/attention/context/MatMul")
    context = tape.op("Transpose", [context], {"perm": [0, 2, 1, 3]}, name="/attention/context/Transpose")
    context = tape.op("Reshape", [context, merge_shape], name="/attention/context/Reshape")
    attn = linear(context, "attention.output", hidden, hidden)
    x = layer_norm(tape.op("Add", [x, attn], name="/attention/residual/Add"), "attention.LayerNorm")

    up = linear(x, "ffn.intermediate", hidden, ffn)
    # GELU as BERT exports it: 0.5 · x · (1 + erf(x / √2))
    erf = tape.op("Erf", [tape.op("Div", [up, _const(tape, "sqrt2", np.array(2 ** 0.5, np.float32))])])
    gelu = tape.op("Mul", [tape.op("Mul", [up, tape.op("Add", [erf, _const(tape, "one", np.array(1.0, np.float32))])]),
                           _const(tape, "half", np.array(0.5, np.float32))], name="/ffn/gelu/Mul_1")
    down = linear(gelu, "ffn.output", ffn, hidden)
    out = layer_norm(tape.op("Add", [x, down], name="/ffn/residual/Add"), "output.LayerNorm")
    out.name = "last_hidden_state"
    return _model(tape, [ids], [out])


def main(out_dir: str | Path = Path(__file__).parent) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    ir.save(build_mlp(rng), out_dir / "mlp.onnx")
    np.savez(out_dir / "mlp_calib.npz", x=rng.normal(0.0, 1.0, (256, 32)).astype(np.float32))
    ir.save(build_tiny_transformer(rng), out_dir / "tiny_transformer.onnx")
    np.savez(out_dir / "tiny_transformer_calib.npz", input_ids=rng.integers(0, 2048, (128, 16)).astype(np.int64))
    print(f"wrote mlp.onnx, mlp_calib.npz, tiny_transformer.onnx, tiny_transformer_calib.npz to {out_dir}")


if __name__ == "__main__":
    main(*sys.argv[1:])
