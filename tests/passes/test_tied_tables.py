"""A token table and an lm_head found equal (passes.forms.tied_table.transposes) a piece of rows at a time, as compared
whole, so that one table serves both — transposed (a MatMul's weight) or as it is (a Gemm's with transB)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnxq.passes.forms import tied_table


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("changed", [None, (0, 0), (37, 5), (99, 15)], ids=["equal", "first", "middle", "last"])
@pytest.mark.parametrize("piece_bytes", [1, 7 * 16 * 4, 1 << 20], ids=["a row", "seven rows", "whole"])
def test_a_table_is_the_weight_piece_by_piece_as_whole(monkeypatch, changed, piece_bytes, transposed):
    monkeypatch.setattr(tied_table, "_COMPARED_BYTES", piece_bytes)
    table = np.random.default_rng(0).standard_normal((100, 16)).astype(np.float32)
    weight = table.copy()
    if changed is not None:
        weight[changed] = np.nextafter(weight[changed], np.float32(np.inf))
    if transposed:
        weight = np.ascontiguousarray(weight.T)
    got = tied_table.transposes(ir.Tensor(table), ir.Tensor(weight), transposed)
    assert got == np.array_equal(table, weight.T if transposed else weight) == (changed is None)
