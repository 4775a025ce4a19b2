"""Which task metric each output gets, from what the output says it is: its producer in the float graph, its name,
and the float model's values on the first verification batch. Cosine and SQNR on raw outputs do not see an answer
change (a captcha reader keeps cosine 0.998 while 15 % of its strings change), so an output that holds
decisions is gated on the share of them the quantized model keeps (verify.tasks.measures).

The rules, tried in order (a registry: a new kind of output is one function and one entry); the first that
matches decides, and the report names it:

- integer outputs hold decisions already (labels, indices): kept as they are;
- next-token logits of a language model (classes = the rows of a table the model gathers its input ids from) are
  judged by the perplexity ratio on the data's own next tokens (next-token agreement reported): a changed next token
  among near-equal candidates is no wrong answer; the model's cache outputs (present.*, a recurrent state) are then
  state, judged through the logits they make;
- a detector's raw head (YOLO without NMS: boxes beside class probabilities, one Concat) is decoded, and its packed
  detections (YOLOv10's end-to-end rows of box, score, class) read, as their users do (verify.tasks.detection_heads);
- per-step class scores a Loop stacks (an autoregressive decoder, its step count the data's) are its tokens read to
  the end token, compared as a sequence;
- an output named as coordinates is numeric; a Sigmoid's output is a map or on/off decisions whatever its name;
- an output named as a representation (embedding, hidden state, features, pooled, a recurrent state, attention
  weights) is numeric — an exporter's generic names (tf2onnx's StatefulPartitionedCall:N) say nothing and are not
  read;
- probabilities of a softmax (its producer, or rows that sum to 1): top-1 for [samples, classes] (and for an old
  classifier's [samples, classes, 1, 1]), the class of every token for a model that reads token ids (a tagger), the
  decoded sequence for per-step scores [samples, steps, classes] (CTC), per-position classes otherwise;
- values in [0, 1] named as a mask or map, as a Sigmoid's: mask IoU for a map with two spatial axes, frames (on/off
  decisions) otherwise (voice activity, multi-label);
- scores named as classes (logits, class, label): top-1 / sequence;
- per-step scores of any name whose decisions are mostly one class (CTC's blank) and several others, from a model
  that reads no token ids: sequence;
- anything else keeps the numeric bars (a raw-logits classifier named "output": --task-metric top1).

Then a detector's NMS outputs (boxes [K, 4] and the outputs of the same K rows, K chosen by the data) become one
detection set, whatever the rules said of each (verify.tasks.detection_sets).

Override per output with the tolerance's `task` (numeric to gate numbers only, or a kind), everywhere with
--task-metric KIND, or give your own evaluation (--task-metric MODULE:FUNCTION), which replaces the rules.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir

from onnxq.config import VerifyConfig
from onnxq.errors import ConfigError, one_line
from onnxq.verify.tasks.detection_heads import HEAD_THRESHOLD, head_task_kind, packed_task_kind
from onnxq.verify.tasks.detection_sets import with_detection_sets
from onnxq.verify.metrics import MetricsAccumulator, sample_axis
from onnxq.verify.tasks.measures import MEASURES
from onnxq.verify.tasks.types import GENERIC_NAMES, OutputFacts, OutputTask

__all__ = ["RULES", "choose_tasks", "output_facts", "measured", "measured_kind", "FACT_SAMPLES",
           "language_model_logits", "accumulator", "may_hold_to_a_share"]

# Ops that move or retype values without changing which value is which, and reductions that keep probabilities
# probabilities (a voice-activity detector's mean over its frames' Sigmoid): the producer is looked for through them.
_PASS_THROUGH = frozenset({"Identity", "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
                           "ReduceMean", "ReduceMax", "ReduceMin"})
# Attention weights are probabilities over keys, but no answer: an export with output_attentions has them.
_REPRESENTATION = re.compile(r"embed|hidden|feature|pool|latent|encod|vector|state|present|past|cache|attn|attention",
                            re.I)
_CLASS_NAMES = re.compile(r"logit|class|cls|label", re.I)
_CACHE_NAMES = re.compile(r"present|past|cache", re.I)
_MAP_NAMES = re.compile(r"mask|prob|heat|seg|map|sigmoid", re.I)
_COORDINATE_NAMES = re.compile(r"box|coord|landmark|keypoint|offset|regress", re.I)
# Names an exporter gives every output whatever it computes: tf2onnx's StatefulPartitionedCall:N (its "State" is no
# recurrent state). They say nothing, so the rules read the output's producer and values alone.
_BLANK_SHARE = 0.5  # a class the float model picks on at least half the frames is CTC's blank
# Raw scores of fewer steps are not read as CTC's: a frame per input step makes tens (OCR 25-80, speech more), and
# 4 steps of 5 classes from a regression head picked one class on half its frames by chance (ONNX's Div test
# between two MatMuls: gated at 0.67 "agreement" over 3 samples with a cosine of 1.0000).
_MIN_CTC_STEPS = 8
# Samples of the first batch the rules read: enough to see what an output is, without copying a language model's
# 50 M logits.
FACT_SAMPLES = 8


Rule = Callable[[OutputFacts], OutputTask | None]


def _integer(f: OutputFacts) -> OutputTask | None:
    if f.integer and f.values.size:
        return OutputTask("labels", "an integer output: its values are decisions (labels, indices)", None)
    return None


def _language_model(f: OutputFacts) -> OutputTask | None:
    # A hidden state as wide as a table's rows (BERT's 512 features beside its 512 positions) is no vocabulary.
    if f.rank != 3 or f.values.shape[-1] not in f.gathered_rows or f.values.shape[-1] in f.read_widths:
        return None
    what = f"next-token logits of a language model ({f.values.shape[-1]} classes, the rows of the table its input ids index)"
    tokens = f.token_inputs.get(f.values.shape[-1], ())
    if len(tokens) != 1:
        return OutputTask("numeric", f"{what}; no one input holds its tokens, so no next token can be scored")
    return OutputTask("next-token", f"{what}: the perplexity on {tokens[0]}'s next tokens judges it (a changed next "
                      "token among near equals is no wrong answer)", labels=tokens[0])


def _representation(f: OutputFacts) -> OutputTask | None:
    if found := _REPRESENTATION.search(f.said):
        return OutputTask("numeric", f"named as a representation ({found.group(0)}), not an answer")
    return None


def _classes(f: OutputFacts, why: str, axis: int = -1) -> OutputTask | None:
    """Top-1 for [samples, classes], the class of every token for [samples, tokens, classes] made from token ids, the
    decoded sequence for other [samples, steps, classes], per-position classes when the classes lie on another axis
    (a segmentation map) or last from rank 4."""
    if f.rank < 2 or f.values.shape[axis] < 2:
        return None
    if axis not in (-1, f.rank - 1):
        if all(n == 1 for n in f.values.shape[axis + 1:]):  # [samples, classes, 1, 1]: a classifier's 1×1 map
            return OutputTask("top1", f"{why} over {f.values.shape[axis]} classes (axis {axis})", axis)
        return OutputTask("frames", f"{why}, classes on axis {axis}: the class at every position", axis)
    if f.rank == 2:
        return OutputTask("top1", f"{why} over {f.values.shape[-1]} classes")
    # A tagger of token ids (NER, parts of speech): a class per token, no CTC alignment to collapse.
    if f.rank == 3 and f.token_fed:
        return OutputTask("frames", f"{why}, per token ({f.values.shape[1]} tokens of {f.values.shape[-1]} classes, "
                          "the model reads token ids): the class of every token", -1)
    if f.rank > 3:  # [samples, height, width, classes]: a map's classes last (NHWC), no sequence
        return OutputTask("frames", f"{why} over {f.values.shape[-1]} classes (last axis): the class at every "
                          "position", -1)
    return OutputTask("sequence", f"{why}, per step ({f.values.shape[1]} steps of {f.values.shape[-1]} classes): the "
                      "sequence as CTC's greedy decoding reads it", blank=_blank(f.values))


def _detection_head(f: OutputFacts) -> OutputTask | None:
    found = head_task_kind(f)
    return None if found is None else OutputTask("head-detections", found[1], found[0], HEAD_THRESHOLD)


def _packed_detections(f: OutputFacts) -> OutputTask | None:
    why = packed_task_kind(f)
    return None if why is None else OutputTask("packed-detections", why, None, HEAD_THRESHOLD)


def _coordinates(f: OutputFacts) -> OutputTask | None:
    """A detector's boxes (DETR's and YOLOS's pred_boxes: a Sigmoid's [queries, 4] centres and sizes in [0, 1]) are
    coordinates, not a map to threshold: read as a mask at 0.5, a random DETR's boxes all near 0.5 scored IoU 0."""
    if found := _COORDINATE_NAMES.search(f.said):
        return OutputTask("numeric", f"named as coordinates ({found.group(0)}), not decisions")
    return None


