"""Which task metric each output gets (verify.tasks.rules), what each measures (verify.tasks.measures), and the float
model's own stability under its data's rounding (verify.stability)."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from conftest import to_model

import onnxq
from onnxq.errors import ConfigError
from onnxq.verify.comparisons import agreement_bound
from onnxq.verify.reference import Reference
from onnxq.verify.stability import input_steps
from onnxq.verify.tasks.measures import measure_task
from onnxq.verify.tasks.types import OutputTask
from onnxq.verify.tasks.rules import choose_tasks, language_model_logits, output_facts

SAMPLES = 4


def _tasks(model: ir.Model, outputs: dict, config=None) -> dict:
    facts = output_facts(model, list(outputs), list(outputs.values()), SAMPLES)
    return choose_tasks(config or onnxq.VerifyConfig(), facts)


def _heads(rng) -> ir.Model:
    """One input, a dense layer, and every kind of head: Softmax over classes, per-step Softmax (time-major, as a
    CRNN exports it), a Sigmoid map and a Sigmoid score, an ArgMax, an embedding and a token table's logits."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 8])
    ids = ir.val("ids", ir.DataType.INT64, ["batch", 3])
    w = tape.initializer(ir.tensor(rng.normal(0, 1, (8, 30)).astype(np.float32), name="w"))
    dense = tape.op("MatMul", [x, w], name="dense")
    probs = tape.op("Softmax", [dense], {"axis": -1}, name="softmax")
    steps = tape.op("Softmax", [tape.op("Reshape", [dense, tape.initializer(
        ir.tensor(np.array([-1, 6, 5], np.int64), name="s"))])], {"axis": -1}, name="per_step")
    mask = tape.op("Sigmoid", [tape.op("Reshape", [dense, tape.initializer(
        ir.tensor(np.array([-1, 1, 5, 6], np.int64), name="m"))])], name="mask")
    vad = tape.op("Sigmoid", [tape.op("MatMul", [x, tape.initializer(
        ir.tensor(rng.normal(0, 1, (8, 1)).astype(np.float32), name="v"))])], name="vad")
    label = tape.op("ArgMax", [dense], {"axis": 1, "keepdims": 0}, name="argmax")
    table = tape.initializer(ir.tensor(rng.normal(0, 1, (30, 8)).astype(np.float32), name="table"))
    token_logits = tape.op("MatMul", [tape.op("Gather", [table, ids]), tape.op("Transpose", [table])], name="lm")
    embedding = tape.op("Relu", [dense], name="embed")
    for value, name in ((dense, "output"), (probs, "probs"), (steps, "steps"), (mask, "segmap"), (vad, "speech"),
                        (label, "label"), (token_logits, "logits"), (embedding, "sentence_embedding")):
        value.name = name
    return to_model(tape, [x, ids], [dense, probs, steps, mask, vad, label, token_logits, embedding])


def _outputs(model: ir.Model, rng) -> dict:
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, {"x": rng.normal(0, 1, (SAMPLES, 8)).astype(np.float32),
                                 "ids": rng.integers(0, 30, (SAMPLES, 3))})
    return dict(zip(names, values))


def test_each_kind_of_output_gets_its_task_by_the_first_matching_rule(rng):
    model = _heads(rng)
    tasks = _tasks(model, _outputs(model, rng))
    assert {n: t.kind for n, t in tasks.items()} == {
        "output": "numeric", "probs": "top1", "steps": "sequence", "segmap": "iou", "speech": "frames",
        "label": "labels", "logits": "next-token", "sentence_embedding": "numeric"}
    assert "no rule matched" in tasks["output"].rule  # a dense layer's raw output: an embedding looks the same
    assert "Softmax output over 30 classes" in tasks["probs"].rule
    assert "6 steps of 5 classes" in tasks["steps"].rule
    assert "Sigmoid output, a map: the IoU of its positives at 0.5" in tasks["segmap"].rule
    assert "language model (30 classes" in tasks["logits"].rule and tasks["logits"].labels == "ids"
    assert "named as a representation (embed)" in tasks["sentence_embedding"].rule


