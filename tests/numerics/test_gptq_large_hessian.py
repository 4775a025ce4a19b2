"""numpy 2.4's Cholesky (OpenBLAS 0.3.31) ends the process with SIGSEGV on a matrix of K ≈ 16000 or more under the
default 8 MiB stack — the XᵀX of a 3×3 Conv over 2048 channels (torchvision's FCN-ResNet50 head, K = 18432; a static
run rounds such a Conv to nearest); a 4-bit MatMul's can be as wide (Llama-70B's down
projections: K = 28672). GPTQ factors such a matrix by halves (numerics.gptq._cholesky_in_place). In a child
process: a crash would end the test run. Two minutes and 6.4 GB of peak RSS on 2 cores (AMD EPYC family 25 model 1;
H, its damped copy and the check's second copy are 2.1 GB each): slow step."""

import subprocess
import sys

import pytest

_CHILD = """
import numpy as np
from onnxq.numerics.gptq import _regularized, _upper_cholesky_of_inverse
k = 16384
rng = np.random.default_rng(0)
x = rng.standard_normal((k, 32))
h = x @ x.T
h[np.diag_indices(k)] += 1.0
u = _upper_cholesky_of_inverse(h)
probe = rng.standard_normal(k)
# UᵀU = H⁻¹ of the damped H: H (UᵀU) p = p, checked on one vector (a product of two K×K matrices would take minutes)
print(float(np.max(np.abs(_regularized(h) @ (u.T @ (u @ probe)) - probe))))
"""


@pytest.mark.slow
def test_a_hessian_past_numpys_cholesky_limit_is_factored():
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]  # -11: the segmentation fault
    assert float(done.stdout.strip()) < 1e-6
