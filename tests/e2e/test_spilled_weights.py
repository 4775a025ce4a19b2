"""Float weights only the process holds (SmoothQuant's scaled weights, a transpose folded at preparation, a model
given in memory) go to a temporary file and come back memory-mapped (io.spill): the quantized model is the same
bit for bit, the weights are shared and written once, and the file is gone when the run ends, the returned model
holding its own copies."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from decoder_model import genai_decoder, token_windows

import onnxq
from onnxq.io import spill as spill_module
from onnxq.io.memory import raw_bytes
from onnxq.io.spill import SpillFile

ANY_SPEED = onnxq.QuantConfig(verify=onnxq.VerifyConfig(never_slower=False))
RANKED = onnxq.QuantConfig(verify=onnxq.VerifyConfig(never_slower=False, sensitivity="always"))


def _spill_everything(monkeypatch) -> list[tuple[int, object]]:
    """Every float initializer spilled, however small (the defaults spill from 64 MB); the run's spill files
    recorded as (bytes spilled, folder)."""
    monkeypatch.setattr(spill_module, "SPILL_MIN_BYTES", 0)
    monkeypatch.setattr(spill_module, "SPILL_TENSOR_MIN_BYTES", 0)
    seen = []
    spill, close = SpillFile.spill, SpillFile.close

    def recording_spill(self, models):
        written = spill(self, models)
        seen.append((written, self._folder))
        return written

    def recording_close(self, keep):
        seen.append((0, self._folder))
        close(self, keep)

    monkeypatch.setattr(SpillFile, "spill", recording_spill)
    monkeypatch.setattr(SpillFile, "close", recording_close)
    return seen


def _quantize(path, out):
    return onnxq.quantize(path, token_windows(np.random.default_rng(1), 32, 16), output=out,
                          verify_data=token_windows(np.random.default_rng(2), 8, 16), config=ANY_SPEED)


def _initializers(path) -> dict[str, bytes]:
    return {t.name: t.SerializeToString() for t in onnx.load(str(path)).graph.initializer}


def test_spilled_weights_give_the_same_model_and_leave_no_file(tmp_path, monkeypatch):
    """The genai decoder under its language-model defaults (SmoothQuant auto scales every projection's weight;
    the tied table's transpose is folded): spilled or not, the same file and the same verification."""
    path = tmp_path / "model.onnx"
    onnx.save(genai_decoder(vocab=1024), path)
    kept = _quantize(path, tmp_path / "kept.onnx")
    with monkeypatch.context() as patch:
        seen = _spill_everything(patch)
        spilled = _quantize(path, tmp_path / "spilled.onnx")
    assert seen[0][0] > 100_000  # the smoothed projections and the folded table: 1024 x 64 float32 alone 262 kB
    assert _initializers(tmp_path / "spilled.onnx") == _initializers(tmp_path / "kept.onnx")
    assert spilled.report.verification.outputs[0].metrics == kept.report.verification.outputs[0].metrics
    folder = seen[-1][1]
    assert folder is not None and not folder.exists()
    for value in spilled.model.graph.initializers.values():  # the returned model reads no deleted file
        assert not isinstance(value.const_value, ir.ExternalTensor) or value.const_value.base_dir != str(folder)
        value.const_value.numpy()


def _two_models_sharing(rng) -> tuple[ir.Model, ir.Model, np.ndarray]:
    """A 1 MiB float weight shared by two clones, a small bias, and an int64 table."""
    weight = rng.standard_normal((512, 512)).astype(np.float32)
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, 512]))
    w = ir.Value(name="w", const_value=ir.Tensor(weight, name="w"))
    b = ir.Value(name="b", const_value=ir.Tensor(np.ones(512, np.float32), name="b"))
    ids = ir.Value(name="ids", const_value=ir.Tensor(np.arange(300_000, dtype=np.int64), name="ids"))
    node = ir.node("Gemm", [x, w, b], num_outputs=1)
    graph = ir.Graph([x], node.outputs, nodes=[node], initializers=[w, b, ids], opset_imports={"": 17})
    model = ir.Model(graph, ir_version=9)
    return model, model.clone(), weight


