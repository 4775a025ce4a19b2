"""NVIDIA GPUs through ONNX Runtime's CUDA execution provider: the forms CUDA runs fast or small, nothing else.

What CUDA EP runs (targets.ort_kernels; measured on an H100 with onnxruntime-gpu 1.31.1, MiniLM at
batch 32 × 128, float = 1): int8 QDQ runs as DequantizeLinear + float MatMul (0.76×: no fused int8 product on
CUDA), and the integer operators (MatMulIntegerToFloat, DynamicQuantizeLinear, QGemm, QLinear*) have no CUDA
kernel and fall back to the CPU with copies (dynamic 0.028×, per-token 0.028×, qoperator 0.034×). So int8
activations are not planned for it. Its one low-bit product kernel is MatMulNBits (4 and 8 bits; weight-only,
0.92× with float32 activations), and CUDA's float16 products run on tensor cores: models for it are weight-only
blocks with float16 compute (passes.float16.compute), as onnxruntime-genai's builder writes for CUDA.

Off a GPU the file is checked by its exact arithmetic on this CPU (passes.float16.emulation: every float16 value
rounded where it is made, float32 accumulation, as CUDA computes) and its placement on CUDA is predicted from the
kernel registrations.
"""

from onnxq.targets.registry import Target, register_target

CUDA_MEASURED = ("int8 activations run on CUDA EP as DequantizeLinear + float MatMul (0.76x float, H100, MiniLM "
                 "batch 32) or fall back to the CPU with copies (dynamic, per-token, qoperator: 0.03x)")

CUDA = register_target(Target(
    "cuda", "NVIDIA GPUs (CUDA EP): weight-only MatMulNBits blocks, float16 compute", checked_by="provider",
    provider="CUDAExecutionProvider", no_int8_activations=CUDA_MEASURED, compute="float16",
    exact_check=("exact arithmetic on this CPU (its provider absent here): the same file, no optimizations, every "
                 "float16 value rounded where it is made, float32 accumulation, as the GPU computes")))
