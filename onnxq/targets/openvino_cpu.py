"""Intel CPUs through OpenVINO (ONNX Runtime's OpenVINO provider, device CPU): the QDQ forms OpenVINO's int8 path
takes.

OpenVINO reads each QuantizeLinear / DequantizeLinear pair as a FakeQuantize; its low-precision transformations
run the product between them in int8 where the pair's form is one its CPU plugin supports. NNCF, OpenVINO's own
quantizer, writes for the CPU plugin (nncf/common/hardware/configs/cpu.json): activations 8-bit per tensor,
symmetric or not; weights 8-bit, symmetric ([-128, 127], zero point 0), per output channel or per tensor, for
Convolution and MatMul. Its presets differ only in the activations (PERFORMANCE: symmetric; MIXED, its choice for
transformers: asymmetric). So the target takes symmetric weights only and either activation form, uint8
asymmetric first (onnxq's default, which the CPU provider's U8S8 kernels take too); docs/guides/openvino.md has
both measured. Off a machine with onnxruntime-openvino, the file is checked by its exact quantization: what
OpenVINO's int8 path computes, less the rounding of its float rescale.
"""

from onnxq.targets.registry import Target, register_target

OPENVINO_CPU = register_target(Target(
    "openvino-cpu", "Intel CPUs through OpenVINO (onnxruntime-openvino): int8 QDQ, symmetric weights per channel",
    checked_by="provider", provider="OpenVINOExecutionProvider", symmetric_weights=True,
    activation_types=(("uint8", False), ("int8", True)),
    exact_check=("exact quantization on this CPU (OpenVINO absent here): the same file, no optimizations — the "
                 "integer products OpenVINO's int8 path computes, less the rounding of its float rescale")))
