"""Data that cannot feed the model: one line naming the problem and the fix, exit 2, nothing written, the input
unchanged — from python -m onnxq data and from the main command alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxq.cli.main import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from data_models import cnn, photos, sentences, tiny_encoder, word_tokenizer  # noqa: E402
from decoder_model import kv_decoder  # noqa: E402

pytest.importorskip("tokenizers", reason="the text reader needs onnxq[text]")
pytest.importorskip("PIL", reason="the image reader needs onnxq[vision]")


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(argv: list[str], folder: Path, capsys) -> str:
    """The one line the command printed, after checking exit 2 and that nothing in the folder changed."""
    before = _tree(folder)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.endswith("\n") and err.count("\n") == 1, (code, out, err)
    assert _tree(folder) == before
    return err.removeprefix("onnxq: error: ").rstrip("\n")


@pytest.fixture
def work(tmp_path, rng):
    onnx.save(tiny_encoder(), tmp_path / "encoder.onnx")
    onnx.save(cnn(), tmp_path / "cnn.onnx")
    onnx.save(cnn(size=None), tmp_path / "open.onnx")
    (tmp_path / "notes.txt").write_text("\n".join(sentences(rng, 8)) + "\n")
    word_tokenizer(tmp_path / "tok.json")
    return tmp_path


@pytest.mark.parametrize("command", ["data", "quantize"])
def test_text_without_a_tokenizer(work, capsys, command):
    args = [str(work / "encoder.onnx"), str(work / "notes.txt")]
    argv = ["data", *args, "-o", str(work / "d.npz")] if command == "data" else [args[0], "--calib", args[1]]
    assert _refused(argv, work, capsys) == (
        "calibration data is text, and no tokenizer was given — pass --tokenizer tokenizer.json (the model's Hugging "
        "Face tokenizer file; TOML [data] tokenizer), or put tokenizer.json beside the model")


def test_text_without_the_tokenizers_package(work, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as where onnxq[text] is not installed
    argv = ["data", str(work / "encoder.onnx"), str(work / "notes.txt"), "--tokenizer", str(work / "tok.json"), "-o",
            str(work / "d.npz")]
    assert _refused(argv, work, capsys) == (
        "calibration data is text: reading it needs the tokenizers package — pip install tokenizers (onnxq's text extra)")


def test_images_without_pillow(work, capsys, monkeypatch, rng):
    photos(work / "photos", rng, [(32, 32)])
    monkeypatch.setitem(sys.modules, "PIL", None)
    argv = ["data", str(work / "cnn.onnx"), str(work / "photos"), "-o", str(work / "d.npz")]
    assert _refused(argv, work, capsys) == (
        "calibration data is images: reading them needs Pillow — pip install pillow (onnxq's vision extra)")


@pytest.mark.parametrize("command", ["data", "quantize"])
def test_an_image_that_does_not_decode_is_named(work, capsys, rng, command):
    photos(work / "photos", rng, [(32, 32)] * 3)
    (work / "photos" / "photo01.png").write_bytes(b"not an image at all")
    argv = (["data", str(work / "cnn.onnx"), str(work / "photos"), "-o", str(work / "d.npz")] if command == "data"
            else [str(work / "cnn.onnx"), "--calib", str(work / "photos")])
    line = _refused(argv, work, capsys)
    assert line.startswith(f"calibration image {work / 'photos' / 'photo01.png'} cannot be decoded (cannot identify "
                           "image file")
    assert line.endswith(") — remove it or save it as PNG or JPEG")


def test_text_shorter_than_a_window(work, capsys):
    onnx.save(kv_decoder(), work / "decoder.onnx")
    word_tokenizer(work / "plain.json", special=False)
    (work / "short.txt").write_text("the cat sat on the mat\n")
    argv = ["data", str(work / "decoder.onnx"), str(work / "short.txt"), "--tokenizer", str(work / "plain.json"),
            "-o", str(work / "d.npz")]
    assert _refused(argv, work, capsys) == (
        "calibration text makes 6 tokens, fewer than one window of 128 — add text, or pass --window 6")


def test_images_of_different_sizes_for_an_open_size_need_size(work, capsys, rng):
    photos(work / "photos", rng, [(40, 30), (40, 30), (64, 48)])
    argv = ["data", str(work / "open.onnx"), str(work / "photos"), "-o", str(work / "d.npz")]
    assert _refused(argv, work, capsys) == (
        "calibration images differ in size (photo00.png 30x40, photo02.png 48x64: HxW) and the model's input image "
        "leaves height and width open — pass --size 224 (or --size HxW, TOML [data] size) to resize them to one")


def test_a_size_the_model_does_not_take(work, capsys, rng):
    photos(work / "photos", rng, [(40, 30)])
    argv = ["data", str(work / "cnn.onnx"), str(work / "photos"), "--size", "64", "-o", str(work / "d.npz")]
    assert _refused(argv, work, capsys) == ("the model fixes image's size at 32x32; --size 64x64 cannot feed it — "
                                            "drop --size")


@pytest.mark.parametrize("make,line", [
    (lambda w: (w / "empty").mkdir() or w / "empty",
     "calibration folder {w}/empty holds no data onnxq reads — give .npz (arrays keyed by input name), a folder of "
     ".npz or <input>.npy, .npy (one array: a one-input model's samples), .txt (a sample a line), .jsonl, a folder "
     "of .txt (with --tokenizer), images (.png, .jpg, .jpeg, .bmp, …: a file, a folder or a pattern)"),
    (lambda w: (w / "data.csv").write_text("1,2\n") and w / "data.csv",
     "calibration data {w}/data.csv: onnxq does not read .csv — give .npz (arrays keyed by input name), a folder of "
     ".npz or <input>.npy, .npy (one array: a one-input model's samples), .txt (a sample a line), .jsonl, a folder "
     "of .txt (with --tokenizer), images (.png, .jpg, .jpeg, .bmp, …: a file, a folder or a pattern)"),
    (lambda w: w / "none" / "*.jpg",
     "calibration data pattern {w}/none/*.jpg matches no file — give a folder of images or a pattern of image files "
     "(.png, .jpg, .jpeg, .bmp, .gif, .tif, .tiff, .webp, .ppm, .pgm)"),
])
def test_an_empty_folder_an_unknown_suffix_and_a_pattern_that_matches_nothing(work, capsys, make, line):
    source = make(work)
    assert _refused(["data", str(work / "cnn.onnx"), str(source), "-o", str(work / "d.npz")], work, capsys) == \
        line.format(w=work)


def test_a_jsonl_line_without_the_field(work, capsys):
    (work / "notes.jsonl").write_text(json.dumps({"text": "the cat"}) + "\n" + json.dumps({"body": "a dog"}) + "\n")
    argv = ["data", str(work / "encoder.onnx"), str(work / "notes.jsonl"), "--tokenizer", str(work / "tok.json"),
            "-o", str(work / "d.npz")]
    assert _refused(argv, work, capsys) == (f"calibration file {work / 'notes.jsonl'} line 2 has no text field 'text' "
                                            "(it has: body) — pass --field NAME (TOML [data] field)")


def test_one_npy_for_a_model_of_several_inputs(work, capsys):
    np.save(work / "ids.npy", np.zeros((4, 8), np.int64))
    assert _refused([str(work / "encoder.onnx"), "--calib", str(work / "ids.npy")], work, capsys) == (
        f"calibration file {work / 'ids.npy'} is one array but the model has 3 inputs (input_ids (int64 [batch, "
        "sequence]), attention_mask (int64 [batch, sequence]), token_type_ids (int64 [batch, sequence])) — put one "
        "<input name>.npy per input in a folder and pass the folder, or save them together with numpy.savez")


def test_images_for_a_text_model_and_text_for_an_image_model(work, capsys, rng):
    photos(work / "photos", rng, [(32, 32)])
    assert _refused(["data", str(work / "encoder.onnx"), str(work / "photos"), "-o", str(work / "d.npz")], work,
                    capsys).startswith("calibration data is images, which feed a model of one image input; this model "
                                       "takes input_ids (int64 [batch, sequence]), attention_mask")
    assert _refused(["data", str(work / "cnn.onnx"), str(work / "notes.txt"), "--tokenizer", str(work / "tok.json"),
                     "-o", str(work / "d.npz")], work, capsys) == (
        "calibration data is text but the model has no input of token ids (integers [batch, sequence], e.g. "
        "input_ids); its inputs are: image (float32 [batch, 3, 32, 32]) — give an .npz keyed by input name")


@pytest.mark.parametrize("flag,line", [
    (["--size", "big"], "--size 'big': give S (e.g. 224) or HxW (e.g. 256x192)"),
    (["--mean", "0.5,x"], "--mean '0.5,x': give one number or three, comma-separated (e.g. 0.485,0.456,0.406)"),
    (["--mean", "1,2"], "data.mean [1.0, 2.0] (--mean): give one finite number, or one per channel (3)"),
    (["--std", "0"], "data.std [0.0] (--std): each must be > 0"),
    (["--window", "1"], "data.window (--window) = 1 is outside its range [2, 1000000]"),
    (["--input-map", "x"], "--input-map 'x': expected INPUT=ARRAY, e.g. x=x_train"),
])
def test_bad_source_flags(work, capsys, flag, line):
    assert _refused(["data", str(work / "cnn.onnx"), str(work / "notes.txt"), *flag, "-o", str(work / "d.npz")], work,
                    capsys) == line
