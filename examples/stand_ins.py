"""Small stand-ins the examples make when you give them no model of your own: a BERT-like encoder with its
tokenizer.json and sentences, a CNN image encoder with a folder of photos, a decoder with a KV cache and token
windows. Seeded, built in a second; the encoder, the tokenizer and the decoder are the test suite's
(tests/data/data_models.py, tests/e2e/decoder_model.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["text_encoder", "image_encoder", "kv_decoder_with_windows"]

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "data"), str(TESTS / "e2e")]


def text_encoder(folder: Path) -> tuple[Path, Path]:
    """encoder.onnx with tokenizer.json beside it (a word-level BERT tokenizer), and sentences.txt: 200 sentences,
    one a line."""
    from data_models import sentences, tiny_encoder, word_tokenizer

    model = folder / "encoder.onnx"
    onnx.save(tiny_encoder(), model)
    word_tokenizer(folder / "tokenizer.json")
    text = folder / "sentences.txt"
    text.write_text("\n".join(sentences(np.random.default_rng(0), 200)) + "\n")
    return model, text


def image_encoder(folder: Path, count: int = 40) -> tuple[Path, Path]:
    """cnn.onnx (image float32 [batch, 3, 64, 64] → Conv, Relu, Conv, Relu, average pool, Gemm → embedding
    [batch, 32]) and a folder of `count` PNG photos of assorted sizes (smooth colour gradients with noise)."""
    from data_models import photos

    rng = np.random.default_rng(0)
    weights = {"k1": rng.normal(0, 0.3, (16, 3, 3, 3)), "b1": rng.normal(0, 0.1, 16),
               "k2": rng.normal(0, 0.1, (32, 16, 3, 3)), "b2": rng.normal(0, 0.1, 32),
               "fc": rng.normal(0, 0.2, (32, 32)), "fcb": rng.normal(0, 0.1, 32)}
    n = helper.make_node
    nodes = [n("Conv", ["image", "k1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "k2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]), n("Relu", ["c2"], ["r2"]),
             n("GlobalAveragePool", ["r2"], ["g"]), n("Flatten", ["g"], ["f"]),
             n("Gemm", ["f", "fc", "fcb"], ["embedding"])]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 64, 64])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 32])],
        [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()])
    model = folder / "cnn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), model)
    sizes = [(int(w), int(h)) for w, h in rng.integers(48, 160, (count, 2))]
    photos(folder / "photos", rng, sizes, suffix=".png")
    return model, folder / "photos"


def kv_decoder_with_windows(folder: Path) -> tuple[Path, Path, Path]:
    """decoder.onnx (two layers, a KV cache, vocabulary 96), calib.npz (48 windows of 16 tokens) and dev.npz (16
    other windows): token ids the decoder itself would write, so that its perplexity on them means something."""
    from decoder_model import kv_decoder, sampled_windows

    model = kv_decoder()
    path = folder / "decoder.onnx"
    onnx.save(model, path)
    rng = np.random.default_rng(0)
    np.savez(folder / "calib.npz", **sampled_windows(model, rng, 48, 16))
    np.savez(folder / "dev.npz", **sampled_windows(model, rng, 16, 16))
    return path, folder / "calib.npz", folder / "dev.npz"
