"""OpenVINO through ONNX Runtime's OpenVINO provider (pip's onnxruntime-openvino, in place of onnxruntime).

OpenVINO takes the nodes it supports and compiles each connected group into a subgraph of its own, which ORT's
profiler shows as one node ("OpenVINO-EP-subgraph_1"): placement is read from ORT's graph assignment instead, node
by node. Inside a subgraph OpenVINO turns each QuantizeLinear / DequantizeLinear pair into a FakeQuantize and its
low-precision transformations run the product between them in int8: a quantized node counts as on OpenVINO's
integer path when it and the DequantizeLinear nodes feeding it were all assigned to OpenVINO. Not in "auto": a
user names it (--providers openvino) or a target deployed on it (openvino-cpu) asks for it.

Deployed sessions on it skip ORT's own graph optimizations (OpenVINO optimizes what it takes): with them, MiniLM's
int8 file ran 352 ms a batch of 32 on OpenVINO, without them 237 ms (onnxruntime-openvino 1.24.1, 2 cores of an
AMD EPYC with AVX-512 VNNI; docs/guides/openvino.md).
"""

from onnxq.targets.providers.registry import ExecutionProvider, register_provider

OPENVINO = register_provider(ExecutionProvider(
    "OpenVINOExecutionProvider", aliases=("openvino",), options={"device_type": "CPU"},
    install_hint="pip install onnxruntime-openvino in place of onnxruntime (docs/guides/openvino.md)",
    placement="assigned", ort_optimizations=False, guide="openvino", target_hint="--target openvino-cpu plans the forms OpenVINO runs"))