def _softmax(f: OutputFacts) -> OutputTask | None:
    if f.producer in ("Softmax", "LogSoftmax") or f.sums_to_one:
        why = "rows that sum to 1 (probabilities)"
        if f.producer in ("Softmax", "LogSoftmax"):
            why = f"{f.producer} output"
        return _classes(f, why, -1 if f.softmax_axis is None else f.softmax_axis)
    return None


def _sigmoid(f: OutputFacts) -> OutputTask | None:
    """A Sigmoid's output, whatever its name (a tf2onnx audio model's posteriorgrams are StatefulPartitionedCall:N):
    what the output computes says what it is. Tried before the names of representations."""
    return _probabilities(f) if f.producer in ("Sigmoid", "HardSigmoid") else None


def _named_map(f: OutputFacts) -> OutputTask | None:
    return _probabilities(f) if f.unit_range and _MAP_NAMES.search(f.said) else None


def _probabilities(f: OutputFacts) -> OutputTask | None:
    why = f"{f.producer} output" if f.producer in ("Sigmoid", "HardSigmoid") else f"values in [0, 1] named {f.name!r}"
    if f.spatial:
        # Rank 3 is a mask [N, H, W] or a detector's scores [N, anchors, classes]: the same measure fits both.
        what = "a map" if f.rank >= 4 else "a map or scores per anchor and class"
        return OutputTask("iou", f"{why}, {what}: the IoU of its positives at 0.5", None)
    return OutputTask("frames", f"{why}: on/off decisions at 0.5", None)


