"""Small models and files for the data readers' tests, built in memory: a BERT-like encoder (input_ids,
attention_mask, token_type_ids), CNNs taking images NCHW / NHWC, colour or grayscale, fixed or open in size, and
tokenizer.json files made with the tokenizers package."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["tiny_encoder", "cnn", "word_tokenizer", "WORDS", "sentences", "photos"]

WORDS = ("the a cat dog sat on mat and ran far away quick brown fox jumps over lazy river bank money "
         "market rose fell today news report said year city team game won lost play home road").split()


def tiny_encoder(seed: int = 0, vocab: int = 64, width: int = 32, fixed_length: int | None = None) -> onnx.ModelProto:
    """input_ids, attention_mask, token_type_ids int64 [batch, sequence] → two MatMul layers → last_hidden_state
    [batch, sequence, width] and the masked mean sentence_embedding [batch, width]."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("words", rng.normal(0, 1, (vocab, width))), ("types", rng.normal(0, 1, (2, width))),
        ("w1", rng.normal(0, width ** -0.5, (width, width))), ("w2", rng.normal(0, width ** -0.5, (width, width))))]
    inits += [numpy_helper.from_array(np.array([-1], np.int64), "last"),
              numpy_helper.from_array(np.array([1], np.int64), "tokens_axis")]
    nodes = [helper.make_node("Gather", ["words", "input_ids"], ["w"]),
             helper.make_node("Gather", ["types", "token_type_ids"], ["t"]),
             helper.make_node("Add", ["w", "t"], ["h0"]),
             helper.make_node("MatMul", ["h0", "w1"], ["h1"]), helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["last_hidden_state"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["m", "last"], ["m3"]),
             helper.make_node("Mul", ["last_hidden_state", "m3"], ["masked"]),
             helper.make_node("ReduceSum", ["masked", "tokens_axis"], ["summed"], keepdims=0),
             helper.make_node("ReduceSum", ["m", "tokens_axis"], ["count"], keepdims=1),
             helper.make_node("Div", ["summed", "count"], ["sentence_embedding"])]
    ids = ["batch", fixed_length or "sequence"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ids)
              for n in ("input_ids", "attention_mask", "token_type_ids")]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*ids, width]),
               helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", width])]
    graph = helper.make_graph(nodes, "tiny_encoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def cnn(seed: int = 0, channels: int = 3, size: tuple | None = (32, 32), channels_last: bool = False,
        dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """image [batch, C, H, W] (or [batch, H, W, C]) → Conv+Relu → MaxPool → Conv+Relu → GlobalAveragePool → Gemm →
    logits [batch, 10]; size None: height and width left open."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("k1", rng.normal(0, 0.3, (8, channels, 3, 3))), ("b1", rng.normal(0, 0.1, 8)),
        ("k2", rng.normal(0, 0.2, (16, 8, 3, 3))), ("b2", rng.normal(0, 0.1, 16)),
        ("fc", rng.normal(0, 0.3, (16, 10))), ("fcb", rng.normal(0, 0.1, 10)))]
    nodes = [helper.make_node("Transpose", ["image"], ["x"], perm=[0, 3, 1, 2])] if channels_last else []
    if dtype != TensorProto.FLOAT:
        nodes.append(helper.make_node("Cast", ["x" if channels_last else "image"], ["xf"], to=TensorProto.FLOAT))
    first = "xf" if dtype != TensorProto.FLOAT else "x" if channels_last else "image"
    nodes += [helper.make_node("Conv", [first, "k1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c1"], ["r1"]), helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2],
                                                                          strides=[2, 2]),
              helper.make_node("Conv", ["p1", "k2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c2"], ["r2"]), helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"])]
    height, width = size if size is not None else ("height", "width")
    shape = ["batch", height, width, channels] if channels_last else ["batch", channels, height, width]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("image", dtype, shape)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def word_tokenizer(path: Path, special: bool = True, fixed_padding: int | None = None) -> Path:
    """A WordLevel tokenizer.json over WORDS: [CLS] text [SEP] when special (BERT's template), padding to a fixed
    length as the file's own when fixed_padding (MiniLM's file pads to 128)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    if special:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    if fixed_padding:
        tokenizer.enable_padding(length=fixed_padding, pad_id=0, pad_token="[PAD]")
        tokenizer.enable_truncation(fixed_padding)
    tokenizer.save(str(path))
    return path


def sentences(rng: np.random.Generator, count: int, longest: int = 12) -> list[str]:
    """Seeded sentences of WORDS, 2 … longest words each."""
    return [" ".join(rng.choice(WORDS, int(rng.integers(2, longest + 1)))) for _ in range(count)]


def photos(folder: Path, rng: np.random.Generator, sizes: list[tuple[int, int]], suffix: str = ".png") -> list[Path]:
    """Real image files (PNG / JPEG, Pillow): smooth colour gradients with noise, one per (width, height)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i, (width, height) in enumerate(sizes):
        y, x = np.mgrid[0:height, 0:width]
        base = np.stack([x * 255 / max(width - 1, 1), y * 255 / max(height - 1, 1),
                         (x + y) * 127 / max(width + height - 2, 1)], axis=-1)
        pixels = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
        files.append(folder / f"photo{i:02d}{suffix}")
        Image.fromarray(pixels).save(files[-1])
    return files