def test_a_shared_weight_is_written_once_and_small_models_stay_in_memory(rng, monkeypatch):
    model, twin, weight = _two_models_sharing(rng)
    spill = SpillFile()
    assert spill.spill([model, twin]) == 0  # 1 MiB in all: under SPILL_MIN_BYTES, nothing written
    assert not isinstance(model.graph.initializers["w"].const_value, ir.ExternalTensor)
    monkeypatch.setattr(spill_module, "SPILL_MIN_BYTES", 1 << 20)
    assert spill.spill([model, twin]) == weight.nbytes  # once for both, the bias (2 kB) and int64 ids left
    spilled = model.graph.initializers["w"].const_value
    assert isinstance(spilled, ir.ExternalTensor) and twin.graph.initializers["w"].const_value is spilled
    assert not isinstance(model.graph.initializers["b"].const_value, ir.ExternalTensor)
    assert not isinstance(model.graph.initializers["ids"].const_value, ir.ExternalTensor)
    np.testing.assert_array_equal(spilled.numpy(), weight)
    spill.page_out()
    np.testing.assert_array_equal(spilled.numpy(), weight)  # paged out, read back from the file
    folder = spilled.base_dir
    spill.close(keep=twin)
    kept = twin.graph.initializers["w"].const_value
    assert not isinstance(kept, ir.ExternalTensor) and not Path(folder).exists()
    np.testing.assert_array_equal(kept.numpy(), weight)


def test_after_the_rewrite_the_quantized_weights_are_read_from_the_spill_file(tmp_path, monkeypatch):
    """From verification on, the rewrite's int8 weights — the model's and the run's memo of them, which the
    sensitivity's twins and every probe are built from — are memory maps of the spill file, paged out between
    steps like the float weights (SmolLM2 W8A8: 157 MB no longer held beside every later step's sessions)."""
    from onnxq.io.memory import memory_map
    from onnxq.passes.graph import builder
    from onnxq.steps import run as run_module

    path = tmp_path / "model.onnx"
    onnx.save(genai_decoder(vocab=1024), path)
    seen = []

    def probe(state) -> bool:
        quantized = [v.const_value for v in state.quantized.work.graph.initializers.values()
                     if v.const_value.dtype in (ir.DataType.INT8, ir.DataType.UINT8) and v.const_value.size > 1]
        memo = builder._MEMO.get()
        seen.append((len(quantized), all(isinstance(t, ir.ExternalTensor) for t in quantized),
                     len(memo), all(memory_map(ir.Tensor(q)) is not None for _, q, _ in memo.values())))
        return False

    steps = list(run_module.STEPS)
    steps.insert(next(i for i, s in enumerate(steps) if s.name == "sensitivity") + 1, run_module.Step("probe", probe))
    monkeypatch.setattr(run_module, "STEPS", tuple(steps))
    with monkeypatch.context() as patch:
        _spill_everything(patch)
        spilled = _quantize(path, tmp_path / "spilled.onnx")
    kept = _quantize(path, tmp_path / "kept.onnx")
    count, external, memoized, mapped = seen[0]
    assert count > 10 and external and memoized > 5 and mapped
    assert _initializers(tmp_path / "spilled.onnx") == _initializers(tmp_path / "kept.onnx")
    assert spilled.report.verification.outputs[0].metrics == kept.report.verification.outputs[0].metrics


