"""How onnxq keeps a big model's weights in memory once: ORT sessions without graph optimizations compute on the
weights' own memory map (no copy), the float pages can be dropped between phases, the exact quantization's
DequantizeLinear nodes run next to their MatMul (not all first), and a weight is quantized once per run however
many graphs are rewritten from it. Linux only (reads /proc/self/status). The end-to-end figure, peak RSS of a
2.28 GB model, is tests/e2e/test_large_model.py (slow)."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from large_model import write_large_model
from onnx import TensorProto, helper, numpy_helper

from onnxq.config import QScheme
from onnxq.io import OrtModel, load_model, page_out
from onnxq.passes.graph.builder import GraphBuilder, shared_weight_quantization

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")

MB = 2**20


def _rss() -> dict[str, int]:
    """Resident anonymous memory and resident file pages, in bytes."""
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("RssAnon", "RssFile")}


def _session(model: OrtModel, optimize: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return model.session(options, ["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    """8 × 2048² float32 weights (128 MiB) in an external data file, loaded lazily."""
    folder = tmp_path_factory.mktemp("mapped")
    model = load_model(write_large_model(folder, layers=8, width=2048))
    x = np.random.default_rng(0).standard_normal((2, 2048)).astype(np.float32)
    expected = x
    for value in model.graph.initializers.values():
        expected = expected @ value.const_value.numpy()
    return model, x, expected


def test_unoptimized_sessions_compute_on_the_memory_map_without_a_copy(mapped):
    model, x, expected = mapped
    weights = 8 * 2048 * 2048 * 4
    shared = OrtModel(model)
    page_out(model)  # the fixture read the weights
    before = _rss()
    first, second = _session(shared, optimize=False), _session(shared, optimize=False)
    for session in (first, second):
        np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-4)
    after = _rss()
    # Two sessions, and the weights are resident once: as file pages, not as ORT's own copies.
    assert after["RssAnon"] - before["RssAnon"] < 0.15 * weights  # measured ~1 MiB
    assert after["RssFile"] - before["RssFile"] > 0.9 * weights  # the map, read once for both
    assert after["RssFile"] - before["RssFile"] < 1.1 * weights
    # With optimizations ORT owns its copy (optimizers may read the data): test_a_deployed_session_holds_one_copy.
    copied = _session(shared, optimize=True)
    np.testing.assert_allclose(copied.run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-4)
    del copied


def test_paged_out_weights_leave_resident_memory_and_come_back_intact(mapped):
    model, x, expected = mapped
    weights = 8 * 2048 * 2048 * 4
    session = _session(OrtModel(model), optimize=False)
    session.run(None, {"x": x})
    resident = _rss()["RssFile"]
    page_out(model)
    assert resident - _rss()["RssFile"] > 0.9 * weights
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-4)  # read back


def test_planning_reads_each_weight_without_keeping_it_resident(mapped):
    """The planners read every weight (its range, its shape); each is paged out once read, so planning a model does
    not hold its float weights (SmolLM2: 557 MB of file pages after planning, then 34 MB)."""
    from onnxq.config import QuantConfig
    from onnxq.handlers import plan_model

    model, _, _ = mapped
    page_out(model)
    before = _rss()["RssFile"]
    plans, _ = plan_model(model.graph, QuantConfig(), "static")
    assert len(plans) == 8
    assert _rss()["RssFile"] - before < 0.1 * 8 * 2048 * 2048 * 4


def _dequantize_chain(layers: int, width: int) -> tuple[onnx.ModelProto, np.ndarray]:
    """x → (DequantizeLinear(int8 w_i) → MatMul) × layers, each weight's DequantizeLinear listed before its MatMul
    and depending only on initializers, as the exact quantization has them."""
    rng = np.random.default_rng(0)
    nodes, initializers, previous = [], [], "x"
    for i in range(layers):
        w = rng.integers(-127, 128, (width, width), dtype=np.int8)
        initializers += [numpy_helper.from_array(w, f"w{i}"),
                         numpy_helper.from_array(np.array(1 / (127 * np.sqrt(width)), np.float32), f"s{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", f"s{i}"], [f"f{i}"]),
                  helper.make_node("MatMul", [previous, f"f{i}"], [f"h{i}"])]
        previous = f"h{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [2, width])], initializers)
    x = rng.standard_normal((2, width)).astype(np.float32)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), x


def test_exact_quantization_dequantizes_each_weight_next_to_its_use():
    layers, width = 16, 2048
    proto, x = _dequantize_chain(layers, width)
    session = _session(OrtModel(ir.serde.deserialize_model(proto)), optimize=False)
    before = _rss()["RssAnon"]
    session.run(None, {"x": x})
    # ORT's default order would run all 16 DequantizeLinear nodes first: 16 float weights (256 MiB) at once.
    all_float = layers * width * width * 4
    assert _rss()["RssAnon"] - before < 0.25 * all_float  # measured: about two float weights


def test_a_weight_is_quantized_once_per_run_for_every_graph_made_from_it(rng):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, [2, 64])
    w = tape.initializer(ir.tensor(rng.normal(0, 1, (64, 64)).astype(np.float32), name="w"))
    y = tape.op("MatMul", [x, w])
    model = ir.Model(ir.Graph([x], [y], nodes=tape.nodes, initializers=tape.initializers,
                              opset_imports={"": 17}), ir_version=8)

    def quantized(clone: ir.Model) -> np.ndarray:
        builder = GraphBuilder(clone.graph, QScheme())
        return builder.quantized_weight(clone.graph.initializers["w"], axis=1).quantized.const_value.numpy()

    with shared_weight_quantization():
        first, second = quantized(model.clone()), quantized(model.clone())
        assert first is second and not first.flags.writeable  # one array, read-only: shared by both graphs
        other_axis = GraphBuilder(model.clone().graph, QScheme()).quantized_weight(
            model.graph.initializers["w"], axis=None).quantized.const_value.numpy()
        assert other_axis is not first  # another layout is another entry
    outside = quantized(model.clone())
    assert outside is not first
    np.testing.assert_array_equal(outside, first)


def test_exact_sessions_give_their_run_memory_back():
    """A session without optimizations (the reference, the exact quantization, the sensitivity) returns its
    arena's buffers when a run ends: a language model's logits are fetched batch after batch (measured: 72 MB kept
    after SmolLM2 runs that kept 221 MB with ORT's default)."""
    from onnxq.io.model_sessions import make_session

    width = 4096
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["n", width])
    w = tape.initializer(ir.tensor(np.eye(width, dtype=np.float32)[:, :1024], name="w"))
    y = tape.op("Relu", [tape.op("MatMul", [tape.op("Tile", [x, tape.initializer(
        ir.tensor(np.array([1, 1], np.int64), name="reps"))]), w])])
    model = ir.Model(ir.Graph([x], [y], nodes=tape.nodes, initializers=tape.initializers,
                              opset_imports={"": 17}), ir_version=8)
    session = make_session(model, optimize=False)
    feed = {"x": np.ones((4096, width), np.float32)}  # 64 MiB in; a 64 MiB Tile and a 16 MiB MatMul inside
    session.run(None, feed)  # the first run sizes ORT's own structures
    before = _rss()["RssAnon"]
    for _ in range(3):
        out = session.run(None, feed)[0]
        assert out.shape == (4096, 1024)
        del out
    # With ORT's default arena the next runs add another 84 MiB of buffers it keeps (measured); here about 4 MiB.
    assert _rss()["RssAnon"] - before < 24 * MB