def test_a_tolerance_overrides_the_rule_and_a_user_metric_replaces_them(rng):
    model = _heads(rng)
    outputs = _outputs(model, rng)
    config = onnxq.VerifyConfig(output_tolerances={"output": onnxq.Tolerance(task="top1"),
                                                   "probs": onnxq.Tolerance(task="numeric")})
    tasks = _tasks(model, outputs, config)
    assert tasks["output"].kind == "top1" and tasks["probs"].kind == "numeric"
    assert tasks["steps"].kind == "sequence"  # the others keep their rules
    hook = _tasks(model, outputs, onnxq.VerifyConfig(task_metric=lambda o: 1.0))
    assert {t.kind for t in hook.values()} == {"numeric"}
    with pytest.raises(ConfigError, match="task top1 needs class scores"):
        _tasks(model, outputs, onnxq.VerifyConfig(output_tolerances={"speech": onnxq.Tolerance(task="top1")}))
    with pytest.raises(ConfigError, match="not one of"):
        onnxq.Tolerance(task="bleu")


def test_sequences_decode_as_ctc_reads_them():
    blank = 0
    task = OutputTask("sequence", "test", blank=blank)
    # Per-step classes of 3 samples × 6 steps; float's: "1 1 0 2 2 0", "3 0 3 0 0 0", "1 2 0 0 0 0".
    steps = np.array([[1, 1, 0, 2, 2, 0], [3, 0, 3, 0, 0, 0], [1, 2, 0, 0, 0, 0]])
    changed = np.array([[1, 0, 0, 2, 0, 0], [3, 3, 0, 0, 0, 0], [1, 2, 0, 0, 0, 0]])
    one_hot = np.eye(4)
    # Sample 0: "1 2" both (repeats collapsed, blanks dropped); sample 1: "3 3" vs "3"; sample 2 unchanged.
    assert measure_task(one_hot[steps], one_hot[changed], task) == (2, 3)
    # Time-major [steps, samples, classes]: the samples' axis says where they are.
    assert measure_task(one_hot[steps].transpose(1, 0, 2), one_hot[changed].transpose(1, 0, 2), task, 1) == (2, 3)


def test_mask_iou_and_frames_count_what_they_say():
    ref = np.zeros((2, 1, 4, 4))
    ref[0, 0, :2, :2] = 0.9  # 4 pixels on
    got = ref.copy()
    got[0, 0, 0, 0] = 0.1  # one off
    got[1, 0, 3, 3] = 0.8  # one on where float has none
    assert measure_task(ref, got, OutputTask("iou", "test", None)) == (3, 5)
    frames = np.array([[0.2], [0.7], [0.51], [0.49]])
    assert measure_task(frames, 1 - frames, OutputTask("frames", "test", None)) == (0, 4)
    assert measure_task(frames, frames[[0, 1, 3, 2]], OutputTask("frames", "test", None)) == (2, 4)


def test_a_tolerance_sets_where_a_map_and_binary_decisions_turn_on(rng):
    """DBNet thresholds its probability map at 0.3, not 0.5: `--tolerance segmap:threshold=0.3` (TOML
    task_threshold) moves the mask's IoU there; class scores are not thresholded and keep their task."""
    from onnxq.cli.main import build_parser
    from onnxq.cli.args import config_from_args

    model = _heads(rng)
    outputs = _outputs(model, rng)
    args = build_parser().parse_args(["m.onnx", "--tolerance", "segmap:threshold=0.3", "--tolerance",
                                      "speech:threshold=0.7", "--tolerance", "probs:threshold=0.2"])
    verify = config_from_args(args).verify
    tasks = _tasks(model, outputs, verify)
    assert (tasks["segmap"].kind, tasks["segmap"].threshold) == ("iou", 0.3)
    assert tasks["segmap"].rule.endswith("the IoU of its positives at 0.3 (the output's tolerance)")
    assert (tasks["speech"].kind, tasks["speech"].threshold) == ("frames", 0.7)
    assert tasks["probs"].kind == "top1" and tasks["probs"].class_axis == -1
    # The same outputs measured at both thresholds: a value between them counts on at 0.3 only.
    ref, got = np.full((1, 1, 1, 2), 0.9), np.array([[[[0.9, 0.4]]]])
    assert measure_task(ref, got, tasks["segmap"]) == (2, 2)
    assert measure_task(ref, got, _tasks(model, outputs)["segmap"]) == (1, 2)
    with pytest.raises(ConfigError, match="threshold="):
        config_from_args(build_parser().parse_args(["m.onnx", "--tolerance", "threshold=nan"]))


