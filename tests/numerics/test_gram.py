"""GPTQ's per-batch XᵀX has the same bits whatever the BLAS thread count: the product is made on one BLAS thread
(numerics.gram), as a Ray actor's BLAS runs it, so that shards summed in other processes merge into the single
process's sum bit for bit. OpenBLAS's float32 product on 2 threads differs from its 1-thread product in the last bits
of hundreds of elements (692 of 4096 at 128 rows × 64)."""

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from onnxq.numerics.gram import gram, grouped_gram


@pytest.mark.parametrize("shape", [(128, 64), (1024, 576)])
def test_the_product_on_two_threads_is_the_one_thread_product(rng, shape):
    rows = rng.normal(0, 1, shape).astype(np.float32)
    with threadpool_limits(limits=1, user_api="blas"):
        one_thread = rows.T @ rows
    with threadpool_limits(limits=2, user_api="blas"):
        made = gram(rows)
    assert made.dtype == np.float32 and made.shape == (shape[1],) * 2
    assert np.array_equal(made, one_thread)  # bit for bit, tolerance 0
    np.testing.assert_allclose(made, rows.astype(np.float64).T @ rows.astype(np.float64), rtol=1e-4, atol=1e-2)


def test_the_grouped_product_on_two_threads_is_the_one_thread_product(rng):
    rows = rng.normal(0, 1, (2, 512, 72)).astype(np.float32)  # a grouped Conv's im2col rows, [G, rows, K]
    with threadpool_limits(limits=1, user_api="blas"):
        one_thread = np.matmul(rows.transpose(0, 2, 1), rows)
    with threadpool_limits(limits=2, user_api="blas"):
        made = grouped_gram(rows)
    assert np.array_equal(made, one_thread)


def test_the_thread_count_is_given_back(rng):
    rows = rng.normal(0, 1, (64, 16)).astype(np.float32)
    with threadpool_limits(limits=2, user_api="blas"):
        gram(rows)
        assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} == {2}