_DEPLOYED = """
import sys
import numpy as np
from large_model import write_large_model
from onnxq.io import OrtModel, load_model, page_out
from onnxq.io.sessions import session_options

def anon():
    return int(next(l for l in open("/proc/self/status") if l.startswith("RssAnon")).split()[1]) * 1024

model = load_model(write_large_model(__import__("pathlib").Path(sys.argv[1]), layers=8, width=2048))
shared = OrtModel(model)
page_out(model)
before = anon()
session = shared.session(session_options(optimize=True), ["CPUExecutionProvider"])
session.run(None, {"x": np.ones((2, 2048), np.float32)})
print((anon() - before) / (8 * 2048 * 2048 * 4))
"""


def test_a_deployed_session_holds_one_copy_of_the_weights(tmp_path):
    """With optimizations ORT owns its copy of the weights (optimizers may read the data), once: it reads them from a
    data file written for the session, so the kernels' packed layout replaces them (handed over with
    add_external_initializers, both stayed: measured 1.6x the weights, against 1.0x). In a fresh process: a heap
    that earlier tests freed would hand its pages back without a count."""
    import subprocess
    from pathlib import Path

    child = subprocess.run([sys.executable, "-c", _DEPLOYED, str(tmp_path)], capture_output=True, text=True,
                           cwd=Path(__file__).parent, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    assert 0.9 < float(child.stdout.strip().splitlines()[-1]) < 1.25


# A child script's own peak: its high-water mark reset where the measure starts (ru_maxrss would carry the test
# process's across exec, and pass a bound without measuring anything).
_PEAK = """
import sys
def kib(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))
def reset_peak():  # VmHWM from here on
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # a kernel or sandbox without it: nothing can be measured
        sys.exit(77)
    return kib("VmRSS")
"""


def _peak_child(script: str, *args: str) -> float:
    """The last line a _PEAK script prints; the test skips where the child cannot reset its high-water mark."""
    import subprocess
    from pathlib import Path

    child = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                           cwd=Path(__file__).parent, timeout=300)
    if child.returncode == 77:
        pytest.skip("/proc/self/clear_refs cannot be written here: a child's own peak cannot be read")
    assert child.returncode == 0, child.stderr[-2000:]
    return float(child.stdout.strip().splitlines()[-1])

