"""ONNX Runtime's CUDA provider (onnxruntime-gpu): its kernel table predicts placement where no GPU is present."""

from onnxq.targets.ort_kernels import CUDA_KERNELS
from onnxq.targets.providers.registry import ExecutionProvider, register_provider

CUDA = register_provider(ExecutionProvider(
    "CUDAExecutionProvider", aliases=("cuda",), auto=True, install_hint="install onnxruntime-gpu and a CUDA runtime",
    kernels=CUDA_KERNELS, guide="gpus", target_hint="--target cuda plans the forms CUDA runs fast",
    float_product_advice=("ORT has no int8 QDQ MatMul fusion on CUDA: weights are stored int8 (smaller) but compute "
                          "is float; for CUDA speed, weight-only int4 (MatMulNBits) is the path (--target cuda)")))
