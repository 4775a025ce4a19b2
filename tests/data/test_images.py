"""Images as calibration data: real PNG / JPEG files, decoded a batch at a time into the model's layout."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto

import onnxq
from onnxq.cli.main import main
from onnxq.config import CalibrationConfig, DataConfig
from onnxq.data import resolve_source, source_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_models import cnn, photos  # noqa: E402

Image = pytest.importorskip("PIL.Image", reason="the image reader needs onnxq[vision]")

MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


def _save(tmp_path: Path, model: onnx.ModelProto, name: str = "cnn.onnx") -> Path:
    onnx.save(model, tmp_path / name)
    return tmp_path / name


def _batches(model_path: Path, source: Path | str, batch_size: int = 8, **data) -> list[dict]:
    model = source_model(ir.load(model_path), CalibrationConfig(batch_size=batch_size), False, model_path)
    return list(resolve_source(source, model, DataConfig(**data), "calibration")())


def test_images_of_the_model_s_size_are_normalized_as_imagenet_into_nchw(tmp_path, rng):
    files = photos(tmp_path / "photos", rng, [(32, 32)] * 10)
    batches = _batches(_save(tmp_path, cnn()), tmp_path / "photos")
    assert [b["image"].shape for b in batches] == [(8, 3, 32, 32), (2, 3, 32, 32)]
    pixels = np.asarray(Image.open(files[9]), np.float32)  # PNG: lossless
    expected = ((pixels / 255 - MEAN) / STD).transpose(2, 0, 1)
    np.testing.assert_allclose(batches[1]["image"][1], expected, atol=1e-6)


@pytest.mark.parametrize("preset,low,high", [("unit", 0.0, 1.0), ("signed", -1.0, 1.0), ("raw", 0.0, 255.0)])
def test_normalization_presets(tmp_path, rng, preset, low, high):
    files = photos(tmp_path / "photos", rng, [(32, 32)])
    pixels = np.asarray(Image.open(files[0]), np.float32).transpose(2, 0, 1)
    got = _batches(_save(tmp_path, cnn()), tmp_path / "photos", normalize=preset)[0]["image"][0]
    np.testing.assert_allclose(got, low + pixels / 255 * (high - low), atol=1e-5)


def test_mean_std_scale_and_bgr_in_the_model_s_channel_order(tmp_path, rng):
    """Caffe's convention: BGR pixels 0-255 less a per-channel mean, in the model's (BGR) order."""
    files = photos(tmp_path / "photos", rng, [(32, 32)])
    pixels = np.asarray(Image.open(files[0]), np.float32)[..., ::-1].transpose(2, 0, 1)
    mean = np.array([103.94, 116.78, 123.68], np.float32)
    got = _batches(_save(tmp_path, cnn()), tmp_path / "photos", channel_order="bgr", scale=1.0,
                   mean=tuple(map(float, mean)), std=(58.0,))[0]["image"][0]
    np.testing.assert_allclose(got, (pixels - mean[:, None, None]) / 58.0, rtol=1e-5, atol=1e-5)


def test_nhwc_grayscale_and_uint8_inputs_take_their_own_layout_and_values(tmp_path, rng):
    files = photos(tmp_path / "photos", rng, [(20, 20)])
    gray = np.asarray(Image.open(files[0]).convert("L"), np.float32)
    nhwc = _batches(_save(tmp_path, cnn(channels=1, size=(20, 20), channels_last=True)), files[0], normalize="unit")
    np.testing.assert_allclose(nhwc[0]["image"][0], gray[..., None] / 255, atol=1e-6)
    raw = _batches(_save(tmp_path, cnn(size=(20, 20), dtype=TensorProto.UINT8)), files[0])[0]["image"]
    assert raw.dtype == np.uint8 and raw[0].tolist() == np.asarray(Image.open(files[0])).transpose(2, 0, 1).tolist()


def test_an_image_is_scaled_by_its_shorter_side_then_cropped_around_the_centre(tmp_path):
    """64 wide × 32 high, red | green | green | blue by quarters, into 16 × 16: scaled to 32 × 16, the centre 16
    columns are the green half — a squashing resize would keep the red and blue quarters."""
    pixels = np.zeros((32, 64, 3), np.uint8)
    pixels[:, :16, 0], pixels[:, 16:48, 1], pixels[:, 48:, 2] = 255, 255, 255
    (tmp_path / "photos").mkdir()
    Image.fromarray(pixels).save(tmp_path / "photos" / "bands.png")
    got = _batches(_save(tmp_path, cnn(size=(16, 16))), tmp_path / "photos", normalize="raw")[0]["image"][0]
    inner = got[:, :, 1:15]  # bilinear scaling blends the bands' edges into the outermost columns only
    np.testing.assert_allclose(inner[1], 255, atol=1)
    np.testing.assert_allclose(inner[[0, 2]], 0, atol=1)


def test_a_model_of_open_size_takes_images_at_their_own_size_or_at_size(tmp_path, rng):
    model = _save(tmp_path, cnn(size=None))
    photos(tmp_path / "same", rng, [(40, 24)] * 3, ".jpg")
    assert _batches(model, tmp_path / "same")[0]["image"].shape == (3, 3, 24, 40)
    photos(tmp_path / "mixed", rng, [(40, 24), (50, 50)])
    assert _batches(model, str(tmp_path / "mixed" / "*.png"), size=(28, 36))[0]["image"].shape == (2, 3, 28, 36)


def test_images_are_read_a_batch_at_a_time(tmp_path, rng):
    """96 photos of 96 × 96 fed as 32 × 32, 8 a batch: the traced peak while the first 5 batches are read is that of
    a few batches (a batch is 98 KB, all 96 photos 1.2 MB; measured 207 KB), and a broken file is found only when its
    batch is read."""
    files = photos(tmp_path / "photos", rng, [(96, 96)] * 96, ".jpg")
    files[40].write_bytes(files[40].read_bytes()[:2000])  # its header is whole, its pixels cut short
    model = source_model(ir.load(_save(tmp_path, cnn())), CalibrationConfig(batch_size=8), False, None)
    read = resolve_source(tmp_path / "photos", model, DataConfig(), "calibration")
    batches = iter(read())
    tracemalloc.start()
    try:
        for _ in range(5):
            next(batches)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 8 * 3 * 32 * 32 * 4
    with pytest.raises(onnxq.OnnxqError, match=f"calibration image {files[40]} cannot be decoded"):
        next(batches)


def test_a_folder_of_images_calibrates_a_cnn_as_its_npz_does(tmp_path, rng, capsys):
    model = _save(tmp_path, cnn())
    photos(tmp_path / "photos", rng, [(48, 40), (40, 48), (64, 64), (32, 32)] * 5, ".jpg")
    (tmp_path / "photos" / "README.txt").write_text("20 photos\n")  # a folder of photos, not of text
    assert main(["data", str(model), str(tmp_path / "photos"), "-o", str(tmp_path / "photos.npz")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (f"onnxq: wrote {tmp_path / 'photos.npz'}: 20 samples, from calibration images photos (20 "
                          "files) as image NCHW RGB, 0-1, then ImageNet's mean and std (torchvision, timm), 32x32 (15 "
                          "of them scaled by the shorter side, then cropped around the centre)")
    assert printed[1] == "  image  float32 [20, 3, 32, 32]"
    direct, via_npz = onnxq.calibrate(model, tmp_path / "photos"), onnxq.calibrate(model, tmp_path / "photos.npz")
    assert direct.samples == via_npz.samples == 20
    assert {n: o.range() for n, o in direct.observers.items()} == {n: o.range() for n, o in via_npz.observers.items()}
    code = main([str(model), "--calib", str(tmp_path / "photos"), "-o", str(tmp_path / "q.onnx"), "--no-speed", "-q"])
    assert code == 4 and "NOT SHOWN — top-1 agreement" in capsys.readouterr().out  # too few to show 0.99