_SAVE = _PEAK + """
import numpy as np
import onnx_ir as ir
from onnxq.io import save_model

tape = ir.tape.Tape()
x = x0 = ir.val("x", ir.DataType.FLOAT, [2, 4096])
for i in range(16):  # 16 int8 weights of 16 MiB: what a quantized model holds
    w = tape.initializer(ir.tensor(np.full((4096, 4096), i, np.int8), name=f"w{i}"))
    x = tape.op("MatMul", [x, tape.op("DequantizeLinear", [w, tape.initializer(
        ir.tensor(np.float32(0.01), name=f"s{i}"))])])
model = ir.Model(ir.Graph([x0], [x], nodes=tape.nodes, initializers=tape.initializers,
                          opset_imports={"": 21}), ir_version=10)
before = reset_peak()
save_model(model, sys.argv[1])
print((kib("VmHWM") - before) * 1024 / (16 * 4096 * 4096))
"""


def test_a_model_is_saved_a_tensor_at_a_time(tmp_path):
    """A model under 2 GB is one .onnx file, written without holding its weights twice more (the ModelProto's copy
    and its serialized bytes: a 545 MB int8 model's save was the run's peak, 1.78 GB); the file is the same model
    to onnx and to ONNX Runtime (io.streamed_proto). In a fresh process: its peak RSS is its own."""
    path = tmp_path / "q.onnx"
    # Not a copy of the weights: each is written from its own buffer (measured 0.0001x the weights, its own
    # high-water mark; whole: 3.1x).
    assert _peak_child(_SAVE, str(path)) < 0.5
    saved = onnx.load(path)
    assert [t.name for t in saved.graph.initializer if t.name.startswith("w")] == [f"w{i}" for i in range(16)]
    assert all(numpy_helper.to_array(t).flat[0] == int(t.name[1:]) for t in saved.graph.initializer
               if t.name.startswith("w"))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {session.get_inputs()[0].name: np.ones((2, 4096), np.float32)})
    assert y.shape == (2, 4096) and np.isfinite(y).all()