def _decoder_loop(f: OutputFacts) -> OutputTask | None:
    """Per-step class scores [samples, steps, classes] that a Loop stacks: an autoregressive decoder (a table
    recognizer's structure tokens) whose step count the data decides — its tokens read to the end token, no CTC
    collapse (a decoder's repeated tokens are tokens)."""
    if f.producer != "Loop" or f.rank != 3 or f.values.shape[-1] < 2 or not (
            f.sums_to_one or f.values.dtype.kind == "f" and _CLASS_NAMES.search(f.said)):
        return None
    return OutputTask("decoded", f"per-step scores a Loop stacks ({f.values.shape[1]} steps of {f.values.shape[-1]} "
                      "classes; the data decides the steps): an autoregressive decoder's tokens, read to its end "
                      "token and compared as a sequence")


def _named_classes(f: OutputFacts) -> OutputTask | None:
    """Raw scores named as classes. A dense layer's output alone is not taken for class scores: an embedding or a
    regression head looks the same, and a gate that misjudges an output would keep nodes float for nothing."""
    if f.values.dtype.kind == "f" and _CLASS_NAMES.search(f.said):
        # [samples, classes, height, width …]: a segmentation map's classes lie on axis 1 (ONNX's NCHW), as
        # SegFormer's and DeepLab's logits do; read off the last axis, SegFormer's were taken for CTC steps.
        return _classes(f, f"scores named {f.name!r}", 1 if f.rank >= 4 else -1)
    return None


