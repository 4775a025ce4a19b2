"""A small decoder language model with a KV cache, in the I/O of Hugging Face Optimum's text-generation-with-past
export: inputs input_ids, attention_mask [batch, past + sequence], position_ids and, per layer,
past_key_values.L.key / .value [batch, heads, past_sequence_length, head_dim]; outputs logits [batch, sequence,
vocab] and present.L.key / .value (the past with this step's keys and values appended). Causal attention over the
cache, RMS norms, tied embedding and lm_head — built with onnx.helper, standard ops only."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["kv_decoder", "token_windows", "sampled_windows", "VOCAB", "HEADS", "HEAD_DIM", "LAYERS"]

VOCAB, WIDTH, HEADS, HEAD_DIM, LAYERS, MAX_POSITIONS = 96, 64, 4, 16, 2, 256
_F = TensorProto.FLOAT


def kv_decoder(seed: int = 0, layers: int = LAYERS, width: int = WIDTH, heads: int = HEADS,
               vocab: int = VOCAB, head_dim_name: str | None = None) -> onnx.ModelProto:
    """The test decoder; larger ones (bench/bench_memory_limit.py: a decoder larger than memory) by layers, width
    (heads × head_dim) and vocabulary. head_dim_name: the caches' head size named, not written (as onnxruntime-genai's
    builder writes its float16 CPU export, which concatenates them as this one does)."""
    rng = np.random.default_rng(seed)
    weights = {"embed": rng.normal(0, 1, (vocab, width)), "positions": rng.normal(0, 0.3, (MAX_POSITIONS, width)),
               "lm_head": None, "final_norm": rng.uniform(0.8, 1.2, width)}
    weights["lm_head"] = weights["embed"].T / 6  # tied, scaled: predictions spread over a few dozen tokens
    for layer in range(layers):
        for proj in ("q", "k", "v", "o", "up", "down"):
            shape = (width, 4 * width) if proj == "up" else (4 * width, width) if proj == "down" else (width, width)
            weights[f"l{layer}.{proj}"] = rng.normal(0, 1 / np.sqrt(shape[0]), shape)
        weights[f"l{layer}.norm1"] = rng.uniform(0.8, 1.2, width)
        weights[f"l{layer}.norm2"] = rng.uniform(0.8, 1.2, width)
    inits = [numpy_helper.from_array(np.asarray(w, np.float32), name) for name, w in weights.items()]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (
        ("heads_shape", [0, 0, heads, width // heads]), ("width_shape", [0, 0, width]), ("axis1", [1]),
        ("minus1", [-1]), ("zero_i", 0), ("one_i", 1))]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (
        ("eps", 1e-6), ("scale", 1 / np.sqrt(width // heads)), ("neg", -1e4), ("zero_f", 0.0))]
    nodes = [helper.make_node("Gather", ["embed", "input_ids"], ["tok"], name="embed_tokens"),
             helper.make_node("Gather", ["positions", "position_ids"], ["pos"], name="embed_positions"),
             helper.make_node("Add", ["tok", "pos"], ["h0"], name="embed_add"), *_mask_nodes()]
    hidden = "h0"
    for layer in range(layers):
        layer_nodes, hidden = _layer(layer, hidden)
        nodes += layer_nodes
    nodes += _rms("final", hidden, "final_norm", "hf")
    nodes.append(helper.make_node("MatMul", ["hf", "lm_head"], ["logits"], name="lm_head"))
    inputs, outputs = _decoder_io(heads, head_dim_name or width // heads, position_ids=True, vocab=vocab,
                                  layers=layers)
    graph = helper.make_graph(nodes, "kv_decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    if sum(np.size(w) for w in weights.values()) * 4 < 2**31 - 2**24:  # the checker serializes the model (< 2 GB)
        onnx.checker.check_model(model)
    return model


def _decoder_io(kv_heads: int, head_dim: int | str, position_ids: bool, vocab: int = VOCAB,
                layers: int = LAYERS) -> tuple[list, list]:
    """A KV-cache decoder's inputs and outputs, named as Optimum and the genai builder name them."""
    cache = ["batch_size", kv_heads, "past_sequence_length", head_dim]
    total = ["batch_size", kv_heads, "total_sequence_length", head_dim]
    tokens = ["batch_size", "sequence_length"]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, tokens),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "total_sequence_length"])]
    if position_ids:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, tokens))
    outputs = [helper.make_tensor_value_info("logits", _F, ["batch_size", "sequence_length", vocab])]
    for layer in range(layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{layer}.{kind}", _F, cache))
            outputs.append(helper.make_tensor_value_info(f"present.{layer}.{kind}", _F, total))
    return inputs, outputs


def _mask_nodes() -> list[onnx.NodeProto]:
    """bias [batch, 1, sequence, total]: 0 where query i (at position past + i) may see key j — j <= past + i and
    attention_mask[j] = 1 — else -1e4."""
    n = helper.make_node
    return [n("Shape", ["attention_mask"], ["mask_shape"], name="mask_shape"),
            n("Gather", ["mask_shape", "one_i"], ["total"], name="total"),
            n("Shape", ["input_ids"], ["ids_shape"], name="ids_shape"),
            n("Gather", ["ids_shape", "one_i"], ["seq"], name="seq"),
            n("Sub", ["total", "seq"], ["past"], name="past"),
            n("Range", ["zero_i", "total", "one_i"], ["key_at"], name="key_at"),
            n("Add", ["past", "seq"], ["past_end"], name="past_end"),
            n("Range", ["past", "past_end", "one_i"], ["query_at"], name="query_at"),
            n("Unsqueeze", ["query_at", "minus1"], ["query_col"], name="query_col"),
            n("LessOrEqual", ["key_at", "query_col"], ["causal"], name="causal"),
            n("Cast", ["attention_mask"], ["mask_b"], to=TensorProto.BOOL, name="mask_bool"),
            n("Unsqueeze", ["mask_b", "axis1"], ["mask_b1"], name="mask_rows"),
            n("Unsqueeze", ["mask_b1", "axis1"], ["mask_b2"], name="mask_heads"),
            n("And", ["causal", "mask_b2"], ["visible"], name="visible"),
            n("Where", ["visible", "zero_f", "neg"], ["bias"], name="bias")]


def _rms(prefix: str, x: str, gain: str, out: str) -> list[onnx.NodeProto]:
    n = helper.make_node
    return [n("Mul", [x, x], [f"{prefix}_sq"], name=f"{prefix}/sq"),
            n("ReduceMean", [f"{prefix}_sq", "minus1"], [f"{prefix}_ms"], name=f"{prefix}/mean"),
            n("Add", [f"{prefix}_ms", "eps"], [f"{prefix}_mse"], name=f"{prefix}/eps"),
            n("Sqrt", [f"{prefix}_mse"], [f"{prefix}_rms"], name=f"{prefix}/sqrt"),
            n("Div", [x, f"{prefix}_rms"], [f"{prefix}_normed"], name=f"{prefix}/div"),
            n("Mul", [f"{prefix}_normed", gain], [out], name=f"{prefix}/gain")]


def _layer(layer: int, x: str) -> tuple[list[onnx.NodeProto], str]:
    n, p = helper.make_node, f"l{layer}"
    nodes = _rms(f"{p}/norm1", x, f"{p}.norm1", f"{p}_n1")
    for proj in ("q", "k", "v"):
        nodes += [n("MatMul", [f"{p}_n1", f"{p}.{proj}"], [f"{p}_{proj}"], name=f"{p}/{proj}_proj"),
                  n("Reshape", [f"{p}_{proj}", "heads_shape"], [f"{p}_{proj}4"], name=f"{p}/{proj}_heads"),
                  n("Transpose", [f"{p}_{proj}4"], [f"{p}_{proj}t"], perm=[0, 2, 1, 3], name=f"{p}/{proj}_t")]
    nodes += [n("Concat", [f"past_key_values.{layer}.key", f"{p}_kt"], [f"present.{layer}.key"], axis=2,
                name=f"{p}/cache_k"),
              n("Concat", [f"past_key_values.{layer}.value", f"{p}_vt"], [f"present.{layer}.value"], axis=2,
                name=f"{p}/cache_v"),
              n("Transpose", [f"present.{layer}.key"], [f"{p}_kT"], perm=[0, 1, 3, 2], name=f"{p}/k_T"),
              n("MatMul", [f"{p}_qt", f"{p}_kT"], [f"{p}_qk"], name=f"{p}/scores"),
              n("Mul", [f"{p}_qk", "scale"], [f"{p}_qks"], name=f"{p}/scale"),
              n("Add", [f"{p}_qks", "bias"], [f"{p}_qkm"], name=f"{p}/mask"),
              n("Softmax", [f"{p}_qkm"], [f"{p}_att"], axis=-1, name=f"{p}/softmax"),
              n("MatMul", [f"{p}_att", f"present.{layer}.value"], [f"{p}_ctx"], name=f"{p}/context"),
              n("Transpose", [f"{p}_ctx"], [f"{p}_ctxt"], perm=[0, 2, 1, 3], name=f"{p}/ctx_t"),
              n("Reshape", [f"{p}_ctxt", "width_shape"], [f"{p}_ctx3"], name=f"{p}/ctx_merge"),
              n("MatMul", [f"{p}_ctx3", f"{p}.o"], [f"{p}_o"], name=f"{p}/o_proj"),
              n("Add", [x, f"{p}_o"], [f"{p}_h1"], name=f"{p}/residual1")]
    nodes += _rms(f"{p}/norm2", f"{p}_h1", f"{p}.norm2", f"{p}_n2")
    nodes += [n("MatMul", [f"{p}_n2", f"{p}.up"], [f"{p}_up"], name=f"{p}/up_proj"),
              n("Relu", [f"{p}_up"], [f"{p}_act"], name=f"{p}/act"),
              n("MatMul", [f"{p}_act", f"{p}.down"], [f"{p}_down"], name=f"{p}/down_proj"),
              n("Add", [f"{p}_h1", f"{p}_down"], [f"{p}_h2"], name=f"{p}/residual2")]
    return nodes, f"{p}_h2"


def token_windows(rng: np.random.Generator, windows: int, length: int, vocab: int = VOCAB) -> dict[str, np.ndarray]:
    """What a language-model user has: windows of token ids, and their attention mask (all ones)."""
    ids = rng.integers(0, vocab, (windows, length), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def sampled_windows(model: onnx.ModelProto, rng: np.random.Generator, windows: int, length: int) -> dict[str, np.ndarray]:
    """Windows the model itself would write: each next token sampled from its own prediction (temperature 1), so
    that its perplexity on them is that of text it models — random tokens score it astronomically."""
    import onnxruntime as ort
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = rng.integers(0, VOCAB, (windows, 1), dtype=np.int64)
    empty = {f"past_key_values.{layer}.{kind}": np.zeros((windows, HEADS, 0, HEAD_DIM), np.float32)
             for layer in range(LAYERS) for kind in ("key", "value")}
    while ids.shape[1] < length:
        positions = np.tile(np.arange(ids.shape[1]), (windows, 1))
        logits = session.run(["logits"], {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                          "position_ids": positions, **empty})[0][:, -1].astype(np.float64)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        picked = [rng.choice(VOCAB, p=row) for row in p]
        ids = np.concatenate([ids, np.array(picked, np.int64)[:, None]], axis=1)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def genai_decoder(seed: int = 0, vocab: int = VOCAB) -> onnx.ModelProto:
    """The same kind of decoder as onnxruntime-genai's model builder writes it: SimplifiedLayerNormalization (ONNX
    domain, ORT's), SkipSimplifiedLayerNormalization and GroupQueryAttention (com.microsoft) with packed QKV, rotary
    embeddings from cos / sin caches, caches [batch, kv heads, past_sequence_length, kv_cache_dim] (the head size
    named, not written), no position_ids, and the embeddings gathered from the transposed lm_head weight."""
    rng = np.random.default_rng(seed)
    kv_heads, n = 2, helper.make_node
    qkv_width = (HEADS + 2 * kv_heads) * HEAD_DIM
    lm_head = rng.normal(0, 1, (WIDTH, vocab)).astype(np.float32) / 6
    half = HEAD_DIM // 2
    angles = np.arange(MAX_POSITIONS)[:, None] / (10000 ** (np.arange(half) / half))[None, :]
    inits = [numpy_helper.from_array(lm_head, "lm_head.weight"),
             numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos_cache"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin_cache"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(1, np.int64), "one_scalar")]
    nodes = [n("Transpose", ["lm_head.weight"], ["table"], perm=[1, 0], name="embed_tokens/Transpose"),
             n("Gather", ["table", "input_ids"], ["h0"], name="embed_tokens/Gather"),
             n("ReduceSum", ["attention_mask", "one"], ["mask_sum"], keepdims=0, name="mask/ReduceSum"),
             n("Sub", ["mask_sum", "one"], ["seqlens"], name="mask/Sub"),
             n("Cast", ["seqlens"], ["seqlens_k"], to=TensorProto.INT32, name="mask/Sub/Cast"),
             n("Shape", ["attention_mask"], ["mask_shape"], name="mask/Shape"),
             n("Gather", ["mask_shape", "one_scalar"], ["total"], name="mask/Gather"),
             n("Cast", ["total"], ["total_len"], to=TensorProto.INT32, name="mask/Gather/Cast")]
    hidden = "h0"
    for layer in range(LAYERS):
        p = f"l{layer}"
        for name, shape in (("qkv", (WIDTH, qkv_width)), ("o", (HEADS * HEAD_DIM, WIDTH)),
                            ("up", (WIDTH, 4 * WIDTH)), ("down", (4 * WIDTH, WIDTH))):
            inits.append(numpy_helper.from_array(rng.normal(0, 1 / np.sqrt(shape[0]), shape).astype(np.float32),
                                                 f"{p}.{name}"))
        inits += [numpy_helper.from_array(rng.uniform(0.8, 1.2, WIDTH).astype(np.float32), f"{p}.norm{i}")
                  for i in (1, 2)]
        norm = (n("SimplifiedLayerNormalization", [hidden, f"{p}.norm1"], [f"{p}_n1"], axis=-1, epsilon=1e-6,
                  name=f"{p}/input_layernorm") if layer == 0 else
                n("SkipSimplifiedLayerNormalization", [hidden, f"l{layer - 1}_down", f"{p}.norm1"],
                  [f"{p}_n1", "", "", f"{p}_res0"], epsilon=1e-6, domain="com.microsoft", name=f"{p}/input_layernorm"))
        residual = hidden if layer == 0 else f"{p}_res0"
        nodes += [norm,
                  n("MatMul", [f"{p}_n1", f"{p}.qkv"], [f"{p}_qkv"], name=f"{p}/attn/qkv_proj/MatMul"),
                  n("GroupQueryAttention", [f"{p}_qkv", "", "", f"past_key_values.{layer}.key",
                                            f"past_key_values.{layer}.value", "seqlens_k", "total_len", "cos_cache",
                                            "sin_cache"],
                    [f"{p}_attn", f"present.{layer}.key", f"present.{layer}.value"], domain="com.microsoft",
                    num_heads=HEADS, kv_num_heads=kv_heads, do_rotary=1, scale=1 / np.sqrt(HEAD_DIM),
                    name=f"{p}/attn/GroupQueryAttention"),
                  n("MatMul", [f"{p}_attn", f"{p}.o"], [f"{p}_o"], name=f"{p}/attn/o_proj/MatMul"),
                  n("SkipSimplifiedLayerNormalization", [f"{p}_o", residual, f"{p}.norm2"],
                    [f"{p}_n2", "", "", f"{p}_res1"], epsilon=1e-6, domain="com.microsoft",
                    name=f"{p}/post_attention_layernorm"),
                  n("MatMul", [f"{p}_n2", f"{p}.up"], [f"{p}_up"], name=f"{p}/mlp/up_proj/MatMul"),
                  n("Relu", [f"{p}_up"], [f"{p}_act"], name=f"{p}/mlp/act"),
                  n("MatMul", [f"{p}_act", f"{p}.down"], [f"{p}_down"], name=f"{p}/mlp/down_proj/MatMul")]
        hidden = f"{p}_res1"
    inits.append(numpy_helper.from_array(np.ones(WIDTH, np.float32), "final_norm"))
    nodes += [n("SkipSimplifiedLayerNormalization", [hidden, f"l{LAYERS - 1}_down", "final_norm"], ["hf"],
                epsilon=1e-6, domain="com.microsoft", name="final_norm_layernorm"),
              n("MatMul", ["hf", "lm_head.weight"], ["logits"], name="lm_head/MatMul")]
    inputs, outputs = _decoder_io(kv_heads, "kv_cache_dim", position_ids=False, vocab=vocab)
    graph = helper.make_graph(nodes, "genai_decoder", inputs, outputs, inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                  helper.make_opsetid("com.microsoft", 1)])
