"""A detector's raw head (YOLO without its NMS: boxes in pixels beside class probabilities, one Concat) is judged on
its decoded detections: its cosine is the boxes' and does not see the class probabilities (a copy whose class
logits fell by 1 kept cosine 1.0000 while a fifth of its detections went)."""

import json
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from head_model import end_to_end, head, images

import onnxq
from onnxq.config import VerifyConfig
from onnxq.verify.api import compare_models
from onnxq.verify.tasks.boxes import nms
from onnxq.verify.tasks.detection_heads import decoded
from onnxq.verify.tasks.measures import MEASURES
from onnxq.verify.tasks.rules import choose_tasks, output_facts


def _tasks(model: onnx.ModelProto):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    data = images(np.random.default_rng(0), 4)
    facts = output_facts(ir.from_proto(model), ["output0"], session.run(["output0"], {"image": data}), 4)
    return choose_tasks(VerifyConfig(), facts)


def test_the_rule_reads_a_raw_head_and_its_channel_axis():
    task = _tasks(head())["output0"]
    assert task.kind == "head-detections" and task.class_axis == 1 and task.threshold == 0.25


def test_a_head_s_boxes_and_probabilities_are_decoded_as_its_users_do():
    """Anchors as centre and size; each anchor's best class at the threshold; NMS per class at IoU 0.7."""
    values = np.zeros((4 + 2, 3), np.float32)
    values[:4, 0] = [10, 10, 4, 4]  # class 0 at 0.9
    values[:4, 1] = [10.5, 10, 4, 4]  # overlaps the first (IoU 0.78): suppressed, same class
    values[:4, 2] = [10.5, 10, 4, 4]  # the same box, class 1: kept
    values[4:, 0], values[4:, 1], values[4:, 2] = [0.9, 0.1], [0.8, 0.0], [0.2, 0.6]
    boxes, labels = decoded(values, 0, 0.25)
    assert labels.tolist() == [0, 1] and boxes[0].tolist() == [8, 8, 12, 12]
    assert nms(boxes, np.array([0.9, 0.6]), np.zeros(2, np.int64), 0.7, 1).tolist() == [0]


@pytest.mark.parametrize("shift, passes", [(0.0, True), (0.1, True), (-1.0, False)])
def test_the_gate_sees_class_probabilities_the_cosine_does_not(shift, passes):
    data = {"image": images(np.random.default_rng(0), 64)[48:]}
    verification = compare_models(head(), head(class_shift=shift), data)
    output = verification.providers[0].outputs[0].metrics
    assert output.task == "head-detections" and output.cosine_mean > 0.9999  # the boxes' cosine, whatever the shift
    assert verification.passed == passes
    assert output.task_agreement == 1.0 if shift == 0.0 else (output.task_agreement >= 0.90) == passes


def test_a_quantized_head_is_verified_on_its_detections(tmp_path):
    data = images(np.random.default_rng(0), 64)
    result = onnxq.quantize(head(), {"image": data[:48]}, output=tmp_path / "q.onnx",
                            verify_data={"image": data[48:]}, config={"verify": {"never_slower": False}})
    output = result.report.verification.providers[0].outputs[0].metrics
    assert result.report.passed and output.task == "head-detections" and output.task_agreement >= 0.90
    assert output.task_units > 300  # detections of either model over the 16 images: the measure is resolved
    written = json.loads(json.dumps(result.report.to_dict()))  # as the --report file holds it
    jsonschema.validate(written, json.loads((Path(onnxq.__file__).parent / "report_schema.json").read_text()))


def test_packed_detections_are_matched_whatever_their_order():
    """YOLOv10's end-to-end rows (x1, y1, x2, y2, score, class): the rule reads them; rows reordered and one below the
    threshold on one side: 2 kept of 3 shown."""
    session = ort.InferenceSession(end_to_end().SerializeToString(), providers=["CPUExecutionProvider"])
    data = images(np.random.default_rng(0), 4)
    facts = output_facts(ir.from_proto(end_to_end()), ["output0"], session.run(["output0"], {"image": data}), 4)
    task = choose_tasks(VerifyConfig(), facts)["output0"]
    assert task.kind == "packed-detections" and task.threshold == 0.25
    ref = np.array([[[0, 0, 10, 10, 0.9, 1], [20, 20, 30, 30, 0.8, 2], [40, 40, 50, 50, 0.3, 0], [0, 0, 0, 0, 0, 0]]],
                   np.float32)
    got = ref[:, [1, 0, 3, 2]].copy()
    got[0, 3, 4] = 0.2  # the third detection falls under the threshold here
    assert MEASURES["packed-detections"](ref, got, task) == (2, 3)


@pytest.mark.parametrize("shift, passes", [(0.0, True), (0.1, True), (-2.0, False)])
def test_the_gate_sees_packed_detections_the_cosine_does_not(shift, passes):
    data = {"image": images(np.random.default_rng(0), 64)[48:]}
    verification = compare_models(end_to_end(), end_to_end(class_shift=shift), data)
    output = verification.providers[0].outputs[0].metrics
    assert output.task == "packed-detections" and output.cosine_mean > 0.999
    assert verification.passed == passes
