"""Real inputs made here, seeded: text rendered with DejaVu Sans (lines, pages, captchas) and speech synthesized by
espeak-ng. Pillow draws; numpy adds paper noise."""

from __future__ import annotations

import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = ["WORDS", "text_line", "page", "captcha", "speech"]

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
WORDS = ("invoice total amount paid date quantity price order number customer address street city phone email "
         "station platform departure arrival ticket coffee bread milk sugar water table chair window garden river "
         "mountain north south east west monday friday january october market bank office school hospital").split()


def _words(rng: np.random.Generator, n: int) -> str:
    text = " ".join(rng.choice(WORDS, n))
    if rng.random() < 0.5:
        text += f" {rng.integers(1, 9999)}"
    return text.capitalize() if rng.random() < 0.5 else text.upper()


def _noisy(image: Image.Image, rng: np.random.Generator, sigma: float = 6.0) -> np.ndarray:
    array = np.asarray(image, dtype=np.float32) + rng.normal(0, sigma, (image.height, image.width, 1))
    return np.clip(array, 0, 255).astype(np.uint8)


def text_line(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """(a BGR uint8 crop of one printed line, its text) as a detector would hand it to a recognizer."""
    text = _words(rng, int(rng.integers(1, 4)))
    font = ImageFont.truetype(FONT, int(rng.integers(22, 34)))
    left, top, right, bottom = font.getbbox(text)
    pad = int(rng.integers(3, 9))
    paper = tuple(int(v) for v in rng.integers(200, 256, 3))
    image = Image.new("RGB", (right - left + 2 * pad, bottom - top + 2 * pad), paper)
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    ImageDraw.Draw(image).text((pad - left, pad - top), text, font=font, fill=ink)
    return _noisy(image, rng)[:, :, ::-1].copy(), text


def page(rng: np.random.Generator, size: tuple[int, int] = (640, 480)) -> np.ndarray:
    """A BGR page of 4-8 printed lines at random places and sizes."""
    image = Image.new("RGB", size, tuple(int(v) for v in rng.integers(215, 256, 3)))
    draw = ImageDraw.Draw(image)
    y = int(rng.integers(10, 40))
    while y < size[1] - 40:
        font = ImageFont.truetype(FONT, int(rng.integers(16, 30)))
        draw.text((int(rng.integers(10, size[0] // 3)), y), _words(rng, int(rng.integers(2, 5))), font=font,
                  fill=tuple(int(v) for v in rng.integers(0, 80, 3)))
        y += int(rng.integers(45, 90))
    return _noisy(image, rng)[:, :, ::-1].copy()


def captcha(rng: np.random.Generator, size: tuple[int, int] = (160, 60)) -> tuple[Image.Image, str]:
    """A 4-6 character captcha (letters and digits, jittered, crossed by lines) and its text."""
    alphabet = "abcdefhkmnprstuvwxyz2345678"
    text = "".join(rng.choice(list(alphabet), int(rng.integers(4, 7))))
    image = Image.new("RGB", size, tuple(int(v) for v in rng.integers(190, 256, 3)))
    draw = ImageDraw.Draw(image)
    step = (size[0] - 16) // len(text)
    for i, char in enumerate(text):
        font = ImageFont.truetype(FONT, int(rng.integers(30, 40)))
        draw.text((8 + i * step + int(rng.integers(-2, 3)), int(rng.integers(2, 14))), char, font=font,
                  fill=tuple(int(v) for v in rng.integers(0, 120, 3)))
    for _ in range(3):
        draw.line([tuple(int(v) for v in rng.integers(0, size[0], 2)) for _ in range(2)],
                  fill=tuple(int(v) for v in rng.integers(0, 160, 3)), width=1)
    return image, text


def speech(rng: np.random.Generator, sample_rate: int = 16000) -> np.ndarray:
    """float32 mono audio at sample_rate: silence, a sentence spoken by espeak-ng (random voice speed and pitch),
    silence, with low background noise."""
    sentence = " ".join(rng.choice(WORDS, int(rng.integers(4, 9))))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "speech.wav"
        subprocess.run(["espeak-ng", "-s", str(int(rng.integers(120, 190))), "-p", str(int(rng.integers(20, 80))),
                        "-w", str(path), sentence], check=True, capture_output=True)
        with wave.open(str(path)) as f:
            rate = f.getframerate()
            voice = np.frombuffer(f.readframes(f.getnframes()), np.int16).astype(np.float32) / 32768
    times = np.arange(int(len(voice) * sample_rate / rate)) / sample_rate
    voice = np.interp(times, np.arange(len(voice)) / rate, voice).astype(np.float32)
    gap = lambda: np.zeros(int(rng.uniform(0.3, 1.0) * sample_rate), np.float32)  # noqa: E731
    audio = np.concatenate([gap(), voice * rng.uniform(0.3, 1.0), gap()])
    return (audio + rng.normal(0, 0.003, audio.shape)).astype(np.float32)
