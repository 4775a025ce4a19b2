"""A token table and an lm_head found equal (passes.insert_blockwise._transposes) a piece of rows at a time, as
compared whole, so that one 4-bit table serves both."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnxq.passes import insert_blockwise


@pytest.mark.parametrize("changed", [None, (0, 0), (37, 5), (99, 15)], ids=["equal", "first", "middle", "last"])
@pytest.mark.parametrize("piece_bytes", [1, 7 * 16 * 4, 1 << 20], ids=["a row", "seven rows", "whole"])
def test_a_table_is_the_transposed_weight_piece_by_piece_as_whole(monkeypatch, changed, piece_bytes):
    monkeypatch.setattr(insert_blockwise, "_COMPARED_BYTES", piece_bytes)
    table = np.random.default_rng(0).standard_normal((100, 16)).astype(np.float32)
    weight = np.ascontiguousarray(table.T)
    if changed is not None:
        weight[changed[1], changed[0]] = np.nextafter(weight[changed[1], changed[0]], np.float32(np.inf))
    got = insert_blockwise._transposes(ir.Tensor(table), ir.Tensor(weight))
    assert got == np.array_equal(table, weight.T) == (changed is None)