def test_after_the_rewrite_the_4_bit_blocks_of_the_memo_are_read_from_the_spill_file(tmp_path, monkeypatch):
    """The run's memo of 4-bit blocks (a byte per code: SmolLM2's 150 MB of anonymous memory from the rewrite to the
    run's end) goes to the spill file with the model's weights, and so do the arrays graphs store of them (packed B,
    float16 scales: made once, the quantized model's own, where each graph packed its own, 136 MB of SmolLM2's
    through the sensitivity's runs); the sensitivity's twins and the fallback's probes built from them give the
    same model and figures."""
    from onnxq.io.memory import memory_map
    from onnxq.passes.graph import builder
    from onnxq.steps import run as run_module

    path = tmp_path / "model.onnx"
    onnx.save(genai_decoder(vocab=1024), path)
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4"), verify=RANKED.verify)
    seen = []

    def probe(state) -> bool:
        arrays = [a for _, blocks in builder._BLOCK_MEMO.get().values()
                  for a in (blocks.codes, blocks.scales, blocks.zero_points) if a is not None]
        forms = list(builder._FORM_MEMO.get().values())
        seen.append((len(arrays), sum(memory_map(a) is not None for a in arrays),
                     len(forms), sum(memory_map(a) is not None for a in forms)))
        return False

    steps = list(run_module.STEPS)
    steps.insert(next(i for i, s in enumerate(steps) if s.name == "sensitivity") + 1, run_module.Step("probe", probe))
    monkeypatch.setattr(run_module, "STEPS", tuple(steps))

    def run(out):
        return onnxq.quantize(path, token_windows(np.random.default_rng(1), 32, 16), output=out,
                              verify_data=token_windows(np.random.default_rng(2), 8, 16), config=config)

    with monkeypatch.context() as patch:
        patch.setattr(spill_module, "SPILL_MIN_BYTES", 0)
        patch.setattr(spill_module, "SPILL_QUANTIZED_MIN_BYTES", 0)
        patch.setattr(run_module, "SPILL_MIN_BYTES", 0)
        spilled = run(tmp_path / "spilled.onnx")
    kept = run(tmp_path / "kept.onnx")
    assert seen[0][0] > 10 and seen[0][1] == seen[0][0]  # every array of the memo on file
    assert seen[0][2] > 10 and seen[0][3] == seen[0][2]  # every packed form too
    assert seen[1][1] == seen[1][3] == 0  # the defaults keep a small model's in memory
    assert _initializers(tmp_path / "spilled.onnx") == _initializers(tmp_path / "kept.onnx")
    assert spilled.report.verification.outputs[0].metrics == kept.report.verification.outputs[0].metrics
    assert [n.harm for n in spilled.report.sensitivity.nodes] == [n.harm for n in kept.report.sensitivity.nodes]


def test_weights_on_file_already_are_not_spilled_again(tmp_path, monkeypatch):
    """A graph rebuilt from the remapped memo holds views of the spill file: the next step's spill leaves them."""
    monkeypatch.setattr(spill_module, "SPILL_MIN_BYTES", 0)
    spill = SpillFile()
    quantized = np.arange(1 << 17, dtype=np.int8)
    graph = ir.Graph([], [], nodes=[], initializers=[ir.Value(name="q", const_value=ir.Tensor(quantized))],
                     opset_imports={"": 17})
    model = ir.Model(graph, ir_version=8)
    try:
        twins = spill.spill_quantized(model)
        assert list(twins) == [id(quantized)]
        rebuilt = ir.Tensor(twins[id(quantized)].numpy())  # what a graph built from the memo holds
        model.graph.initializers["q"].const_value = rebuilt
        assert spill.spill_quantized(model) == {}
        assert model.graph.initializers["q"].const_value is rebuilt and np.array_equal(rebuilt.numpy(), quantized)
    finally:
        spill.close(keep=None)


@pytest.mark.parametrize("make", [
    lambda a: ir.Tensor(a),  # written from its own memory, no copy
    lambda a: ir.Tensor(a.astype(np.float16)),
    lambda a: ir.Tensor(a.view(np.dtype(np.float32).newbyteorder("<"))),  # as read from a file ('<' said outright)
    lambda a: ir.Tensor(np.asfortranarray(a)),  # not C-contiguous: tobytes' copy in ONNX's order
    lambda a: ir.Tensor(a.astype(ml_dtypes.bfloat16), dtype=ir.DataType.BFLOAT16),
    # a float16 weight read as float32 (passes.float16.model): evaluated once, written from the result's memory
    lambda a: ir.LazyTensor(lambda: ir.Tensor(a), ir.DataType.FLOAT, ir.Shape(a.shape)),
], ids=["float32", "float16", "little-endian", "fortran", "bfloat16", "lazy"])
def test_a_stored_tensor_reads_back_its_values_whatever_its_layout(rng, monkeypatch, make):
    monkeypatch.setattr(spill_module, "SPILL_TENSOR_MIN_BYTES", 0)
    tensor = make(rng.normal(0, 1, (64, 48)).astype(np.float32))
    copied = isinstance(raw_bytes(tensor), bytes)
    assert copied == (not tensor.numpy().flags.c_contiguous)
    spill = SpillFile()
    try:
        twin = spill.stored(tensor)
        assert isinstance(twin, ir.ExternalTensor) and twin.dtype == tensor.dtype
        np.testing.assert_array_equal(twin.numpy(), tensor.numpy())
        assert twin.tobytes() == tensor.tobytes()
    finally:
        spill.close(keep=None)
