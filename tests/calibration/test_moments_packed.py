"""GPTQ's second moments (calibration.moments.WeightMoments) held as packed upper triangles: each weight gets the
whole XᵀX / n of the float32 sums to the last bit, in one pass or in several when the budget splits the weights."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxq.calibration.moments import WeightMoments
from onnxq.numerics.order_free_sum import BYTES_PER_ELEMENT


def _two_layers() -> ir.Model:
    """x [N, 48] → MatMul w1 [48, 96] and w2 [48, 96] (alike: one matrix) → Relu → MatMul w3 [96, 8]."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w1", (48, 96)), ("w2", (48, 96)), ("w3", (96, 8)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="m1"),
             helper.make_node("MatMul", ["x", "w2"], ["b"], name="m2"),
             helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w3"], ["y"], name="m3")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 48])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def _expected(rows: list[np.ndarray]) -> np.ndarray:
    total = sum(batch.astype(np.float64).T @ batch for batch in rows)
    return total / sum(len(r) for r in rows)


def _whole_matrices(monkeypatch) -> None:
    """WeightMoments holding whole matrices, as it did before packing."""
    from onnxq.calibration import moment_sums, moments as moments_module

    monkeypatch.setattr(moment_sums, "packed_upper", np.copy)
    monkeypatch.setattr(moments_module, "unpacked", np.copy)


@pytest.mark.parametrize("budget", [None, 48 * 49 // 2 * BYTES_PER_ELEMENT], ids=["one pass", "a pass per matrix"])
def test_each_weight_gets_its_whole_matrix_bit_for_bit(budget, monkeypatch):
    model = _two_layers()
    rng = np.random.default_rng(0)
    batches = [{"x": rng.standard_normal((n, 48)).astype(np.float32)} for n in (5, 7, 3)]
    readers = {("w1", False): ["x"], ("w2", False): ["x"], ("w3", False): ["r"]}
    w = {n: v.const_value.numpy() for n, v in model.graph.initializers.items()}
    hidden = [np.maximum(b["x"] @ w["w1"] + b["x"] @ w["w2"], 0) for b in batches]
    expected = {"w1": _expected([b["x"] for b in batches]), "w3": _expected(hidden)}
    expected["w2"] = expected["w1"]

    def asked(moments: WeightMoments) -> list[np.ndarray]:
        return [moments.get(key) for key in (*readers, ("w1", False))]  # over the budget w1's pass runs again

    packed = WeightMoments(model, readers, lambda: batches, full=True, budget=budget)
    got = asked(packed)
    assert (packed.chunks, packed.passes) == ((1, 1) if budget is None else (2, 3))  # w1 and w2 share a matrix
    for matrix, (name, _) in zip(got, (*readers, ("w1", False))):
        assert matrix.flags.writeable and np.array_equal(matrix, matrix.T)
        np.testing.assert_allclose(matrix, expected[name], rtol=1e-5, atol=1e-5)
    _whole_matrices(monkeypatch)
    for matrix, whole in zip(got, asked(WeightMoments(model, readers, lambda: batches, full=True, budget=budget))):
        assert np.array_equal(matrix, whole)


def test_spilled_triangles_are_read_back_memory_mapped_and_unpack_the_same(monkeypatch):
    """The rewrite moves the packed triangles to the run's spill file by its rule for arrays outside a model
    (io.SpillFile.stored_array: 64 kB and more, lowered here to 1 kB for 48-wide ones) — by the rule for weights
    (1 MiB) the 0.66 MB triangles of a 576-wide decoder stayed in memory, 58 MB of SmolLM2's — and each weight's
    matrix is unpacked from the mapped file bit for bit, with no pass over the data again."""
    from onnxq.io import spill as spill_module
    from onnxq.io.memory import memory_map
    from onnxq.io.spill import SpillFile

    monkeypatch.setattr(spill_module, "SPILL_QUANTIZED_MIN_BYTES", 1024)

    model = _two_layers()
    batches = [{"x": np.random.default_rng(0).standard_normal((9, 48)).astype(np.float32)}]
    readers = {("w1", False): ["x"], ("w2", False): ["x"], ("w3", False): ["r"]}
    moments = WeightMoments(model, readers, lambda: batches, full=True)
    before = {key: moments.get(key) for key in readers}
    spill = SpillFile()
    try:
        moments.spill(spill.stored_array)
        assert all(memory_map(held) is not None for held in moments._held.values())
        assert moments._held[("w1", False)] is moments._held[("w2", False)]  # written once
        for key, matrix in before.items():
            assert np.array_equal(moments.get(key), matrix)
        assert moments.passes == 1
    finally:
        spill.close(None)


def _two_convs() -> ir.Model:
    """x [N, 4, 6, 6] → Conv w1 [4, 4, 3, 3] → Relu → Conv w2 [8, 4, 3, 3]: two matrices of K = 36."""
    rng = np.random.default_rng(2)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w1", (4, 4, 3, 3)), ("w2", (8, 4, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def test_a_conv_s_moments_are_summed_in_place_in_float32_at_a_quarter_of_the_bytes():
    """No summary stores a Conv's XᵀX (Conv takes no weight-only blocks): it is summed as float32 in place, so the
    budget counts 4 bytes an element, not an order-free sum's 18 (ResNet-50's calibration: 3.0 GB → 1.0 GB) — two
    matrices that fit it so are made in one pass over the data, not two."""
    model, k = _two_convs(), 36
    rng = np.random.default_rng(0)
    batches = [{"x": rng.standard_normal((n, 4, 6, 6)).astype(np.float32)} for n in (2, 3)]
    readers = {("w1", False): ["x"], ("w2", False): ["r"]}
    budget = 2 * k * (k + 1) // 2 * 4  # both float32 triangles
    moments = WeightMoments(model, readers, lambda: batches, full=True, budget=budget)
    matrices = [moments.get(key) for key in readers]
    assert (moments.chunks, moments.passes) == (1, 1)
    for matrix in matrices:
        assert matrix.dtype == np.float32 and matrix.shape == (k, k) and np.allclose(matrix, matrix.T)
        assert np.all(np.diag(matrix) > 0)
