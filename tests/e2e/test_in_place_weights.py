"""A large .onnx that keeps its weights inside (no external data: Optimum's exports under 2 GB) is read with its
weights left in the file, memory-mapped at their own offsets (io.in_place): the same arrays and the same quantized
file as onnx.load gives, a fraction of the memory, and onnx.load's own errors for what the scan does not handle."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from conftest import REPO
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.errors import ModelLoadError
from onnxq.io import in_place, load_model

MB = 2**20
VOCAB, WIDTH, HIDDEN = 1100, 256, 1024


def _inline_model(folder: Path, seed: int = 0) -> Path:
    """An embedding, two MatMuls and a bias, every weight inside the .onnx: three tensors of at least 1 MiB, two small."""
    rng = np.random.default_rng(seed)
    weights = {"table": rng.standard_normal((VOCAB, WIDTH)).astype(np.float32),
               "up": (rng.standard_normal((WIDTH, HIDDEN)) / 16).astype(np.float32),
               "down": (rng.standard_normal((HIDDEN, WIDTH)) / 32).astype(np.float32),
               "bias": rng.standard_normal(WIDTH).astype(np.float32),
               "scale": np.full(WIDTH, 0.5, np.float32)}
    nodes = [helper.make_node("Gather", ["table", "ids"], ["x"], name="embed"),
             helper.make_node("MatMul", ["x", "up"], ["h"], name="up_proj"),
             helper.make_node("Relu", ["h"], ["r"], name="act"),
             helper.make_node("MatMul", ["r", "down"], ["d"], name="down_proj"),
             helper.make_node("Add", ["d", "bias"], ["b"], name="add_bias"),
             helper.make_node("Mul", ["b", "scale"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "inline", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16, WIDTH])],
                              [numpy_helper.from_array(a, n) for n, a in weights.items()])
    path = folder / "inline.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.fixture
def every_file_in_place(monkeypatch):
    monkeypatch.setattr(in_place, "IN_PLACE_FROM_BYTES", 0)


@pytest.fixture
def inline(tmp_path) -> Path:
    return _inline_model(tmp_path)


def test_a_large_file_s_weights_are_read_in_place_bit_for_bit(inline, every_file_in_place):
    model = load_model(inline)
    expected = {t.name: numpy_helper.to_array(t) for t in onnx.load(inline).graph.initializer}
    kept = {}
    for name, value in model.graph.initializers.items():
        tensor = value.const_value
        assert np.array_equal(tensor.numpy(), expected[name]) and tensor.numpy().dtype == expected[name].dtype
        kept[name] = isinstance(tensor, ir.ExternalTensor)
        if kept[name]:  # the .onnx itself, at the payload's offset
            assert Path(tensor.path) == inline and tensor.offset > 0
    assert kept == {"table": True, "up": True, "down": True, "bias": False, "scale": False}


def test_a_quantization_from_the_weights_in_place_is_the_one_from_the_file_loaded(inline, tmp_path, monkeypatch):
    ids = np.random.default_rng(1).integers(0, VOCAB, (32, 16))
    runs = {}
    for label, threshold in (("loaded", in_place.IN_PLACE_FROM_BYTES), ("in place", 0)):
        monkeypatch.setattr(in_place, "IN_PLACE_FROM_BYTES", threshold)
        output = tmp_path / f"{label.replace(' ', '_')}.onnx"
        result = onnxq.quantize(inline, {"ids": ids[:24]}, output=output, verify_data={"ids": ids[24:]})
        runs[label] = (output.read_bytes(), result.report)
    assert runs["in place"][0] == runs["loaded"][0]
    # The file is the input model once, not also its own data file.
    for _, report in runs.values():
        assert report.float_bytes == inline.stat().st_size
        assert report.passed


def test_what_the_scan_does_not_handle_is_read_by_onnx_load(inline, tmp_path, every_file_in_place):
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(inline.read_bytes()[: inline.stat().st_size // 2])
    assert in_place.read_in_place(truncated) is None
    with pytest.raises(ModelLoadError, match="is not a readable ONNX model"):
        load_model(truncated)
    # A payload shorter than its shape: onnx.load's tensor check names it.
    proto = onnx.load(inline)
    table = next(t for t in proto.graph.initializer if t.name == "table")
    table.raw_data = table.raw_data[:-4]
    short = tmp_path / "short.onnx"
    onnx.save(proto, short)
    assert in_place.read_in_place(short) is None
    with pytest.raises(ModelLoadError, match="'table'"):
        load_model(short)
    # A symlink's data would resolve outside the folder it is read from.
    other = tmp_path / "elsewhere"
    other.mkdir()
    link = other / "link.onnx"
    link.symlink_to(inline)
    assert in_place.read_in_place(link) is None
    assert isinstance(load_model(link).graph.initializers["up"].const_value, ir.serde.TensorProtoTensor)
    # A hard link (a package cache's, cp -al's): onnx_ir reads no external data from it, so it is read whole — it
    # was refused in one line, "has 2 hard links", before.
    hard = other / "hard.onnx"
    os.link(inline, hard)
    assert in_place.read_in_place(hard) is None
    weights = load_model(hard).graph.initializers
    assert isinstance(weights["up"].const_value, ir.serde.TensorProtoTensor)
    assert np.array_equal(weights["up"].const_value.numpy(), numpy_helper.to_array(
        next(t for t in onnx.load(inline).graph.initializer if t.name == "up")))


# The child's own high-water mark (VmHWM is the process's; ru_maxrss would carry the parent's across exec).
_LOAD = textwrap.dedent("""
    import sys
    from onnxq.io import in_place, load_model
    def kib(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))
    in_place.IN_PLACE_FROM_BYTES = int(sys.argv[2])
    before = kib("VmRSS")
    model = load_model(sys.argv[1])
    print((kib("VmHWM") - before) * 1024)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_loading_a_large_file_leaves_its_weights_out_of_memory(tmp_path):
    """A 96 MB .onnx: onnx.load holds it twice (its bytes and the parsed copy: 201 MB measured); in place, the graph
    only."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((2048, 2048)).astype(np.float32), f"w{i}")
               for i in range(6)]
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"], [f"h{i + 1}"]) for i in range(6)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
                              [helper.make_tensor_value_info("h6", TensorProto.FLOAT, [1, 2048])], weights)
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    del weights, graph
    size = path.stat().st_size
    grown = {}
    for label, threshold in (("loaded", 2**62), ("in place", 0)):
        done = subprocess.run([sys.executable, "-c", _LOAD, str(path), str(threshold)], cwd=REPO,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, done.stderr
        grown[label] = int(done.stdout.strip().splitlines()[-1])
    assert grown["loaded"] >= size, grown  # the test can fail: the usual read holds the weights
    assert grown["in place"] < 0.25 * size, grown  # 12 MB measured: the parse and lazy imports