_SAVE_SMALL = _PEAK + """
import numpy as np
import onnx_ir as ir
from onnxq.io import save_model

folder = sys.argv[1]
mapped = np.memmap(folder + "/spill.bin", np.int8, "w+", shape=(256, 768, 768))  # as the run's spill file holds them
mapped[:] = np.arange(256, dtype=np.int8)[:, None, None]
mapped.flush()
tape = ir.tape.Tape()
x = x0 = ir.val("x", ir.DataType.FLOAT, [2, 768])
for i in range(256):  # 256 int8 weights of 576 KiB: a language model's projections, each under 1 MB
    w = tape.initializer(ir.tensor(mapped[i], name=f"w{i}"))
    x = tape.op("MatMul", [x, tape.op("DequantizeLinear", [w, tape.initializer(
        ir.tensor(np.float32(0.01), name=f"s{i}"))])])
model = ir.Model(ir.Graph([x0], [x], nodes=tape.nodes, initializers=tape.initializers,
                          opset_imports={"": 21}), ir_version=10)
before = reset_peak()
save_model(model, folder + "/q.onnx")
print((kib("VmHWM") - before) * 1024 / (256 * 768 * 768))
"""


def test_small_memory_mapped_weights_are_written_from_their_buffers(tmp_path):
    """A language model's int8 weights are mostly under 1 MB each: kept in the graph's serialized bytes, they were
    held three times (the memory map's pages, the ModelProto's copy, the bytes: SmolLM2's W8A8 save took 414 MiB over
    its start for 157 MB of weights). Each is now its own fragment written from its buffer and paged out after. In a
    fresh process: its peak RSS is its own."""
    # Measured: 0.004 of the weights; with them in the graph's bytes (before): 3.0.
    assert _peak_child(_SAVE_SMALL, str(tmp_path)) < 0.25
    saved = onnx.load(tmp_path / "q.onnx")
    weights = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer if t.name.startswith("w")}
    assert len(weights) == 256 and all(a.shape == (768, 768) and (a.view(np.uint8) == int(n[1:])).all()
                                       for n, a in weights.items())


_SMOOTH_LARGE = _PEAK + """
import numpy as np
import onnx_ir as ir
import onnxq.passes.smoothing.graph as smooth_module
from onnxq.io.spill import SpillFile
from onnxq.passes.smoothing.graph import SmoothGroup, SmoothPass

folder, piece_bytes = sys.argv[1], int(sys.argv[2])
smooth_module._PIECE_BYTES = piece_bytes
with open(folder + "/w.bin", "wb") as file:  # 128 MiB: a vocabulary's lm_head, written 32 rows at a time
    for _ in range(32):
        np.tile(np.arange(32768, dtype=np.float32) / 32768, (32, 1)).tofile(file)
weight = np.memmap(folder + "/w.bin", np.float32, "r", shape=(1024, 32768))
x = ir.val("x", ir.DataType.FLOAT, [2, 1024])
gamma = ir.Value(name="gamma", const_value=ir.tensor(np.ones(1024, np.float32), name="gamma"))
w = ir.Value(name="w", const_value=ir.tensor(weight, name="w"))
norm = ir.node("LayerNormalization", [x, gamma], {"axis": -1}, name="ln")
matmul = ir.node("MatMul", [norm.outputs[0], w], name="lm_head")
model = ir.Model(ir.Graph([x], matmul.outputs, nodes=[norm, matmul], initializers=[gamma, w],
                          opset_imports={"": 21}), ir_version=10)
s = np.linspace(0.5, 2.0, 1024).astype(np.float32)
spill = SpillFile()
before = reset_peak()
SmoothPass([SmoothGroup(norm.outputs[0], (matmul,), s)], stored_rows=spill.stored_rows)(model)
grown = (kib("VmHWM") - before) * 1024 / weight.nbytes
scaled = matmul.inputs[1].const_value
assert isinstance(scaled, ir.ExternalTensor), type(scaled)
expected = np.arange(32768, dtype=np.float32) / 32768
for rows in (slice(0, 3), slice(500, 503), slice(1021, 1024)):
    np.testing.assert_array_equal(scaled.numpy()[rows], expected[None, :] * s[rows, None])
spill.close(None)
print(grown)
"""


