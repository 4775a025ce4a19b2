"""Shared fixtures: the repo's sample models and, when present, ../shared/models (real models)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "models"
SHARED_MODELS = REPO.parent / "shared" / "models"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    if not (SAMPLES / "mlp.onnx").is_file():
        pytest.fail("models/ samples missing: run python models/build_samples.py")
    return SAMPLES


@pytest.fixture
def shared_models() -> Path:
    if not SHARED_MODELS.is_dir():
        pytest.skip(f"real models not available at {SHARED_MODELS} (only in the onnxq workplace)")
    return SHARED_MODELS


def to_model(tape: ir.tape.Tape, inputs: list[ir.Value], outputs: list[ir.Value], opset: int = 17) -> ir.Model:
    """An ir.Model from a tape (ONNX's IR version 8: what ORT 1.31 and older accept)."""
    graph = ir.Graph(inputs, outputs, nodes=tape.nodes, initializers=tape.initializers, opset_imports={"": opset})
    return ir.Model(graph, ir_version=8)


def weight(tape: ir.tape.Tape, rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> ir.Value:
    return tape.initializer(ir.tensor(rng.normal(0, 1, shape).astype(np.float32), name=name))


def tied_classes(rng: np.random.Generator, features: int = 32, classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """A classifier head's (weight, bias) whose classes 0 and 1 share a weight column up to 1e-4 and lead every other
    class by a margin: int8 keeps cosine ≈ 1 while flipping its answers between the two."""
    w = rng.normal(0, 1, (features, classes)).astype(np.float32)
    w[:, 1] = w[:, 0] + rng.normal(0, 1e-4, features).astype(np.float32)
    bias = np.full(classes, -30.0, np.float32)
    bias[:2] = 0.0
    return w, bias


def initializer_bytes(model: ir.Model) -> dict[str, bytes]:
    """Each initializer's bytes by name: two models quantized alike have equal ones."""
    return {name: value.const_value.tobytes() for name, value in model.graph.initializers.items()}


def node_named(model: ir.Model, name: str) -> ir.Node:
    return next(n for n in model.graph if n.name == name)


def matmul_integer_session(b: np.ndarray):
    """An ORT session of one MatMulInteger: uint8 activations a [M, K] (zero point 0) × the constant int8 b."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    k, n = b.shape
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, ["M", k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["M", n])],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(0, np.uint8), "azp"),
         numpy_helper.from_array(np.array(0, np.int8), "bzp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def pytest_collection_modifyitems(config, items):
    """Tests marked cuda need onnxruntime's CUDAExecutionProvider; without it they skip with the reason."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        return
    skip = pytest.mark.skip(reason="CUDAExecutionProvider not available (needs onnxruntime-gpu and a GPU)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


# Spawns the command from a bare Python: a child's ru_maxrss starts from its parent's RSS at fork (vfork shares the
# parent's memory until exec), so measured straight from pytest it could never read below pytest's own size.
_PEAK_WRAPPER = """
import resource, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
out, err = child.communicate()
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # its one child, waited for
sys.stdout.write(out.decode(errors="replace"))
sys.stderr.write(err.decode(errors="replace"))
print()
print(child.returncode, peak)
"""


def child_peak_rss(argv: list[str]) -> tuple[int, int, str, str]:
    """(exit code, peak RSS in bytes, stdout, stderr) of a command run in the repository, its peak its own."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _PEAK_WRAPPER, *argv], cwd=REPO, capture_output=True, text=True)
    *out, last = run.stdout.strip().splitlines()
    code, peak = map(int, last.split())
    return code, peak, "\n".join(out), run.stderr
