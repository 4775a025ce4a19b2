"""A float16 model (a user's float16 export: weights, arithmetic, outputs) is quantized like its float32 original —
the same nodes, the same result within the float16 rounding of its weights — and comes out with its float16 inputs
and outputs, in each form: the default int8, 4-bit weights, and float16 compute for CUDA."""

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto

import onnxq
from onnxq.data.specs import input_specs
from onnxq.io import load_model
from onnxq.io.model_sessions import make_session

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decoder_model import HEAD_DIM, HEADS, kv_decoder, token_windows  # noqa: E402
from float16_models import as_float16  # noqa: E402


@pytest.fixture
def transformer16(samples_dir, tmp_path) -> tuple[Path, dict]:
    path = tmp_path / "tiny16.onnx"
    onnx.save(as_float16(onnx.load(samples_dir / "tiny_transformer.onnx")), path)
    data = dict(np.load(samples_dir / "tiny_transformer_calib.npz"))
    return path, data


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


_QUIET = onnxq.VerifyConfig(sensitivity_samples=0, measure_speed=False)
CONFIGS = {"int8": onnxq.QuantConfig(verify=_QUIET),
           "int4": onnxq.QuantConfig(weights=onnxq.QScheme("int4"), verify=_QUIET),
           "target-cuda": onnxq.QuantConfig(target="cuda", verify=_QUIET)}


@pytest.mark.parametrize("form", CONFIGS)
def test_a_float16_model_is_quantized_as_its_float32_original(samples_dir, transformer16, tmp_path, form):
    path, data = transformer16
    calib, check = {"input_ids": data["input_ids"][:96]}, {"input_ids": data["input_ids"][96:]}
    options = dict(verify_data=check, config=CONFIGS[form])
    half = onnxq.quantize(path, calib, output=tmp_path / "q16.onnx", **options)
    full = onnxq.quantize(samples_dir / "tiny_transformer.onnx", calib, output=tmp_path / "q32.onnx", **options)
    assert half.report.passed
    assert sorted(e.name for e in half.report.quantized) == sorted(e.name for e in full.report.quantized)
    assert any("float16 model: quantized in float32 arithmetic" in n for n in half.report.notes)
    graph = onnx.load(half.output).graph
    assert graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    got = make_session(half.output, optimize=True).run(None, check)[0]
    expected = make_session(full.output, optimize=True).run(None, check)[0]
    # The two differ by the float16 rounding of the weights (and for cuda of the arithmetic): measured 0.99995
    # (int8), 0.99974 (int4), 0.99999 (target-cuda).
    assert got.dtype == np.float16 and _cosine(got, expected) >= 0.9995
    # No Cast reads what it makes (with float16 compute, the Casts at the float16 inputs and outputs had become
    # float16 → float16: ORT kept the output's, a copy each run).
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.value_info, *graph.output)}
    assert not [n.name for n in graph.node if n.op_type == "Cast" and types.get(n.input[0]) == n.attribute[0].i]


def test_a_float16_decoder_quantizes_from_token_windows(rng, tmp_path):
    """A float16 KV-cache decoder whose caches' head size is a name (kv_cache_dim, as the genai builder's float16
    export writes it), concatenated with each step's keys: the head size is read from what they are concatenated
    with, so onnxq makes the empty caches from token windows; the logits are judged by perplexity, and the file keeps
    the float16 I/O a runtime feeds."""
    path = tmp_path / "model.onnx"
    onnx.save(as_float16(kv_decoder(head_dim_name="kv_cache_dim")), path)
    specs = {s.name: s for s in input_specs(load_model(path))}
    assert specs["past_key_values.0.key"].shape[-1] == HEAD_DIM  # the file names it: kv_cache_dim
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(never_slower=False, measure_speed=False))
    result = onnxq.quantize(path, token_windows(rng, 48, 16), output=tmp_path / "q.onnx",
                            verify_data=token_windows(rng, 8, 16), config=config)
    report = result.report
    assert report.passed and report.verification.tasks["logits"].kind == "next-token"
    assert any("inputs empty (past length 0)" in note for note in report.notes)
    logits = next(o for o in report.verification.outputs if o.name == "logits").metrics
    assert abs(logits.perplexity_ratio - 1) < 0.03  # measured 1.0045
    quantized = onnx.load(str(result.output))
    io = {v.name: v.type.tensor_type.elem_type for v in (*quantized.graph.input, *quantized.graph.output)}
    assert io["past_key_values.0.key"] == io["logits"] == io["present.0.value"] == TensorProto.FLOAT16


