"""A decoder with a KV cache, fed what its users have — windows of token ids: onnxq makes the empty
caches and the position ids a first step takes, says so, and writes a file with the model's own inputs and outputs
that decodes with its cache as the float model does. Errors stay one short line however many inputs the model has.
"""

import dataclasses

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from decoder_model import HEAD_DIM, HEADS, LAYERS, genai_decoder, kv_decoder, sampled_windows, token_windows

import onnxq
from onnxq.data.specs import input_specs
from onnxq.data.completion import completed
from onnxq.cli.main import main
from onnxq.io import load_model
from onnxq.verify.speed.decode import cache_pairs, decode_speed, decode_window
from onnxq.steps.language_model import language_model_defaults
from onnxq.report.summary import format_summary

CACHES = [f"past_key_values.{layer}.{kind}" for layer in range(LAYERS) for kind in ("key", "value")]
# These decoders are a few hundred kB: per-token quantization's run-time scales cost more than their products save,
# and never-slower would keep every node float. What is tested here is the data and the gate, not their speed.
ANY_SPEED = onnxq.QuantConfig(verify=onnxq.VerifyConfig(never_slower=False))


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    path = tmp_path_factory.mktemp("decoder") / "decoder.onnx"
    onnx.save(kv_decoder(), path)
    return path


def test_token_windows_are_completed_as_a_first_step(decoder, rng):
    specs = input_specs(load_model(decoder))
    made = {}
    batch = completed(token_windows(rng, 3, 5), specs, made)
    assert sorted(batch) == sorted(["input_ids", "attention_mask", "position_ids", *CACHES])
    assert all(batch[name].shape == (3, HEADS, 0, HEAD_DIM) and batch[name].dtype == np.float32 for name in CACHES)
    np.testing.assert_array_equal(batch["position_ids"], np.tile(np.arange(5), (3, 1)))
    assert made == {**{name: "empty (past length 0)" for name in CACHES},
                    "position_ids": "from the attention mask (running count - 1)"}
    # Left padding, as a tokenizer pads a batch for generation: positions count the real tokens only (Hugging Face).
    ids = np.arange(8, dtype=np.int64).reshape(2, 4)
    mask = np.array([[0, 0, 1, 1], [1, 1, 1, 1]], np.int64)
    padded = completed({"input_ids": ids, "attention_mask": mask}, specs)
    np.testing.assert_array_equal(padded["position_ids"], [[1, 1, 0, 1], [0, 1, 2, 3]])
    # Without a mask either: all ones. What the data holds is never replaced.
    no_mask = completed({"input_ids": ids}, specs)
    assert no_mask["attention_mask"].shape == (2, 4) and no_mask["attention_mask"].all()
    given = {"input_ids": ids, "attention_mask": mask, "position_ids": np.zeros_like(ids)}
    assert completed(given, specs)["position_ids"].sum() == 0


def _feed(session, windows, pasts):
    feed = dict(windows)
    feed["position_ids"] = np.cumsum(windows["attention_mask"], 1)[:, -windows["input_ids"].shape[1]:] - 1
    feed.update(pasts)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def test_a_decoder_quantizes_from_token_windows_and_decodes_with_its_cache(decoder, rng, tmp_path):
    calibration, held_out = token_windows(rng, 48, 16), token_windows(rng, 8, 16)
    out = tmp_path / "q.onnx"
    report = onnxq.quantize(decoder, calibration, output=out, verify_data=held_out, config=ANY_SPEED).report
    assert report.passed and len(report.quantized) == 13  # q/k/v/o/up/down × 2 layers, and lm_head
    assert report.config["activation_granularity"] == "per-token" and report.config["smooth"] == "auto"
    assert any(n.startswith("language model recognized (logits over 96 tokens, the rows input_ids indexes") and
               "per-token activations with SmoothQuant" in n for n in report.notes)
    assert any(n.startswith("inputs the data leaves out, made as a decoder's first step takes them: 4 inputs "
                            "empty (past length 0)") and "position_ids from the attention mask" in n
               for n in report.notes)
    float_model, quantized = onnx.load(str(decoder)), onnx.load(str(out))
    assert [i.name for i in quantized.graph.input] == [i.name for i in float_model.graph.input]
    assert [o.name for o in quantized.graph.output] == [o.name for o in float_model.graph.output]
    # Decoding: a prefill of 12 tokens, then token 13 with the cache, as a generation loop runs it.
    sessions = [ort.InferenceSession(str(p)) for p in (decoder, out)]
    empty = {name: np.zeros((8, HEADS, 0, HEAD_DIM), np.float32) for name in CACHES}
    step = {}
    for which, session in zip(("float", "int8"), sessions):
        prefill = _feed(session, {k: v[:, :12] for k, v in held_out.items()}, empty)
        pasts = {name: prefill[name.replace("past_key_values", "present")] for name in CACHES}
        step[which] = _feed(session, {"input_ids": held_out["input_ids"][:, 12:13],
                                      "attention_mask": held_out["attention_mask"][:, :13]}, pasts)
    a, b = step["float"]["logits"].ravel(), step["int8"]["logits"].ravel()
    # Seeded: int8 products keep the decode step's logits at cosine > 0.999 (measured 0.9998 on the prefill).
    assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.999


