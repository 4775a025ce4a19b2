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


def end_to_end(class_shift: float = 0.0, rows: int = 50):
    """The head with YOLOv10's end-to-end output: the `rows` anchors of the best class scores, each (x1, y1, x2, y2,
    score, class) — [batch, rows, 6], no NMS."""
    model = head(class_shift)
    graph = model.graph
    graph.output.pop()
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (np.array([rows], np.int64), "k"), (np.array([2], np.int64), "axis2"), (np.array([1, 1, 4], np.int64),
                                                                                "repeat4"),
        (np.array([-0.5, -0.5, 0.5, 0.5], np.float32).reshape(1, 1, 4), "half"),
        (np.array([0, 1, 0, 1], np.int64), "centre_index"), (np.array([2, 3, 2, 3], np.int64), "size_index"))]
    graph.initializer.extend(inits)
    graph.node.extend([
        helper.make_node("Transpose", ["boxes"], ["boxes_t"], perm=[0, 2, 1]),  # [batch, anchors, 4]: cx cy w h
        helper.make_node("Gather", ["boxes_t", "centre_index"], ["centres"], axis=2),
        helper.make_node("Gather", ["boxes_t", "size_index"], ["sizes"], axis=2),
        helper.make_node("Mul", ["sizes", "half"], ["offsets"]),
        helper.make_node("Add", ["centres", "offsets"], ["corner_boxes"]),
        helper.make_node("ReduceMax", ["probabilities"], ["best"], axes=[1], keepdims=0),
        helper.make_node("ArgMax", ["probabilities"], ["label"], axis=1, keepdims=0),
        helper.make_node("TopK", ["best", "k"], ["score", "index"], axis=1),
        helper.make_node("Unsqueeze", ["index", "axis2"], ["index3"]),
        helper.make_node("Tile", ["index3", "repeat4"], ["index4"]),
        helper.make_node("GatherElements", ["corner_boxes", "index4"], ["picked_boxes"], axis=1),
        helper.make_node("GatherElements", ["label", "index"], ["picked_label"], axis=1),
        helper.make_node("Cast", ["picked_label"], ["label_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["score", "axis2"], ["score3"]),
        helper.make_node("Unsqueeze", ["label_f", "axis2"], ["label3"]),
        helper.make_node("Concat", ["picked_boxes", "score3", "label3"], ["output0"], axis=2),
    ])
    graph.output.append(helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", rows, 6]))
    del graph.node[[n.output[0] for n in graph.node].index("output0")]  # the raw head's Concat
    return model