def _ctc_scores(f: OutputFacts) -> OutputTask | None:
    """Raw per-step scores whatever their name (ddddocr's output is "387"), read off their values: most steps'
    decision is one class — CTC's blank — and the rest spread over several others. A hidden state whose one outlier
    feature wins every step has no others, and one as wide as what the model's products read is a hidden state too
    (one outlier feature winning most steps of an unnamed transformer output read as CTC's blank: the gate then kept
    half its products float at cosine 0.9999); an output named as a representation met its rule first. Values all in
    [0, 1] whose rows do not sum to 1 (softmax's rule took those) are independent probabilities — a sigmoid's map
    behind an If whose other branch passes its input through — not class scores of which one wins. A model that
    reads token ids is no CTC model (CTC aligns a signal: images, audio)."""
    if f.rank != 3 or f.values.dtype.kind != "f" or f.values.shape[-1] < 3 or f.unit_range \
            or f.values.shape[1] < _MIN_CTC_STEPS or f.values.shape[-1] in f.read_widths or f.token_fed:
        return None
    blank = _blank(f.values)
    steps = np.argmax(f.values, axis=-1)
    if blank is None or np.unique(steps[steps != blank]).size < 2:
        return None
    return OutputTask("sequence", f"per-step scores ({f.values.shape[1]} steps of {f.values.shape[-1]} classes) whose "
                      f"decisions are mostly class {blank}, CTC's blank: the sequence as its greedy decoding reads it",
                      blank=blank)


RULES: list[tuple[str, Rule]] = [
    ("integer", _integer),
    ("language-model", _language_model),
    ("detection-head", _detection_head),
    ("packed-detections", _packed_detections),
    ("decoder-loop", _decoder_loop),
    ("coordinates", _coordinates),
    ("sigmoid", _sigmoid),
    ("representation", _representation),
    ("softmax", _softmax),
    ("map-names", _named_map),
    ("class-scores", _named_classes),
    ("ctc-scores", _ctc_scores),
]


def _blank(values: np.ndarray) -> int | None:
    steps = np.argmax(values, axis=-1).reshape(-1)
    if not steps.size:
        return None
    counts = np.bincount(steps)
    return int(np.argmax(counts)) if counts.max() >= _BLANK_SHARE * steps.size else None


def _rule_task(facts: OutputFacts) -> OutputTask:
    for _, rule in RULES:
        task = rule(facts)
        if task is not None:
            return task
    return OutputTask("numeric", "no rule matched (not class scores, a sequence of them, or a probability map)")


def _forced(facts: OutputFacts, kind: str) -> OutputTask:
    """The kind a tolerance sets, with what it needs from the data; refused when the output cannot hold it."""
    why = "set by the output's tolerance (task)"
    if kind in ("top1", "sequence") and (facts.rank < 2 or facts.values.shape[-1] < 2):
        raise ConfigError(f"output {one_line(facts.name)} has shape {facts.values.shape} (samples first): task "
                          f"{kind} needs class scores on its last axis — set task to frames, iou or numeric")
    if kind == "labels" or (kind == "top1" and facts.rank == 2):
        return OutputTask(kind, why, None if kind == "labels" else -1)
    threshold = 0.5 if facts.unit_range else 0.0
    if kind == "sequence":
        return OutputTask(kind, why, blank=_blank(facts.values))
    return OutputTask(kind, why, None if kind in ("frames", "iou") else -1, threshold)


def choose_tasks(config: VerifyConfig, facts: Sequence[OutputFacts], synthetic: bool = False) -> dict[str, OutputTask]:
    """Each output's task (kind "numeric": none), by its tolerance's `task`: auto → the rules, unless the inputs
    are synthetic (random: their decisions are near ties that say nothing of the task) or the user's own task
    metric judges the task."""
    chosen = {}
    for f in facts:
        kind = config.tolerance_for(f.name).task
        if kind == "auto" and config.task_metric is not None:
            chosen[f.name] = OutputTask("numeric", "your task metric (verify.task_metric) judges the task")
        elif kind == "auto" and synthetic:
            chosen[f.name] = OutputTask("numeric", "verified on synthetic random inputs, whose decisions say nothing "
                                        "of the task: pass --verify-data")
        elif kind == "auto":
            chosen[f.name] = _rule_task(f)
        elif kind == "numeric":
            chosen[f.name] = OutputTask("numeric", "set by the output's tolerance (task = numeric)")
        else:
            chosen[f.name] = _forced(f, kind)
    free = {f.name for f in facts if config.tolerance_for(f.name).task == "auto"}
    chosen = with_detection_sets(chosen, facts, free, gated=config.task_metric is None and not synthetic)
    chosen = {name: _at_threshold(task, config.tolerance_for(name).task_threshold) for name, task in chosen.items()}
    opened = {f.name for f in facts if f.open_lengths}
    chosen = {name: dataclasses.replace(task, open_lengths=True) if name in opened else task
              for name, task in chosen.items()}
    return _with_state(chosen)