def test_the_agreement_between_providers_is_held_to_twice_the_bar_less_one():
    config = onnxq.VerifyConfig()
    assert agreement_bound(config, "y", OutputTask("top1", "t")).min_task_agreement == 0.98
    assert agreement_bound(config, "y", OutputTask("sequence", "t")).min_task_agreement == 0.94
    assert agreement_bound(config, "y", OutputTask("numeric", "t")).task == "numeric"


def test_the_step_of_an_input_is_its_datas_own_resolution(rng):
    image = rng.integers(0, 256, (4, 3, 8, 8)).astype(np.float32) / 255.0
    audio = rng.integers(-32768, 32767, (4, 1000)).astype(np.float32) / 32768.0
    steps = input_steps([{"image": image, "audio": audio, "ids": rng.integers(0, 9, (4, 3))}])
    assert steps["image"] == pytest.approx(1 / 255, rel=1e-4) and steps["audio"] == pytest.approx(1 / 32768, rel=1e-3)
    assert "ids" not in steps


def test_data_on_few_levels_has_no_rounding_step(rng):
    """scikit-learn's digits: pixels counted 0-16. One level there is another input, not a rounding: before, the
    float MLP kept 0.41 of its answers under it, and 0.41 became the gate's bar."""
    digits = rng.integers(0, 17, (64, 64)).astype(np.float32)
    dark_image = rng.integers(0, 40, (4, 3, 8, 8)).astype(np.float32) / 255.0  # 40 levels of 8 bits: rounding
    steps = input_steps([{"digits": digits, "dark_image": dark_image}])
    assert steps["digits"] == 0.0 and steps["dark_image"] == pytest.approx(1 / 255, rel=1e-4)


