"""A detector's raw head as YOLO exports hand it out (no NMS): image [batch, 3, 32, 32] → Convs → per anchor (a
32 × 32 grid, stride 1) a box, centre and size in pixels, beside the Sigmoid probabilities of 3 classes, the
Concat of the two: [batch, 7, 1024]. Bright squares in the images are what it detects; weights fixed (seeded)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

SIZE, CLASSES = 32, 3


def head(class_shift: float = 0.0):
    """class_shift: added to the class Conv's bias (a copy whose class probabilities moved, its boxes not)."""
    rng = np.random.default_rng(11)
    features = np.abs(rng.normal(0, 0.3, (8, 3, 3, 3))).astype(np.float32)
    classes = np.zeros((CLASSES, 8, 1, 1), np.float32)
    for c in range(CLASSES):
        classes[c, c * 2:c * 2 + 3] = 0.8
    regress = rng.normal(0, 0.05, (4, 8, 1, 1)).astype(np.float32)
    ys, xs = np.meshgrid(np.arange(SIZE, dtype=np.float32), np.arange(SIZE, dtype=np.float32), indexing="ij")
    anchors = np.stack([xs + 0.5, ys + 0.5, np.full_like(xs, 6.0), np.full_like(xs, 6.0)]).reshape(1, 4, -1)
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (features, "wf"), (classes, "wc"), (np.full(CLASSES, -4.0 + class_shift, np.float32), "bc"),
        (regress, "wr"), (anchors, "anchors"), (np.array([0, 4, -1], np.int64), "flat4"),
        (np.array([0, CLASSES, -1], np.int64), "flat_classes"))]
    nodes = [
        helper.make_node("Conv", ["image", "wf"], ["f"], name="features", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["f"], ["fr"]),
        helper.make_node("Conv", ["fr", "wr"], ["delta"], name="regress"),
        helper.make_node("Reshape", ["delta", "flat4"], ["delta_flat"]),
        helper.make_node("Add", ["anchors", "delta_flat"], ["boxes"]),
        helper.make_node("Conv", ["fr", "wc", "bc"], ["logits"], name="classes"),
        helper.make_node("Reshape", ["logits", "flat_classes"], ["logits_flat"]),
        helper.make_node("Sigmoid", ["logits_flat"], ["probabilities"]),
        helper.make_node("Concat", ["boxes", "probabilities"], ["output0"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "head", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 4 + CLASSES, SIZE * SIZE])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def images(rng: np.random.Generator, count: int) -> np.ndarray:
    """Dim noise with 1–3 bright squares each."""
    out = rng.uniform(0, 0.1, (count, 3, SIZE, SIZE)).astype(np.float32)
    for image in out:
        for _ in range(rng.integers(1, 4)):
            y, x = rng.integers(2, SIZE - 8, 2)
            image[rng.integers(0, 3), y:y + 6, x:x + 6] += rng.uniform(0.8, 1.2)
    return out