def _at_threshold(task: OutputTask, threshold: float | None) -> OutputTask:
    """A mask's, binary decisions' or detections' task at the tolerance's threshold (task_threshold), when it sets
    one."""
    binary = task.kind in ("frames", "iou") and task.class_axis is None
    if threshold is None or not (binary or task.kind in ("detections", "head-detections", "packed-detections")):
        return task
    return dataclasses.replace(task, threshold=threshold,
                               rule=f"{task.rule.replace(' at 0.5', '')} at {threshold:g} (the output's tolerance)")



def _with_state(chosen: dict[str, OutputTask]) -> dict[str, OutputTask]:
    """Beside a language model's next-token logits, the outputs the rules left numeric and named as a cache
    (present.L.key) are the model's state: the next step reads them, and the logits that step makes judge them."""
    if not any(t.kind == "next-token" for t in chosen.values()):
        return chosen
    state = OutputTask("state", "a language model's cache: the next step reads it, and the logits it makes there judge "
                       "it (reported, not gated)")
    return {name: state if task.kind == "numeric" and _CACHE_NAMES.search(name) else task
            for name, task in chosen.items()}


def output_facts(model: ir.Model | None, names: Sequence[str], outputs: Sequence[np.ndarray],
                 samples: int) -> list[OutputFacts]:
    """Each output's facts from the float graph (None: from the values alone) and its first batch."""
    values = {v.name: v for v in model.graph.outputs} if model is not None else {}
    gathers = _table_gathers(model) if model is not None else []
    rows, tokens = _gathered_rows(gathers)
    widths = _read_widths(model) if model is not None else frozenset()
    fed = _token_fed(gathers)
    opset = model.opset_imports.get("", 13) if model is not None else 13
    input_dims = _input_dims(model) if model is not None else frozenset()
    facts = []
    for name, array in zip(names, outputs):
        array = np.asarray(array)
        axis = sample_axis(array, samples)
        moved = np.moveaxis(array, axis, 0) if array.ndim > 1 and axis else array
        producer, softmax_axis = _producer(values.get(name), moved.shape, opset)
        # An unnamed batch axis is no count of the data's: rows as many as the samples are the samples.
        open_rows = model is not None and axis == 0 and _rows_chosen_by_data(values.get(name), input_dims) \
            and (samples == 1 or moved.ndim == 0 or len(moved) != samples)
        open_lengths = producer in ("Loop", "Scan") or _later_dims_open(values.get(name), input_dims)
        facts.append(OutputFacts(name, producer, softmax_axis, moved[:FACT_SAMPLES] if moved.ndim > 1 else moved,
                                 rows, tokens, widths, name in fed, open_rows, len(moved) if moved.ndim else 0,
                                 open_lengths))
    return facts


def _input_dims(model: ir.Model) -> frozenset[str]:
    return frozenset(str(d) for v in model.graph.inputs if v.shape is not None for d in v.shape
                     if not isinstance(d, int))


def _later_dims_open(value: ir.Value | None, input_dims: frozenset[str]) -> bool:
    """An axis past the first is open under a name no input has (a decoder's steps), not a fixed size."""
    if value is None or value.shape is None:
        return False
    return any(not isinstance(d, int) and (d.value is None or str(d) not in input_dims) for d in list(value.shape)[1:])


def _rows_chosen_by_data(value: ir.Value | None, input_dims: frozenset[str]) -> bool:
    """The output's first axis is open under a name no input has (or none): a count the data decides."""
    if value is None or value.shape is None or not len(value.shape):
        return False
    first = value.shape[0]
    return not isinstance(first, int) and (first.value is None or str(first) not in input_dims)