def test_a_float_model_unstable_at_its_datas_resolution_sets_the_bar(rng, tmp_path):
    """Answers that hinge on one pixel level: the float model itself changes them when its input moves by one level
    (the data's own step); the bar follows what it keeps, not 0.99."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 2])
    w = tape.initializer(ir.tensor(np.array([[1.0, -1.0], [-1.0, 1.0]], np.float32), name="w"))
    logits = tape.op("MatMul", [x, w], name="head")
    logits.name = "logits"
    model = to_model(tape, [x], [logits])
    pixels = rng.integers(0, 256, (64, 2)).astype(np.float32)
    pixels[:16, 1] = pixels[:16, 0]  # a quarter exactly tied: either answer under one level of noise
    x = pixels / 255.0
    reference = Reference(model, [{"x": x}])
    tasks = reference.tasks(onnxq.VerifyConfig())
    stability = reference.stability(tasks)["logits"]
    # Measured 0.906 (seeded): the ties and a few answers one level apart move.
    assert tasks["logits"].kind == "top1" and 0.75 <= stability < 0.99
    report = onnxq.quantize(model, {"x": x}, verify_data={"x": x}).report
    bar = report.verification.stability["logits"]
    assert bar == stability and report.verification.outputs[0].passed


def test_an_if_output_is_what_both_branches_make(rng):
    """silero-vad's output: a mean over frames of a Sigmoid, made in both branches of an If on the sample rate —
    frames, seen through the If and the ReduceMean; with branches that disagree, nothing is claimed."""
    from onnx import TensorProto, helper, numpy_helper

    def branch(name: str, op: str) -> object:
        nodes = [helper.make_node(op, ["x"], [f"{name}_p"], name=f"{name}_act"),
                 helper.make_node("ReduceMean", [f"{name}_p"], [f"{name}_y"], axes=[1], keepdims=1,
                                  name=f"{name}_mean")]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT,
                                                                                 ["n", 1])])

    def model(else_op: str) -> ir.Model:
        nodes = [helper.make_node("Equal", ["rate", "r16k"], ["is16k"], name="eq"),
                 helper.make_node("If", ["is16k"], ["speech"], then_branch=branch("a", "Sigmoid"),
                                  else_branch=branch("b", else_op), name="if")]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8]),
                                               helper.make_tensor_value_info("rate", TensorProto.INT64, [])],
                                  [helper.make_tensor_value_info("speech", TensorProto.FLOAT, ["n", 1])],
                                  [numpy_helper.from_array(np.array(16000, np.int64), "r16k")])
        return ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))

    values = {"speech": 1 / (1 + np.exp(-rng.normal(0, 1, (SAMPLES, 1)))).astype(np.float32)}
    assert _tasks(model("Sigmoid"), values)["speech"].kind == "frames"
    assert "Sigmoid output" in _tasks(model("Sigmoid"), values)["speech"].rule
    assert _tasks(model("Relu"), values)["speech"].kind == "numeric"  # the branches disagree


def test_synthetic_inputs_choose_no_task(rng):
    """Random inputs' decisions are near ties that say nothing of the task: a classifier verified on them keeps the
    numeric bars."""
    model = _heads(rng)
    facts = output_facts(model, ["probs"], [_outputs(model, rng)["probs"]], SAMPLES)
    assert choose_tasks(onnxq.VerifyConfig(), facts)["probs"].kind == "top1"
    synthetic = choose_tasks(onnxq.VerifyConfig(), facts, synthetic=True)["probs"]
    assert synthetic.kind == "numeric" and "synthetic random inputs" in synthetic.rule


def test_raw_ctc_scores_are_read_as_sequences_whatever_their_name(rng):
    """ddddocr's recognizer outputs raw per-step scores named "387": the gate saw them as numbers (cosine 0.997)
    while 2 of its 48 captchas were read otherwise. Most steps' decision is one class (the blank), the rest several
    others: the decoded sequence. A hidden state whose one outlier feature wins every step is not taken for one."""
    steps = rng.normal(0, 1, (SAMPLES, 20, 40)).astype(np.float32)
    steps[:, :, 0] += 3.0  # the blank wins most steps
    steps[:, ::5, 0] -= 6.0  # every fifth step another class wins
    hidden = rng.normal(0, 1, (SAMPLES, 20, 40)).astype(np.float32)
    hidden[:, :, 7] += 30.0  # an outlier feature, as transformers' hidden states have
    # Independent probabilities whose argmax happens to sit on one class (a sigmoid map seen through an If whose
    # other branch is Identity, so no producer is known): no class wins there, nothing to decode.
    sigmoid = 1 / (1 + np.exp(-steps))
    # 4 steps of 5 classes whose decisions are mostly one class: a small regression head's, not CTC's frames.
    short = steps[:, :4, :5]
    facts = output_facts(None, ["387", "399", "y", "z"], [steps, hidden, sigmoid, short], SAMPLES)
    tasks = choose_tasks(onnxq.VerifyConfig(), facts)
    assert tasks["387"].kind == "sequence" and tasks["387"].blank == 0 and "CTC's blank" in tasks["387"].rule
    assert tasks["399"].kind == "numeric" and tasks["y"].kind == "numeric" and tasks["z"].kind == "numeric"


def _block(rng, width: int, heads: int) -> ir.Model:
    """x [batch, steps, width] → three projections and an output projection of the same width, as a transformer
    block's; `heads` (its classifier, [width, 40]) when given."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 20, width])

    def weight(name, n):
        return tape.initializer(ir.tensor(rng.normal(0, 0.1, (width, n)).astype(np.float32), name=name))
    mixed = tape.op("Add", [tape.op("MatMul", [x, weight("q", width)]), tape.op("MatMul", [x, weight("v", width)])])
    y = tape.op("MatMul", [mixed, weight("o", width)])
    if heads:
        y = tape.op("MatMul", [y, weight("head", heads)])
    y.name = "y"
    return to_model(tape, [x], [y])


def test_an_unnamed_hidden_state_whose_outlier_wins_most_steps_is_no_ctc_output(rng):
    """A transformer output named "y" [batch, 20, 40] whose outlier feature wins most steps, not all (an ONNX
    Attention block: its one output read as CTC scores, the gate kept half its products float at cosine 0.9999): 40
    is the width its products read, so it is a hidden state. The same scores from a head of 40 classes on a block of
    width 32 are still read as CTC's."""
    scores = rng.normal(0, 1, (SAMPLES, 20, 40)).astype(np.float32)
    scores[:, :, 7] += 3.0
    scores[:, ::5, 7] -= 6.0  # every fifth step another feature wins
    hidden = output_facts(_block(rng, 40, 0), ["y"], [scores], SAMPLES)
    assert hidden[0].read_widths == frozenset({40})
    assert choose_tasks(onnxq.VerifyConfig(), hidden)["y"].kind == "numeric"
    head = output_facts(_block(rng, 32, 40), ["y"], [scores], SAMPLES)
    assert choose_tasks(onnxq.VerifyConfig(), head)["y"].kind == "sequence"


