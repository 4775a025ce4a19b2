"""Images as a vision model's input: a folder of image files (searched recursively, in name order), a glob pattern
("photos/*.jpg") or one image file, decoded with Pillow (the optional extra onnxq[vision]), a batch at a time —
memory holds one batch of images, however many there are.

Resize policy, torchvision's eval transform: each image is scaled (bilinear, antialiased) so that it covers the
model's height × width — its shorter side to the target's — then cropped to it around the centre. Where the model
leaves the size open, data.size (--size) gives it; without it the images are fed at their own size, which they
must then all share."""

from __future__ import annotations

import dataclasses
import glob
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from onnxq.data.specs import Batch
from onnxq.config import DataConfig
from onnxq.data.image_input import ImageInput, image_input
from onnxq.data.reader import Opened, ReadData, SourceModel
from onnxq.errors import CalibrationDataError, one_line

__all__ = ["IMAGE_SUFFIXES", "claims_images", "image_files", "open_images", "fitted"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def claims_images(path: Path) -> bool:
    if path.is_dir():
        return not any(path.glob("*.np[yz]")) and any(_is_image(p) for p in path.rglob("*"))
    return (path.is_file() and _is_image(path)) or (not path.exists() and glob.has_magic(str(path)))


def image_files(path: Path, what: str) -> list[Path]:
    """The image files of a folder (recursively), a pattern or one file, in name order."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if _is_image(p) and p.is_file())
    if path.exists():
        return [path]
    matches = sorted(Path(p) for p in glob.glob(str(path), recursive=True))
    others = [p for p in matches if not (_is_image(p) and p.is_file())]
    if not matches or others:
        found = f"matches {one_line(others[0])}, which is no image file" if others else "matches no file"
        raise CalibrationDataError(f"{what} data pattern {one_line(path)} {found} — give a folder of images or a "
                                   f"pattern of image files ({', '.join(IMAGE_SUFFIXES)})")
    return matches


def _pillow(what: str) -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise CalibrationDataError(f"{what} data is images: reading them needs Pillow — pip install pillow (onnxq's "
                                    "vision extra)"
                                   ) from None
    return Image


def open_images(path: Path, model: SourceModel, config: DataConfig, what: str) -> ReadData:
    target = image_input(model, config, what)
    image = _pillow(what)
    files = image_files(path, what)
    sizes = {file: _header_size(image, file, what) for file in files}  # every file an image, before any work
    if target.size is None:
        target = _own_size(target, sizes, what)

    def batches(size: int, same_shape: bool) -> Iterator[Batch]:
        for start in range(0, len(files), size):
            yield {target.name: np.stack([_pixels(image, f, target, what) for f in files[start:start + size]])}

    height, width = target.size
    resized = sum(s != (width, height) for s in sizes.values())
    how = f"{resized} of them scaled by the shorter side, then cropped around the centre" if resized else \
        "none resized"
    description = (f"{what} images {path.name if path.exists() else one_line(path)} ({len(files)} files) as "
                   f"{target.describe()}, {height}x{width} ({how})")
    opened = Opened("images", len(files), batches, description, files=tuple(files),
                    folders=(path,) if path.is_dir() else ())
    return ReadData(opened, model.batch_size)


def _header_size(image: Any, file: Path, what: str) -> tuple[int, int]:
    """(width, height) from the file's header; one line naming the file when it is no image Pillow reads."""
    try:
        with image.open(file) as opened:
            return opened.size
    except (OSError, ValueError, image.DecompressionBombError) as e:
        raise CalibrationDataError(f"{what} image {one_line(file)} cannot be decoded ({one_line(e)}) — remove it or "
                                   "save it as PNG or JPEG") from None


def _own_size(target: ImageInput, sizes: dict[Path, tuple[int, int]], what: str) -> ImageInput:
    """The images' own size, for a model that leaves it open: refused when they differ (no batch could hold them)."""
    first: dict[tuple[int, int], Path] = {}
    for file, size in sizes.items():
        first.setdefault(size, file)
    if len(first) > 1:
        ((wa, ha), a), ((wb, hb), b) = list(first.items())[:2]
        raise CalibrationDataError(f"{what} images differ in size ({a.name} {ha}x{wa}, {b.name} {hb}x{wb}: HxW) and "
                                   f"the model's input {target.name} leaves height and width open — pass --size 224 "
                                   "(or --size HxW, TOML [data] size) to resize them to one")
    width, height = next(iter(first))
    return dataclasses.replace(target, size=(height, width))


def _pixels(image: Any, file: Path, target: ImageInput, what: str) -> np.ndarray:
    try:
        with image.open(file) as opened:
            fitted_image = fitted(opened.convert("L" if target.channels == 1 else "RGB"), target.size, image)
            pixels = np.asarray(fitted_image, np.uint8)
    except (OSError, ValueError, image.DecompressionBombError) as e:
        raise CalibrationDataError(f"{what} image {one_line(file)} cannot be decoded ({one_line(e)}) — remove it or "
                                   "save it as PNG or JPEG") from None
    return target.normalized(pixels[..., None] if pixels.ndim == 2 else pixels)


def fitted(picture: Any, size: tuple[int, int], image: Any) -> Any:
    """The picture scaled to cover (height, width), its shorter side to the target's, then cropped around the
    centre (torchvision's Resize + CenterCrop)."""
    height, width = size
    if picture.size == (width, height):
        return picture
    scale = max(width / picture.width, height / picture.height)
    scaled = (max(width, round(picture.width * scale)), max(height, round(picture.height * scale)))
    picture = picture.resize(scaled, image.Resampling.BILINEAR)
    left, top = (scaled[0] - width) // 2, (scaled[1] - height) // 2
    return picture.crop((left, top, left + width, top + height))