def _producer(value: ir.Value | None, shape: tuple[int, ...], opset: int) -> tuple[str, int | None]:
    """(op type, a Softmax's axis when reached directly) for the value. Before opset 13 a Softmax normalizes over
    every axis from its own on, flattened: one decision per row of that block, which no per-axis measure reads — such
    an output is judged by its values, unless the axes after its own are all 1 (an old classifier's [N, 1000, 1, 1]
    scores: the block is that axis). An If's output is what both its branches make, when they agree (a
    voice-activity detector's Sigmoid inside an If on the sample rate)."""
    node, direct = None if value is None else value.producer(), True
    while node is not None and node.op_type in _PASS_THROUGH and node.inputs and node.inputs[0] is not None:
        direct = direct and node.op_type in ("Identity", "Cast")
        value = node.inputs[0]
        node = value.producer()
    if node is None:
        return "", None
    if node.op_type == "If" and node.domain in ("", "ai.onnx"):
        index = list(node.outputs).index(value)
        made = {_producer(a.value.outputs[index], shape, opset) for a in node.attributes.values()
                if a.type == ir.AttributeType.GRAPH}
        return made.pop() if len(made) == 1 else ("", None)
    axis, rank = None, len(shape)
    if node.op_type in ("Softmax", "LogSoftmax") and direct:
        attr = node.attributes.get("axis")
        axis = (-1 if opset >= 13 else 1) if attr is None else int(attr.value)
        axis = None if axis in (-1, rank - 1) or not -rank <= axis < rank else axis % rank
        if axis is not None and opset < 13 and any(n != 1 for n in shape[axis + 1:]):
            return "", None
    return node.op_type, axis


# A Gather from a constant 2-D table: (the node, the table's rows, the integer model input holding its ids or None).
_TableGather = tuple[ir.Node, int, str | None]


def _gathered_rows(gathers: list[_TableGather]) -> tuple[frozenset[int], dict[int, tuple[str, ...]]]:
    """Row counts of the constant 2-D tables a Gather indexes with computed ids (token embeddings), and the integer
    model inputs that are those ids (input_ids), seen through Identity / Cast / Reshape (_table_gathers)."""
    rows, tokens = set(), {}
    for _, count, ids in gathers:
        rows.add(count)
        if ids is not None:
            tokens[count] = tuple(dict.fromkeys((*tokens.get(count, ()), ids)))
    return frozenset(rows), tokens


def _table_gathers(model: ir.Model) -> list[_TableGather]:
    """Every Gather from a constant 2-D table, its ids seen through Identity / Cast / Reshape (_IDS_THROUGH)."""
    found = []
    for node in model.graph.all_nodes():
        if node.op_type not in ("Gather", "GatherBlockQuantized") or len(node.inputs) < 2 or node.inputs[0] is None:
            continue
        shape = _constant_shape(node.inputs[0])
        if shape is not None and len(shape) == 2:
            ids = node.inputs[1]
            while ids is not None and ids.producer() is not None and ids.producer().op_type in _IDS_THROUGH:
                ids = ids.producer().inputs[0]
            given = ids is not None and ids.is_graph_input() and ids.dtype is not None and ids.dtype.is_integer()
            found.append((node, shape[0], ids.name if given else None))
    return found


def _token_fed(gathers: list[_TableGather]) -> frozenset[str]:
    """The graph outputs computed from token ids: downstream of a Gather of a table by an integer model input."""
    todo = [node for node, _, ids in gathers if ids is not None]
    seen = set(todo)
    while todo:
        for value in todo.pop().outputs:
            for user, _ in value.uses():
                if user not in seen:
                    seen.add(user)
                    todo.append(user)
    return frozenset(v.name for node in seen for v in node.outputs if v.is_graph_output())


