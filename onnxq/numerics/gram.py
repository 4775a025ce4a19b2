"""XᵀX of float32 rows with the same bits whatever the BLAS thread count: GPTQ's per-batch products, which shards
summed in other processes (a Ray actor's BLAS runs one thread) must reproduce bit for bit.

A multi-threaded BLAS cuts a product into tiles whose sums it orders by the thread count: OpenBLAS's float32 XᵀX of
128 rows × 64 on 2 threads differs from its 1-thread product in 692 of 4096 elements (last bits). The product runs
on one BLAS thread, pinned around the call (threadpoolctl, which knows OpenBLAS, MKL and BLIS), so that every
process, whatever its threads, makes the 1-thread product of its CPU's kernels.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
from threadpoolctl import ThreadpoolController

__all__ = ["gram", "grouped_gram"]

# threadpoolctl sets the BLAS's global thread count: one product pins it at a time.
_PINNING = threading.Lock()


@functools.lru_cache(maxsize=1)
def _controller() -> ThreadpoolController:
    """The BLAS libraries loaded (numpy's among them), found once: a scan of the process's libraries costs ~0.5 ms."""
    return ThreadpoolController()


def _one_thread(product):
    with _PINNING, _controller().limit(limits=1, user_api="blas"):
        return product()


def gram(rows: np.ndarray) -> np.ndarray:
    """rows [N, K] (float32) → rowsᵀ rows [K, K], float32, on one BLAS thread."""
    return _one_thread(lambda: rows.T @ rows)


def grouped_gram(rows: np.ndarray) -> np.ndarray:
    """rows [G, N, K] (float32) → each group's rowsᵀ rows [G, K, K], float32, on one BLAS thread."""
    return _one_thread(lambda: np.matmul(rows.transpose(0, 2, 1), rows))
