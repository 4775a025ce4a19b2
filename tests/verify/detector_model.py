"""A small detector as torchvision exports them: one image [3, 24, 24] a run (no batch axis), Convs, a per-pixel
score map of two classes and a box per pixel, then NonMaxSuppression and Gathers — boxes [K, 4], scores [K] and
labels [K] with K chosen by the data. Its images hold bright squares, which it detects with confident scores; the
weights are fixed (seeded), so the tests' figures are too."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

SIZE = 24


def detector(shift: float = 0.0, name_dims: bool = True):
    """shift: added to the class Conv's bias, a broken copy of the model (its scores move, its detections with)."""
    rng = np.random.default_rng(7)
    features = np.abs(rng.normal(0, 0.3, (8, 3, 3, 3))).astype(np.float32)
    classes = np.zeros((2, 8, 1, 1), np.float32)
    classes[0, :4], classes[1, 4:] = 0.7, 0.7  # bright in the first or the last channels: class 0 or 1
    regress = rng.normal(0, 0.05, (4, 8, 1, 1)).astype(np.float32)
    ys, xs = np.meshgrid(np.arange(SIZE, dtype=np.float32), np.arange(SIZE, dtype=np.float32), indexing="ij")
    anchors = np.stack([xs - 4, ys - 4, xs + 4, ys + 4], -1).reshape(1, -1, 4)
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (features, "wf"), (classes, "wc"), (np.full(2, -4.0 + shift, np.float32), "bc"), (regress, "wr"),
        (anchors, "anchors"), (np.array([0], np.int64), "zero"), (np.array([1, -1, 4], np.int64), "flat_boxes"),
        (np.array([1, 2, -1], np.int64), "flat_scores"), (np.array([20], np.int64), "max_out"),
        (np.array([0.4], np.float32), "iou"), (np.array([0.2], np.float32), "score_min"),
        (np.array([1], np.int64), "one"), (np.array([2], np.int64), "two"), (np.array([3], np.int64), "three"))]
    nodes = [
        helper.make_node("Unsqueeze", ["image", "zero"], ["batched"]),
        helper.make_node("Conv", ["batched", "wf"], ["f"], name="features", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["f"], ["fr"]),
        helper.make_node("Conv", ["fr", "wc", "bc"], ["logits"], name="classes"),
        helper.make_node("Sigmoid", ["logits"], ["prob"]),
        helper.make_node("Reshape", ["prob", "flat_scores"], ["score_map"]),
        helper.make_node("Conv", ["fr", "wr"], ["delta"], name="regress"),
        helper.make_node("Transpose", ["delta"], ["delta_t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["delta_t", "flat_boxes"], ["delta_flat"]),
        helper.make_node("Add", ["anchors", "delta_flat"], ["all_boxes"]),
        helper.make_node("NonMaxSuppression", ["all_boxes", "score_map", "max_out", "iou", "score_min"], ["picked"]),
        helper.make_node("Slice", ["picked", "one", "two", "one"], ["class_col"]),
        helper.make_node("Slice", ["picked", "two", "three", "one"], ["box_col"]),
        helper.make_node("Squeeze", ["class_col", "one"], ["labels"]),
        helper.make_node("Squeeze", ["box_col", "one"], ["box_index"]),
        helper.make_node("Squeeze", ["all_boxes", "zero"], ["box_table"]),
        helper.make_node("Gather", ["box_table", "box_index"], ["boxes"], axis=0),
        helper.make_node("Squeeze", ["score_map", "zero"], ["class_scores"]),
        helper.make_node("GatherND", ["class_scores", "pairs"], ["scores"]),
        helper.make_node("Concat", ["class_col", "box_col"], ["pairs"], axis=1),
    ]
    k = "detections" if name_dims else None
    graph = helper.make_graph(
        nodes, "detector", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [3, SIZE, SIZE])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [k, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [k]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [k])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    # Topological order: the Concat that pairs classes with boxes comes before the GatherND reading it.
    model.graph.node.insert(len(model.graph.node) - 2, model.graph.node.pop())
    return model


def images(rng: np.random.Generator, count: int) -> np.ndarray:
    """Dim noise with 1–3 bright squares each, in the first channels (class 0) or the last (class 1)."""
    out = rng.uniform(0, 0.1, (count, 3, SIZE, SIZE)).astype(np.float32)
    for image in out:
        for _ in range(rng.integers(1, 4)):
            y, x = rng.integers(2, SIZE - 6, 2)
            channels = [0, 1] if rng.random() < 0.5 else [2]
            image[channels, y:y + 5, x:x + 5] += rng.uniform(0.8, 1.2)
    return out