_IDS_THROUGH = frozenset({"Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})


def _read_widths(model: ir.Model) -> frozenset[int]:
    """The input widths (K) that at least two MatMul / Gemm of a constant 2-D weight read: the widths of the
    network's hidden states, never of a classifier head's scores, which one product writes and none reads."""
    counts: collections.Counter[int] = collections.Counter()
    for node in model.graph.all_nodes():
        if node.op_type not in ("MatMul", "Gemm") or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
            continue
        shape = None if node.inputs[1] is None else _constant_shape(node.inputs[1])
        if shape is not None and len(shape) == 2:
            transposed = node.op_type == "Gemm" and node.attributes.get_int("transB", 0)
            counts[shape[1] if transposed else shape[0]] += 1
    return frozenset(width for width, count in counts.items() if count >= 2)


def _constant_shape(value: ir.Value) -> tuple[int, ...] | None:
    """The shape of a constant, or of a constant seen through Identity / Cast / Transpose (onnxruntime-genai's builder
    gathers the embeddings from the transposed lm_head weight it shares with them)."""
    if value.const_value is not None:
        return tuple(int(d) for d in value.const_value.shape)
    node = value.producer()
    if node is None or node.op_type not in ("Identity", "Cast", "Transpose") or node.inputs[0] is None:
        return None
    shape = _constant_shape(node.inputs[0])
    if shape is None or node.op_type != "Transpose":
        return shape
    perm = node.attributes["perm"].value if "perm" in node.attributes else list(range(len(shape)))[::-1]
    return tuple(shape[i] for i in perm)


def measured(task: OutputTask | None) -> OutputTask | None:
    """The task a metrics accumulator measures (none for a numeric output)."""
    return task if task is not None and task.kind in MEASURES else None


def accumulator(task: OutputTask | None) -> MetricsAccumulator:
    """The metrics accumulator of an output with this task: its measure, and whether its lengths are the data's."""
    return MetricsAccumulator(measured(task), open_lengths=task is not None and task.open_lengths)


def measured_kind(task: OutputTask | None) -> str | None:
    """The kind of a measured task; None for a numeric output or none."""
    return None if measured(task) is None else task.kind


def language_model_logits(model: ir.Model) -> tuple[str, int, str] | None:
    """(output, vocabulary size, token input) of a decoder language model, read off the graph alone: an output
    [batch, sequence, V] whose V is the row count of a table that one integer input indexes (input_ids). None for
    any other model; an output as wide as what the model's products read is a hidden state, whatever table has as
    many rows (an encoder's position table)."""
    rows, tokens = _gathered_rows(_table_gathers(model))
    widths = _read_widths(model)
    for output in model.graph.outputs:
        shape = output.shape
        if shape is None or len(shape) != 3 or not isinstance(shape[-1], int) or int(shape[-1]) in widths:
            continue
        inputs = tokens.get(int(shape[-1]), ())
        if len(inputs) == 1:
            return output.name, int(shape[-1]), inputs[0]
    return None


def may_hold_to_a_share(model: ir.Model, config: VerifyConfig) -> bool:
    """Whether an output may be held to a task share (top-1, frames, a mask, detections), a bar that only enough
    samples show (numerics.interval), read off the graph before any run: the default hold-back of verification
    samples (data.holdout) is sized before calibrating. False where every output is numeric by its tolerance,
    a float output named as a representation that no earlier rule reads otherwise (hidden states, embeddings), or a
    language model's logits and cache (the perplexity ratio judges them): those keep their calibration samples."""
    if config.task_metric is not None:
        return True  # your function may return decisions, judged as a share
    if language_model_logits(model) is not None:
        return False
    opset = model.opset_imports.get("", 13)
    for value in model.graph.outputs:
        kind = config.tolerance_for(value.name).task
        said = "" if GENERIC_NAMES.match(value.name) else value.name
        producer, _ = _producer(value, tuple(value.shape or ()), opset)
        numeric_by_name = (kind == "auto" and (value.dtype is None or value.dtype.is_floating_point())
                           and _REPRESENTATION.search(said) and not _COORDINATE_NAMES.search(said)
                           and producer not in ("Sigmoid", "HardSigmoid", "Loop", "Scan"))
        if kind != "numeric" and not numeric_by_name:
            return True
    return False