@pytest.mark.parametrize("piece_bytes,bound", [(8 << 20, 0.5), (1 << 30, 2.5)], ids=["pieces", "whole"])
def test_a_large_weight_is_smoothed_a_piece_at_a_time(tmp_path, piece_bytes, bound):
    """SmoothQuant's scaled copy of a memory-mapped weight goes to the run's spill file 8 MiB of rows at a time,
    the source's pages dropped after each: SmolLM2's scaled lm_head (113 MB) had been the smoothing's peak, whole
    beside the 113 MB of its source's pages. In a fresh process, 128 MiB of weight: its peak RSS is its own."""
    grown = _peak_child(_SMOOTH_LARGE, str(tmp_path), str(piece_bytes))
    # Measured: in pieces 0.19 of the weight (a piece, its source's pages, the next piece); whole (one piece, as
    # before) 2.00: the scaled copy and every page of its source.
    assert grown < bound
    if piece_bytes > 1 << 29:
        assert grown > 1.5  # the measure sees the whole copy: the bound above is not vacuous


def _resident_bytes_of(path) -> int:
    """Resident bytes of this process's memory maps of the file at `path` (/proc/self/smaps)."""
    resident, inside, target = 0, False, str(path)
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):
                inside = len(fields) > 5 and fields[5] == target
            elif inside and fields[:1] == ["Rss:"]:
                resident += int(fields[1]) * 1024
    return resident


class _Stopped(Exception):
    pass


def _float16_chain(folder, layers: int, width: int):
    """x float16 [batch, width] → MatMul × layers, the float16 weights in one external data file."""
    rng = np.random.default_rng(3)
    nodes, weights, previous = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float16)
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [previous, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        previous = f"h{i}"
    graph = helper.make_graph(nodes, "chain16", [helper.make_tensor_value_info("x", TensorProto.FLOAT16,
                                                                               ["batch", width])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT16, ["batch", width])],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = folder / "chain16.onnx"
    onnx.save(model, path, save_as_external_data=True, location="chain16.data", size_threshold=0)
    return path, folder / "chain16.data"


def test_a_float16_model_s_file_is_not_held_resident_once_made_float32(tmp_path, monkeypatch):
    """A float16 model is quantized from float32 copies of its weights (passes.float16.model), which the run's
    spill file takes at load: each float16 source is paged out once converted, so the float16 file is not held
    resident beside its float32 form (SmolLM2's float16 export: 316 MiB of file pages after loading, then 45)."""
    import onnxq
    import onnxq.steps.run as steps_run
    from onnxq.io import spill as spill_module

    monkeypatch.setattr(spill_module, "SPILL_MIN_BYTES", 0)  # spilled however small (from 64 MB by default)
    path, data = _float16_chain(tmp_path, layers=4, width=1024)
    seen = {}

    def probe(state) -> bool:
        seen["spilled"] = sum(isinstance(v.const_value, ir.ExternalTensor) and v.const_value.dtype == ir.DataType.FLOAT
                              for v in state.loaded.reference.graph.initializers.values())
        seen["resident"] = _resident_bytes_of(data)
        raise _Stopped

    steps = list(steps_run.STEPS)
    steps.insert(1, steps_run.Step("probe", probe))
    monkeypatch.setattr(steps_run, "STEPS", tuple(steps))
    calibration = {"x": np.random.default_rng(4).standard_normal((4, 1024)).astype(np.float16)}
    with pytest.raises(_Stopped):
        onnxq.quantize(path, calibration)
    assert seen["spilled"] == 4  # the float32 weights were made (and read) at load
    # Measured: 0 bytes; every page of the 8 MiB file (8,388,608 bytes) before the float16 sources were paged out.
    assert seen["resident"] < 0.1 * data.stat().st_size, seen