def test_a_missing_input_is_one_short_line(decoder, rng, tmp_path, capsys):
    """A decoder with 2 layers has 7 inputs; SmolLM2 has 63, and the line listed every one (7 KB)."""
    np.savez(tmp_path / "calib.npz", attention_mask=np.ones((8, 16), np.int64))  # no input_ids: nothing to make
    code = main([str(decoder), "--calib", str(tmp_path / "calib.npz"), "-o", str(tmp_path / "q.onnx")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and len(err) < 600
    assert "calibration data lacks model input 'input_ids'" in err and "… (1 more)" in err


def test_the_gate_judges_the_logits_by_perplexity_and_the_caches_through_them(decoder, rng, tmp_path):
    model = onnx.load(str(decoder))
    calibration, held_out = sampled_windows(model, rng, 48, 16), sampled_windows(model, rng, 8, 16)
    report = onnxq.quantize(decoder, calibration, output=tmp_path / "q.onnx", verify_data=held_out,
                            config=ANY_SPEED).report
    assert report.passed
    tasks = report.verification.tasks
    assert tasks["logits"].kind == "next-token" and tasks["logits"].labels == "input_ids"
    assert {tasks[name].kind for name in tasks if name.startswith("present.")} == {"state"}
    logits = next(o for o in report.verification.outputs if o.name == "logits").metrics
    # 8 windows of 16 tokens the float model wrote itself: 15 next tokens each, perplexity 4.28 (seeded). int8
    # moves it by 0.09 % here (measured on AVX-512 VNNI): well inside 2 % on any CPU's kernels.
    assert logits.scored_tokens == 120 and logits.perplexity_reference == pytest.approx(4.28, abs=0.01)
    assert abs(logits.perplexity_ratio - 1) < 0.02
    summary = format_summary(report)
    assert "logits: perplexity 4.283 float -> " in summary and "over 120 next tokens" in summary
    assert "4 output(s): state, judged through the outputs it makes" in summary


def test_an_onnxruntime_genai_decoder_quantizes_from_token_windows(rng, tmp_path):
    """The builder's file: SimplifiedLayerNormalization, GroupQueryAttention reading caches whose head size is a
    name (kv_cache_dim), no position_ids, embeddings gathered from the transposed lm_head. Its caches are made
    empty with the head size GroupQueryAttention implies (packed QKV width 128 over 4 + 2·2 heads: 16), its logits
    judged by perplexity, and the quantized file keeps the I/O genai_config.json names."""
    path = tmp_path / "model.onnx"
    onnx.save(genai_decoder(), path)
    specs = {s.name: s for s in input_specs(load_model(path))}
    assert specs["past_key_values.0.key"].shape == ("batch_size", 2, "past_sequence_length", HEAD_DIM)
    model = onnx.load(str(path))
    report = onnxq.quantize(path, token_windows(rng, 48, 16), output=tmp_path / "q.onnx",
                            verify_data=token_windows(rng, 8, 16), config=ANY_SPEED).report
    assert report.passed and report.verification.tasks["logits"].kind == "next-token"
    assert len([e for e in report.quantized if e.op_type == "MatMul"]) == 9  # 4 per layer and lm_head
    assert any("4 inputs empty (past length 0)" in note for note in report.notes)
    quantized = onnx.load(str(tmp_path / "q.onnx"))
    assert [i.name for i in quantized.graph.input] == [i.name for i in model.graph.input]
    assert [o.name for o in quantized.graph.output] == [o.name for o in model.graph.output]
    assert sum(n.op_type == "GroupQueryAttention" for n in quantized.graph.node) == LAYERS


def _genai_decoder_for_cuda(rng, tmp_path, verify: onnxq.VerifyConfig):
    """The builder-style decoder quantized for --target cuda (written to tmp_path / "q.onnx"): its report."""
    path = tmp_path / "model.onnx"
    onnx.save(genai_decoder(), path)
    config = dataclasses.replace(ANY_SPEED, target="cuda", verify=verify)
    return onnxq.quantize(path, token_windows(rng, 48, 16), output=tmp_path / "q.onnx",
                          verify_data=token_windows(rng, 8, 16), config=config).report


def test_an_onnxruntime_genai_decoder_for_cuda_computes_in_float16_through_the_builder_s_ops(rng, tmp_path):
    """--target cuda on the builder's file: its norms, GroupQueryAttention and the MatMulNBits between them compute
    in float16 (typed by ORT's schemas: CUDA's GroupQueryAttention has no float32 kernel), the caches and logits keep
    their float32 I/O, and the file is checked by its exact float16 arithmetic within the gate (it was refused:
    "MatMulNBits' T1 bound to float and float16")."""
    report = _genai_decoder_for_cuda(rng, tmp_path, ANY_SPEED.verify)
    assert report.passed and report.section("precision").kept == {}
    quantized = load_model(tmp_path / "q.onnx")
    fused = [n for n in quantized.graph if n.op_type in ("GroupQueryAttention", "SkipSimplifiedLayerNormalization",
                                                          "SimplifiedLayerNormalization", "MatMulNBits")]
    assert len(fused) == 3 * LAYERS + 9 + 1  # per layer GQA and two norms; 9 products; the final norm
    assert all(n.outputs[0].dtype == ir.DataType.FLOAT16 for n in fused)
    assert all(v.dtype == ir.DataType.FLOAT for v in (*quantized.graph.inputs, *quantized.graph.outputs)
               if v.dtype not in (ir.DataType.INT64, ir.DataType.INT32))


@pytest.mark.cuda
def test_an_onnxruntime_genai_decoder_for_cuda_runs_its_attention_there_and_is_timed_decoding_there(rng, tmp_path):
    """On a GPU machine: GroupQueryAttention (no float32 CUDA kernel) and every MatMulNBits run on CUDA, the file
    passes there, and the decode line is CUDA's, the provider the target deploys to."""
    report = _genai_decoder_for_cuda(rng, tmp_path, dataclasses.replace(ANY_SPEED.verify, providers=("cpu", "cuda")))
    cuda = next(p for p in report.verification.providers if p.provider == "CUDAExecutionProvider")
    assert report.passed and cuda.passed and cuda.placement.source == "profiled"
    ran = {(r.op_type, r.provider) for r in cuda.placement.runs if r.op_type in ("GroupQueryAttention", "MatMulNBits")}
    assert ran == {("GroupQueryAttention", "CUDAExecutionProvider"), ("MatMulNBits", "CUDAExecutionProvider")}
    assert report.section("decode_speed").provider == "CUDAExecutionProvider"


@pytest.mark.parametrize("changes, mode, granularity, smooth, level", [
    ({}, "static", "per-token", "auto", None),
    ({"smooth": 0.5}, "static", "per-token", 0.5, None),                    # the user's smoothing kept
    ({"activation_granularity": "per-tensor"}, "static", "per-tensor", "off", None),
    ({"recipe": "auto"}, "static", "per-tensor", "off", None),               # the recipe chooses per group
    ({"weights": onnxq.QScheme("int4")}, "weight-only", "per-tensor", "off", 4),
    ({"weights": onnxq.QScheme("int4"), "blocks": onnxq.BlockConfig(accuracy_level=0)}, "weight-only", "per-tensor",
     "off", 0),
    ({"target": "cuda"}, "weight-only", "per-tensor", "off", 0),            # accuracy_level 4 is a CPU kernel's
])
def test_language_model_defaults_fill_only_the_open_choices(decoder, changes, mode, granularity, smooth, level):
    config, note = language_model_defaults(load_model(decoder), onnxq.QuantConfig(**changes), mode, True)
    assert (config.activation_granularity, config.smooth, config.blocks.accuracy_level) == (granularity, smooth,
                                                                                             level)
    assert note.startswith("language model recognized")


@pytest.mark.parametrize("weights, vocabulary_bits, eight_bit", [
    ("int4", None, ("embed_tokens", "lm_head")), ("int4", 4, ()), ("int8", None, ())])
def test_the_vocabulary_s_nodes_are_found_through_what_follows_the_lm_head(weights, vocabulary_bits, eight_bit):
    """The token table (the Gather whose table has a row per token, not the positions') and the product that makes
    the logits, seen back through a scale (a soft cap's, a temperature's), join the 8-bit tier of 4-bit weights
    unless vocabulary_bits is 4; int8 weights have no tier."""
    model = kv_decoder()
    head = next(n for n in model.graph.node if n.name == "lm_head")
    head.output[0] = "raw_logits"
    model.graph.node.append(helper.make_node("Mul", ["raw_logits", "scale"], ["logits"], name="logit_scale"))
    mode = "weight-only" if weights == "int4" else "static"
    blocks = onnxq.BlockConfig(vocabulary_bits=vocabulary_bits)
    config = onnxq.QuantConfig(weights=onnxq.QScheme(weights), blocks=blocks) if weights == "int4" else \
        onnxq.QuantConfig()
    chosen, note = language_model_defaults(ir.serde.deserialize_model(model), config, mode, True)
    assert chosen.blocks.int8_nodes == eight_bit
    assert ("lm_head in 8-bit blocks (embed_tokens, lm_head)" in note) == bool(eight_bit)


def test_other_models_keep_the_defaults_they_had(samples_dir):
    config, note = language_model_defaults(load_model(samples_dir / "tiny_transformer.onnx"), onnxq.QuantConfig(),
                                           "static", True)
    assert note is None and config.activation_granularity == "per-tensor" and config.smooth == "off"


def test_decoding_feeds_each_step_the_cache_the_step_before_made(decoder, rng):
    """The decode loop's last logits are the full window's last position's: the cache is fed back right."""
    session = ort.InferenceSession(str(decoder), providers=["CPUExecutionProvider"])
    specs = input_specs(load_model(decoder))
    pairs = cache_pairs([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
    assert pairs == {name.replace("past_key_values", "present"): name for name in CACHES}
    window = token_windows(rng, 1, 12)["input_ids"]
    _, last = decode_window(session, window, 7, specs, pairs)
    full = session.run(["logits"], completed({"input_ids": window}, specs))[0]
    np.testing.assert_allclose(last["logits"][0, -1], full[0, -1], rtol=1e-4, atol=1e-4)
    assert last["present.0.key"].shape == (1, HEADS, 12, HEAD_DIM)
    assert cache_pairs(["input_ids", "past_key_values.0.key"], ["logits"]) == {}  # a cache with no output


def test_a_decoder_s_speed_is_timed_decoding_beside_the_batch(decoder, rng, tmp_path):
    report = onnxq.quantize(decoder, token_windows(rng, 48, 16), output=tmp_path / "q.onnx",
                            verify_data=token_windows(rng, 8, 16), config=ANY_SPEED).report
    decode = report.section("decode_speed")
    assert decode is not None and (decode.prefill_tokens, decode.steps, decode.rounds) == (8, 8, 3)
    assert decode.float_tokens_per_s > 0 and decode.quantized_tokens_per_s > 0  # speeds: machine-dependent
    assert format_summary(report).count("decode on CPU (KV cache, batch 1, 8 tokens after a 8-token prefill)") == 1


@pytest.mark.parametrize("weights, vocabulary_bits, bits", [("int4", 4, 4), ("int4", None, 8), ("uint4", None, 8)])
def test_a_tied_table_is_stored_once(rng, tmp_path, weights, vocabulary_bits, bits):
    """The builder's decoder gathers its embeddings from the transposed lm_head weight: one table serves both
    (GatherBlockQuantized over MatMulNBits' own blocks, by Reshape), as the builder writes it; the gathered rows are
    the lm_head's quantized rows, exactly. A decoder's table is in 8-bit blocks by default (symmetric, so that it is
    tied with uint4 weights too), in 4 bits with vocabulary_bits 4; the summary says which."""
    path = tmp_path / "model.onnx"
    onnx.save(genai_decoder(vocab=1024), path)  # a table of 65,536 values: large enough to quantize
    out = tmp_path / "q4.onnx"
    config = onnxq.QuantConfig(weights=onnxq.QScheme(weights, symmetric=weights == "int4"),
                               blocks=onnxq.BlockConfig(vocabulary_bits=vocabulary_bits),
                               verify=onnxq.VerifyConfig(enabled=False))
    report = onnxq.quantize(path, token_windows(rng, 32, 16, vocab=1024), output=out, config=config).report
    quantized = onnx.load(str(out))
    gather = next(n for n in quantized.graph.node if n.op_type == "GatherBlockQuantized")
    lm_head = next(n for n in quantized.graph.node if n.name == "lm_head/MatMul_MatMulNBits")
    assert [a.i for a in (*gather.attribute, *lm_head.attribute) if a.name == "bits"] == [bits, bits]
    reshapes = {n.output[0]: n.input[0] for n in quantized.graph.node if n.op_type == "Reshape"}
    assert reshapes[gather.input[0]] == lm_head.input[1] and reshapes[gather.input[2]] == lm_head.input[2]
    assert sum("lm_head" in i.name and i.data_type == onnx.TensorProto.UINT8 for i in quantized.graph.initializer) == 1
    said = "the token table and lm_head in 8-bit blocks (embed_tokens/Gather, lm_head/MatMul)"
    assert (said in " ".join(report.notes)) == (vocabulary_bits is None)
    # The stored weights: the 1024 × 64 table once, not twice (measured 0.18x in 4 bits, 0.24x in 8).
    assert report.quant_bytes < (0.2 if bits == 4 else 0.26) * report.float_bytes
    # The rows gathered are the lm_head's blocks dequantized: the model's embeddings as one small graph's output.
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    casts = {n.output[0]: n.input[0] for n in quantized.graph.node if n.op_type == "Cast"}
    stored = inits[casts[lm_head.input[2]]]  # float16 holds them exactly (blocks.scale_dtype)
    assert stored.dtype == np.float16
    packed, scales = inits[lm_head.input[1]], stored.astype(np.float32).reshape(1024, -1)
    codes = (np.stack([packed & 15, packed >> 4], axis=-1).reshape(1024, -1).astype(np.float32) - 8 if bits == 4
             else packed.reshape(1024, -1).astype(np.float32) - 128)  # 4 bits: low nibble first
    rows = (codes.reshape(1024, -1, 32) * scales[:, :, None]).reshape(1024, 64)
    embed = helper.make_graph(
        [n for n in quantized.graph.node if n.output[0] in (gather.input[0], gather.input[2], lm_head.input[2])] +
        [gather], "embed",
        [helper.make_tensor_value_info("input_ids", onnx.TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info(gather.output[0], onnx.TensorProto.FLOAT, None)],
        [i for i in quantized.graph.initializer if i.name in {lm_head.input[1], casts[lm_head.input[2]]} or
         i.name.endswith("_shape")])
    session = ort.InferenceSession(helper.make_model(embed, opset_imports=quantized.opset_import,
                                                     ir_version=10).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    ids = np.arange(1024, dtype=np.int64).reshape(4, 256)
    np.testing.assert_allclose(session.run(None, {"input_ids": ids})[0], rows[ids], rtol=1e-6, atol=1e-6)


def test_the_peak_memory_is_compared_with_the_float_file_not_its_untied_copy(rng, tmp_path):
    """The builder's file holds the lm_head weight once and gathers the embeddings from its Transpose, which the run
    folds into a second table in memory: the memory ratio is against the file the user has (the size line's bytes),
    not the larger model in memory (SmolLM2: 540 MB, not 653)."""
    pytest.importorskip("resource", reason="the OS reports no peak RSS (Windows)")
    path = tmp_path / "model.onnx"
    onnx.save(genai_decoder(vocab=1024), path)
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4"), verify=onnxq.VerifyConfig(enabled=False))
    report = onnxq.quantize(path, token_windows(rng, 8, 16, vocab=1024), output=tmp_path / "q.onnx",
                            config=config).report
    assert report.section("memory").float_bytes == report.float_bytes == path.stat().st_size


def test_vocabulary_bits_from_the_command_line_and_its_refusal(rng, tmp_path, capsys):
    """--vocabulary-bits 4 keeps a decoder's table and lm_head in 4 bits (the smallest file); with int8 weights (in
    any mode) the setting means nothing and is refused in one line, nothing written."""
    path = tmp_path / "model.onnx"
    onnx.save(genai_decoder(vocab=1024), path)
    np.savez(tmp_path / "calib.npz", **token_windows(rng, 8, 16, vocab=1024))
    out = tmp_path / "q.onnx"
    code = main([str(path), "--calib", str(tmp_path / "calib.npz"), "--weights", "int4", "--vocabulary-bits", "4",
                 "-o", str(out), "--no-verify"])
    assert code == 0, capsys.readouterr().err
    bits = {n.name: n.attributes["bits"].value for n in ir.load(out).graph if "bits" in n.attributes}
    assert bits and set(bits.values()) == {4} and "lm_head/MatMul_MatMulNBits" in bits
    code = main([str(path), "--vocabulary-bits", "8", "-o", str(tmp_path / "int8.onnx")])
    err = capsys.readouterr().err
    assert code == 2 and "(vocabulary_bits) apply to weight-only models" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "int8.onnx").exists()
    with pytest.raises(onnxq.errors.ConfigError, match="with int8 weights they are 8-bit already"):
        onnxq.QuantConfig(mode="weight-only", blocks=onnxq.BlockConfig(vocabulary_bits=4))


def _seq2seq_decoder(tmp_path) -> tuple[str, list]:
    """The test decoder as a seq2seq model's decoder: it also reads encoder_hidden_states [batch,
    encoder_sequence_length, width] (their mean added before the lm_head) and a cross-attention cache
    past_key_values.0.encoder.key [batch, heads, encoder_sequence_length, head_dim], returned as it came (Optimum's
    merged decoders return it so, or empty, from their cached branch)."""
    model = kv_decoder()
    graph = model.graph
    width = HEADS * HEAD_DIM
    graph.input.extend([
        helper.make_tensor_value_info("encoder_hidden_states", onnx.TensorProto.FLOAT,
                                      ["batch_size", "encoder_sequence_length", width]),
        helper.make_tensor_value_info("past_key_values.0.encoder.key", onnx.TensorProto.FLOAT,
                                      ["batch_size", HEADS, "encoder_sequence_length", HEAD_DIM])])
    graph.output.append(helper.make_tensor_value_info("present.0.encoder.key", onnx.TensorProto.FLOAT, None))
    nodes = list(graph.node)
    lm_head = next(i for i, n in enumerate(nodes) if n.name == "lm_head")
    nodes[lm_head].input[0] = "hf_encoded"
    nodes[lm_head:lm_head] = [
        helper.make_node("ReduceMean", ["encoder_hidden_states", "axis1"], ["encoded"], keepdims=1, name="enc_mean"),
        helper.make_node("Add", ["hf", "encoded"], ["hf_encoded"], name="enc_add"),
        helper.make_node("Identity", ["past_key_values.0.encoder.key"], ["present.0.encoder.key"], name="cross")]
    del graph.node[:]
    graph.node.extend(nodes)
    path = tmp_path / "seq2seq_decoder.onnx"
    onnx.save(model, path)
    return str(path), input_specs(load_model(path))


def test_a_seq2seq_decoder_keeps_its_encoder_inputs_and_cross_attention_cache_through_decoding(rng, tmp_path):
    """A cross-attention cache is as long as the encoder's sequence, not a past: it is not made empty; decoding
    carries the encoder's inputs through every step (they were missing from the first: exit 3)."""
    path, specs = _seq2seq_decoder(tmp_path)
    window = token_windows(rng, 1, 12)["input_ids"]
    encoder = {"encoder_hidden_states": rng.normal(0, 1, (1, 5, HEADS * HEAD_DIM)).astype(np.float32),
               "past_key_values.0.encoder.key": rng.normal(0, 1, (1, HEADS, 5, HEAD_DIM)).astype(np.float32)}
    made = completed({"input_ids": window, "encoder_hidden_states": encoder["encoder_hidden_states"]}, specs)
    assert "past_key_values.0.encoder.key" not in made and made["past_key_values.0.key"].shape[2] == 0
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    pairs = cache_pairs([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
    _, last = decode_window(session, window, 7, specs, pairs, encoder)
    full = session.run(["logits"], completed({"input_ids": window, **encoder}, specs))[0]
    np.testing.assert_allclose(last["logits"][0, -1], full[0, -1], rtol=1e-4, atol=1e-4)
    model = load_model(path)
    timed = decode_speed((model, model), {"input_ids": window, **encoder}, specs, steps=4, rounds=1)
    assert timed is not None and timed.steps == 4
