"""Text as calibration data: sentences for an encoder, token windows for a decoder, tokenized with a tokenizer.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnxq
from onnxq.cli.main import main
from onnxq.config import CalibrationConfig, DataConfig
from onnxq.data import ReadData, resolve_source, source_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from data_models import WORDS, sentences, tiny_encoder, word_tokenizer  # noqa: E402
from decoder_model import HEAD_DIM, HEADS, kv_decoder  # noqa: E402

tokenizers = pytest.importorskip("tokenizers", reason="the text reader needs onnxq[text]")

ANY_SPEED = {"verify": {"measure_speed": False, "sensitivity_samples": 0}}


@pytest.fixture
def encoder(tmp_path):
    path = tmp_path / "encoder.onnx"
    onnx.save(tiny_encoder(), path)
    return path


@pytest.fixture
def notes(tmp_path, rng):
    """20 sentences as .jsonl, their text under "text" (and a label beside it)."""
    path = tmp_path / "notes.jsonl"
    path.write_text("".join(json.dumps({"text": s, "label": i % 2}) + "\n" for i, s in enumerate(sentences(rng, 20))))
    return path


def _opened(model_path: Path, source: Path, decoder: bool = False, batch_size: int = 8, **data) -> ReadData:
    model = source_model(ir.load(model_path), CalibrationConfig(batch_size=batch_size), decoder, model_path)
    return resolve_source(source, model, DataConfig(**data), "calibration")


def test_an_encoder_gets_each_batch_padded_to_its_longest_with_the_file_s_own_padding_off(encoder, notes, tmp_path):
    """The tokenizer file pads every sentence to 16 (as MiniLM's pads to 128): the reader pads each batch to its own
    longest instead, attention_mask 1 over the tokens."""
    tokenizer = word_tokenizer(tmp_path / "tok.json", fixed_padding=16)
    plain = tokenizers.Tokenizer.from_file(str(tokenizer))
    plain.no_padding()
    texts = [json.loads(line)["text"] for line in notes.read_text().splitlines()]
    expected = [e.ids for e in plain.encode_batch(texts)]
    batches = list(_opened(encoder, notes, tokenizer=str(tokenizer))())
    assert [len(b["input_ids"]) for b in batches] == [8, 8, 4]
    for start, batch in zip(range(0, 20, 8), batches):
        rows = expected[start:start + 8]
        assert batch["input_ids"].shape[1] == max(map(len, rows)) < 16
        for got, mask, want in zip(batch["input_ids"], batch["attention_mask"], rows):
            assert got[:len(want)].tolist() == want and got[0] == 2 and got[len(want) - 1] == 3  # [CLS] … [SEP]
            assert mask.tolist() == [1] * len(want) + [0] * (len(got) - len(want))
            assert not got[len(want):].any()  # [PAD] is 0
        assert not batch["token_type_ids"].any()


def test_max_length_cuts_a_sentence_and_keeps_its_special_tokens(encoder, notes, tmp_path):
    tokenizer = word_tokenizer(tmp_path / "tok.json")
    batches = list(_opened(encoder, notes, tokenizer=str(tokenizer), max_length=5)())
    ids = np.concatenate([b["input_ids"] for b in batches])
    lengths = [min(len(json.loads(line)["text"].split()) + 2, 5) for line in notes.read_text().splitlines()]
    assert ids.shape == (20, 5) and sum(n == 5 for n in lengths) == 19  # one sentence of 2 words is left whole
    assert all(row[0] == 2 and row[n - 1] == 3 and not row[n:].any() for row, n in zip(ids, lengths))


def test_the_data_command_writes_the_inputs_the_encoder_takes(encoder, notes, tmp_path, capsys):
    tokenizer = word_tokenizer(tmp_path / "tokenizer.json")  # beside the model: found without --tokenizer
    out = tmp_path / "data.npz"
    assert main(["data", str(encoder), str(notes), "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    plain = tokenizers.Tokenizer.from_file(str(tokenizer))
    texts = [json.loads(line)["text"] for line in notes.read_text().splitlines()]
    encoded = [e.ids for e in plain.encode_batch(texts)]
    width = max(map(len, encoded))  # an .npz holds one shape: every sentence padded to the longest
    data = np.load(out)
    assert sorted(data) == ["attention_mask", "input_ids", "token_type_ids"]
    assert data["input_ids"].shape == (20, width) and data["attention_mask"].sum() == sum(map(len, encoded))
    assert [row[:len(e)].tolist() for row, e in zip(data["input_ids"], encoded)] == encoded
    assert printed[0].startswith(f"onnxq: wrote {out}: 20 samples, from calibration text notes.jsonl (20 samples), "
                                 f"tokenized with {tokenizer} (found beside the model): sentences for an encoder")
    assert printed[1:] == [
        f"  input_ids       int64 [20, {width}]",
        f"  attention_mask  int64 [20, {width}]  made: 1 over each sentence's tokens, 0 over the padding",
        f"  token_type_ids  int64 [20, {width}]  made: the tokenizer's type ids (0 for one sentence)",
        "quantize --calib would calibrate on 18 and verify on 2 held back (every 10th, at most 64: no output judged "
        "by a share of answers); with --verify-data it calibrates on all"]


def test_text_calibrates_an_encoder_from_the_api_and_the_command_line(encoder, notes, tmp_path, capsys):
    tokenizer = word_tokenizer(tmp_path / "tok.json")
    config = {"data": {"tokenizer": str(tokenizer)}, **ANY_SPEED}
    report = onnxq.quantize(encoder, notes, config=config).report
    assert report.passed and report.mode == "static" and len(report.quantized) == 2
    assert any(n.startswith("calibration text notes.jsonl (20 samples)") for n in report.notes)
    # The same data through the .npz the data command writes, and the text directly: one calibration.
    assert main(["data", str(encoder), str(notes), "--tokenizer", str(tokenizer), "-o", str(tmp_path / "d.npz")]) == 0
    direct = onnxq.calibrate(encoder, notes, config={"data": {"tokenizer": str(tokenizer)}})
    via_npz = onnxq.calibrate(encoder, tmp_path / "d.npz")
    assert direct.samples == via_npz.samples == 20
    for name, observer in direct.observers.items():  # padding differs (per batch vs to the longest): close ranges
        np.testing.assert_allclose(observer.range(), via_npz.observers[name].range(), rtol=0.05, atol=0.05)
    capsys.readouterr()
    code = main([str(encoder), "--calib", str(notes), "--tokenizer", str(tokenizer), "-o", str(tmp_path / "q.onnx"),
                 "--no-speed", "--no-sensitivity", "-q"])
    assert code == 0 and "within tolerance" in capsys.readouterr().out


def test_text_as_verification_data_from_the_verify_command(encoder, notes, tmp_path, capsys):
    tokenizer = word_tokenizer(tmp_path / "tok.json")
    quantized = tmp_path / "q.onnx"
    onnxq.quantize(encoder, notes, output=quantized, config={"data": {"tokenizer": str(tokenizer)}, **ANY_SPEED})
    assert main(["verify", str(encoder), str(quantized), "--data", str(notes), "--tokenizer", str(tokenizer)]) == 0
    assert "result: within tolerance" in capsys.readouterr().out


@pytest.mark.parametrize("layout", ["txt", "folder", "jsonl field"])
def test_text_a_line_a_sample_a_file_a_sample_and_another_field(encoder, tmp_path, rng, layout):
    texts = sentences(rng, 11)
    if layout == "txt":
        source, extra = tmp_path / "notes.txt", {}
        source.write_text("\n".join(texts[:5]) + "\n\n" + "\n".join(texts[5:]) + "\n")  # a blank line is no sample
    elif layout == "folder":
        source, extra = tmp_path / "docs", {}
        source.mkdir()
        for i, text in enumerate(texts):
            (source / f"{i:02d}.txt").write_text(text.replace(" ", "\n", 1))  # a file is a sample, lines and all
    else:
        source, extra = tmp_path / "notes.jsonl", {"field": "sentence"}
        source.write_text("".join(json.dumps({"sentence": t}) + "\n" for t in texts))
    read = _opened(encoder, source, tokenizer=str(word_tokenizer(tmp_path / "tok.json")), **extra)
    assert read.opened.samples == 11
    first = next(iter(read()))["input_ids"][0]
    assert first[1:1 + len(texts[0].split())].tolist() == [WORDS.index(w) + 4 for w in texts[0].split()]


@pytest.fixture
def decoder(tmp_path):
    path = tmp_path / "decoder.onnx"
    onnx.save(kv_decoder(), path)
    return path


def test_a_decoder_gets_windows_cut_from_the_text_end_to_end(decoder, tmp_path, rng, capsys):
    tokenizer = word_tokenizer(tmp_path / "tok.json", special=False)
    texts = sentences(rng, 40)
    source = tmp_path / "book.txt"
    source.write_text("\n".join(texts) + "\n")
    stream = [WORDS.index(w) + 4 for text in texts for w in text.split()]
    out = tmp_path / "windows.npz"
    assert main(["data", str(decoder), str(source), "--tokenizer", str(tokenizer), "--window", "16", "-o",
                 str(out)]) == 0
    count = len(stream) // 16
    data = np.load(out)
    assert data["input_ids"].tolist() == np.reshape(stream[:count * 16], (count, 16)).tolist()
    assert (data["attention_mask"] == 1).all() and data["position_ids"].tolist() == [list(range(16))] * count
    assert data["past_key_values.0.key"].shape == (count, HEADS, 0, HEAD_DIM)
    printed = capsys.readouterr().out.splitlines()
    assert f"{count} windows of 16 tokens for a decoder, cut from {len(stream)} tokens end to end" in printed[0]
    assert printed[1:4] == [f"  input_ids                int64 [{count}, 16]",
                            f"  attention_mask           int64 [{count}, 16]  made: ones over the tokens",
                            f"  position_ids             int64 [{count}, 16]  made: from the attention mask "
                            "(running count - 1)"]


def test_text_calibrates_a_decoder(decoder, tmp_path, rng):
    tokenizer = word_tokenizer(tmp_path / "tok.json", special=False)
    source = tmp_path / "book.txt"
    source.write_text("\n".join(sentences(rng, 120)) + "\n")
    config = {"data": {"tokenizer": str(tokenizer), "window": 16}, "smooth": 0.5, **ANY_SPEED}
    report = onnxq.quantize(decoder, source, config=config).report
    assert report.mode == "static" and len(report.quantized) == 13  # q/k/v/o/up/down × 2 layers, and lm_head
    assert any("windows of 16 tokens for a decoder" in n for n in report.notes)
    assert any(n.startswith("inputs the data leaves out, made as a decoder's first step takes them: 4 inputs "
                            "empty (past length 0)") for n in report.notes)
    assert report.passed