def test_a_concatenated_cache_s_head_size_is_read_from_what_it_is_concatenated_with():
    specs = {s.name: s for s in input_specs(load_model(kv_decoder(head_dim_name="kv_cache_dim")))}
    assert specs["past_key_values.0.value"].shape == ("batch_size", HEADS, "past_sequence_length", HEAD_DIM)


def test_a_float16_model_s_size_is_its_files_external_data_included(samples_dir, tmp_path):
    """The size line and the memory ratio divide by the files the user has: the float16 weights in external data
    (the prepared model holds them made float32, in memory)."""
    path = tmp_path / "ext16.onnx"
    onnx.save(as_float16(onnx.load(samples_dir / "tiny_transformer.onnx")), path, save_as_external_data=True,
              location="ext16.onnx.data", size_threshold=1024)  # the weights, not the small int64 constants
    data = dict(np.load(samples_dir / "tiny_transformer_calib.npz"))
    report = onnxq.quantize(path, {"input_ids": data["input_ids"][:96]}, output=tmp_path / "q.onnx",
                            verify_data={"input_ids": data["input_ids"][96:]}, config=CONFIGS["int8"]).report
    assert report.float_bytes == path.stat().st_size + (tmp_path / "ext16.onnx.data").stat().st_size


def _with_float32_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each Cast of a float16 initializer to float32 replaced by the float32 initializer itself."""
    halves = {t.name: t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT16}
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    del wide.graph.node[:]
    for node in model.graph.node:
        if node.op_type == "Cast" and node.input[0] in halves:
            array = onnx.numpy_helper.to_array(halves[node.input[0]]).astype(np.float32)
            wide.graph.initializer.append(onnx.numpy_helper.from_array(array, node.output[0]))
        else:
            wide.graph.node.append(node)
    return wide


def test_the_float16_weights_left_float_stay_float16_in_the_file(samples_dir, transformer16, tmp_path):
    """The feed-forward MatMuls excluded: their weights are stored float16 as given, each read through a Cast to
    float32 — the file computes what the float32 weights compute, bit for bit, and is smaller for it."""
    path, data = transformer16
    calib, check = {"input_ids": data["input_ids"][:96]}, {"input_ids": data["input_ids"][96:]}
    config = CONFIGS["int8"].replace(exclude_regex=".*ffn.*")
    result = onnxq.quantize(path, calib, output=tmp_path / "q.onnx", verify_data=check, config=config)
    assert any("float weight(s) left float stored float16" in n for n in result.report.notes)
    saved = onnx.load(str(result.output))
    kinds = {t.name: t.data_type for t in saved.graph.initializer}
    assert kinds["ffn.intermediate.weight_float16"] == kinds["ffn.output.weight_float16"] == TensorProto.FLOAT16
    wide = _with_float32_constants(saved)
    # The two weights' 2 × 16,384 values take 2 bytes less each; the Casts cost a few dozen.
    assert wide.ByteSize() - saved.ByteSize() >= 0.99 * 2 * 16384 * 2
    for optimize in (True, False):
        got = make_session(result.output, optimize=optimize).run(None, check)[0]
        expected = make_session(ir.from_proto(wide), optimize=optimize).run(None, check)[0]
        assert np.array_equal(got, expected)
