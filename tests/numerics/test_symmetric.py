"""Packed upper triangles of symmetric matrices (numerics.symmetric): GPTQ's XᵀX sums held in K(K+1)/2 values,
unpacked bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from onnxq.numerics.symmetric import add_upper, packed_upper, packed_width, unpacked


@pytest.mark.parametrize("shape", [(1, 7), (300, 64), (3, 50, 9)])
def test_sums_of_products_packed_and_unpacked_are_the_whole_sums_bit_for_bit(shape):
    """X.T @ X is exactly symmetric (NumPy's syrk mirrors its triangle), so the packed sum of three batches' products,
    divided by the rows, unpacks to the whole matrices' sum to the last bit; a grouped Conv's [G, K, K] alike."""
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((*shape[:-2], shape[-2] + i, shape[-1])).astype(np.float32) for i in range(3)]
    products = [np.swapaxes(x, -1, -2) @ x for x in batches]
    assert all(np.array_equal(p, np.swapaxes(p, -1, -2)) for p in products)
    whole = products[0].copy()
    packed = packed_upper(products[0])
    for product in products[1:]:
        whole += product
        add_upper(packed, product)
    whole /= 900
    packed /= 900
    k = shape[-1]
    assert packed.shape == (*shape[:-2], k * (k + 1) // 2)
    assert np.array_equal(unpacked(packed), whole)


def test_the_packed_layout_is_row_after_row_of_the_upper_triangle():
    matrix = np.arange(16, dtype=np.float32).reshape(4, 4)
    assert packed_upper(matrix).tolist() == [0, 1, 2, 3, 5, 6, 7, 10, 11, 15]
    assert packed_width(10) == 4


def test_a_length_that_is_no_triangle_is_refused():
    with pytest.raises(ValueError, match="not a packed triangle"):
        packed_width(11)
