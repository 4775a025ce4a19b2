"""A float model over protobuf's 2 GB limit, written layer by layer (never whole in memory): a chain of MatMuls
whose weights sit in one external data file beside it, each at a 4 KiB-aligned offset as onnx writes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


def write_large_model(folder: Path, layers: int = 34, width: int = 4096, seed: int = 0,
                      name: str = "big.onnx") -> Path:
    """layers × width² float32 weights (34 × 4096² = 2.28 GB by default), scaled so activations keep their size."""
    rng = np.random.default_rng(seed)
    data_name = f"{name}.data"
    initializers, nodes, offset, previous = [], [], 0, "x"
    with open(folder / data_name, "wb") as data:
        for i in range(layers):
            weight = (rng.standard_normal((width, width), dtype=np.float32) / np.sqrt(width)).astype(np.float32)
            padding = -offset % 4096
            data.write(b"\0" * padding)
            offset += padding
            data.write(weight.tobytes())
            tensor = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=weight.shape,
                                 data_location=TensorProto.EXTERNAL)
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(weight.nbytes))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset += weight.nbytes
            initializers.append(tensor)
            output = "y" if i == layers - 1 else f"h{i}"
            nodes.append(helper.make_node("MatMul", [previous, f"w{i}"], [output], name=f"mm{i}"))
            previous = output
    graph = helper.make_graph(nodes, "large", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), folder / name)
    return folder / name


def model_bytes(path: Path) -> int:
    return path.stat().st_size + (path.parent / f"{path.name}.data").stat().st_size