def test_an_encoder_as_wide_as_its_position_table_is_no_language_model(rng):
    """A BERT-like encoder of width 16 with 16 positions, its position ids an input: its hidden state [batch, 8, 16]
    was read as next-token logits over the position table's 16 rows, judged by the perplexity of position_ids, and
    the model as a decoder (language-model defaults). 16 is the width its products read: a hidden state."""
    tape = ir.tape.Tape()
    ids = ir.val("input_ids", ir.DataType.INT64, ["batch", 8])
    positions = ir.val("position_ids", ir.DataType.INT64, ["batch", 8])

    def table(name, shape):
        return tape.initializer(ir.tensor(rng.normal(0, 0.3, shape).astype(np.float32), name=name))
    hidden = tape.op("Add", [tape.op("Gather", [table("words", (100, 16)), ids]),
                             tape.op("Gather", [table("positions", (16, 16)), positions])])
    hidden = tape.op("MatMul", [tape.op("MatMul", [hidden, table("w1", (16, 16))]), table("w2", (16, 16))])
    hidden.name = "y"
    model = to_model(tape, [ids, positions], [hidden])
    facts = output_facts(model, ["y"], [rng.normal(0, 1, (SAMPLES, 8, 16)).astype(np.float32)], SAMPLES)
    assert facts[0].gathered_rows == frozenset({16, 100}) and facts[0].read_widths == frozenset({16})
    assert choose_tasks(onnxq.VerifyConfig(), facts)["y"].kind == "numeric"
    assert language_model_logits(model) is None


def test_attention_weights_are_no_answer_and_classes_last_on_a_map_are_per_position(rng):
    """Softmax rows [samples, heads, queries, keys] were judged as a decoded sequence of `heads` steps: named as
    attention weights they are numeric; unnamed, a map with its classes last (NHWC) is judged per position."""
    rows = rng.normal(0, 1, (SAMPLES, 4, 8, 8))
    rows = (np.exp(rows) / np.exp(rows).sum(-1, keepdims=True)).astype(np.float32)
    facts = output_facts(None, ["attentions", "attn_weights", "probs"], [rows] * 3, SAMPLES)
    tasks = choose_tasks(onnxq.VerifyConfig(), facts)
    assert tasks["attentions"].kind == tasks["attn_weights"].kind == "numeric"
    assert tasks["probs"].kind == "frames" and tasks["probs"].class_axis == -1


def test_a_tagger_of_token_ids_is_judged_per_token(rng):
    """Token classification (NER) logits [samples, tokens, tags] were judged as CTC reads them: the commonest tag
    (O) dropped as the blank and repeats collapsed, so "B I I" turning "B I O" changed nothing. Computed from token
    ids, they are judged per token; per-step scores made from a signal stay a decoded sequence."""
    tape = ir.tape.Tape()
    ids = ir.val("input_ids", ir.DataType.INT64, ["batch", 16])
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 16, 8])
    words = tape.initializer(ir.tensor(rng.normal(0, 1, (50, 8)).astype(np.float32), name="words"))
    head = tape.initializer(ir.tensor(rng.normal(0, 1, (8, 9)).astype(np.float32), name="head"))
    tags = tape.op("MatMul", [tape.op("Gather", [words, ids]), head])
    frames = tape.op("MatMul", [x, head])
    tags.name, frames.name = "logits", "ctc_logits"
    model = to_model(tape, [ids, x], [tags, frames])
    scores = rng.normal(0, 1, (SAMPLES, 16, 9)).astype(np.float32)
    tasks = choose_tasks(onnxq.VerifyConfig(), output_facts(model, ["logits", "ctc_logits"], [scores] * 2, SAMPLES))
    assert tasks["logits"].kind == "frames" and tasks["logits"].class_axis == -1 and "per token" in tasks["logits"].rule
    assert tasks["ctc_logits"].kind == "sequence"


def _old_softmax_model(shape: tuple[int, ...], opset: int) -> ir.Model:
    """x → Softmax (no axis attribute) → y, at the opset given."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", *shape[1:]])
    probs = tape.op("Softmax", [x], name="softmax")
    probs.name = "y"
    return to_model(tape, [x], [probs], opset=opset)


def test_a_classifiers_softmax_over_a_1x1_map_is_top1(rng):
    """SqueezeNet (opset 9): Softmax's default axis 1 on [N, 1000, 1, 1] normalizes the flattened block from axis 1
    on, which is the classes alone: top-1, not cosine alone ("no rule matched")."""
    shape = (SAMPLES, 20, 1, 1)
    logits = rng.normal(0, 1, shape).astype(np.float32)
    values = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    task = _tasks(_old_softmax_model(shape, 9), {"y": values})["y"]
    assert task.kind == "top1" and task.class_axis == 1 and "over 20 classes (axis 1)" in task.rule
    flipped = values.copy()
    flipped[0, :, 0, 0] = flipped[0, ::-1, 0, 0]  # one sample's decision changes
    assert measure_task(values, flipped, task) == (SAMPLES - 1, SAMPLES)


def test_an_old_softmax_over_several_axes_is_judged_by_its_values(rng):
    """Before opset 13, Softmax (default axis 1) on [N, 6, 5] normalizes the 30 values of each sample at once: no
    per-axis decision reads that, so it is not taken for per-step classes."""
    logits = rng.normal(0, 1, (SAMPLES, 6, 5)).astype(np.float32)
    values = np.exp(logits) / np.exp(logits).sum(axis=(1, 2), keepdims=True)
    assert _tasks(_old_softmax_model(values.shape, 11), {"y": values})["y"].kind == "numeric"


def test_a_segmentation_maps_named_scores_have_their_classes_on_axis_1(rng):
    """SegFormer's logits [batch, classes, height, width]: the class at every pixel. Read off the last axis, they
    were taken for CTC steps (2 'steps' of 16 'classes') and failed the gate at cosine 1.0000."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 8])
    w = tape.initializer(ir.tensor(rng.normal(0, 1, (8, 3 * 16 * 16)).astype(np.float32), name="w"))
    maps = tape.op("Reshape", [tape.op("MatMul", [x, w]), tape.initializer(
        ir.tensor(np.array([-1, 3, 16, 16], np.int64), name="shape"))], name="to_map")
    maps.name = "logits"
    model = to_model(tape, [x], [maps])
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])
    values = session.run(["logits"], {"x": rng.normal(0, 1, (SAMPLES, 8)).astype(np.float32)})[0]
    task = _tasks(model, {"logits": values})["logits"]
    assert (task.kind, task.class_axis) == ("frames", 1) and "classes on axis 1" in task.rule
    flipped = values.copy()
    flipped[0, :, 0, 0] = flipped[0, ::-1, 0, 0]  # one pixel of one image changes class (or ties)
    kept, total = measure_task(values, flipped, task, 0)
    assert total == SAMPLES * 16 * 16 and kept >= total - 1


def _sigmoid_head_task(rng, name: str, per_sample: tuple[int, int]) -> OutputTask:
    """The task chosen for a Sigmoid output [batch, *per_sample] named `name`, on real ORT outputs."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 8])
    w = tape.initializer(ir.tensor(rng.normal(0, 1, (8, int(np.prod(per_sample)))).astype(np.float32), name="w"))
    head = tape.op("Sigmoid", [tape.op("Reshape", [tape.op("MatMul", [x, w]), tape.initializer(
        ir.tensor(np.array([-1, *per_sample], np.int64), name="shape"))])], name="head")
    head.name = name
    model = to_model(tape, [x], [head])
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])
    values = session.run([name], {"x": rng.normal(0, 1, (SAMPLES, 8)).astype(np.float32)})[0]
    return _tasks(model, {name: values})[name]


def test_a_detectors_boxes_are_coordinates_not_a_mask(rng):
    """DETR's pred_boxes: a Sigmoid's [batch, queries, 4]; thresholded at 0.5 as a map, boxes near 0.5 turned a
    1.0000 cosine into IoU 0.0000 and a failed gate."""
    task = _sigmoid_head_task(rng, "pred_boxes", (10, 4))
    assert task.kind == "numeric" and "coordinates (box)" in task.rule


def test_a_detectors_scores_per_anchor_and_class_are_judged_by_their_positives(rng):
    """PicoDet's and YOLO's class scores, a Sigmoid's [batch, anchors, classes]: rank 3 has no channel axis, so the
    rule cannot tell them from a mask [batch, height, width] and says both; the IoU of the positives fits both."""
    task = _sigmoid_head_task(rng, "scores", (20, 3))
    assert task.kind == "iou" and "a map or scores per anchor and class" in task.rule
    assert "the IoU of its positives at 0.5" in task.rule
