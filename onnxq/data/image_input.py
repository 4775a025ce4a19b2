"""The image input of a model, read off its shape: NCHW or NHWC by where a channel count of 1 or 3 stands, the
height and width where the model fixes them (else data.size), and the pixel values it takes (a float input:
normalized as data.normalize / mean / std / scale say; uint8: the pixels as they are)."""

from __future__ import annotations

import dataclasses

import numpy as np

from onnxq.config import DataConfig, Normalization
from onnxq.data.reader import SourceModel
from onnxq.errors import CalibrationDataError

__all__ = ["ImageInput", "image_input"]


@dataclasses.dataclass(frozen=True)
class ImageInput:
    name: str
    dtype: np.dtype
    channels: int  # 1: grayscale, 3: colour
    channels_last: bool  # NHWC (TensorFlow's exports); else NCHW
    size: tuple[int, int] | None  # (height, width); None: the images' own, when they all share one
    normalization: Normalization | None  # None: pixels as they are (an integer input)
    bgr: bool

    def describe(self) -> str:
        layout = "NHWC" if self.channels_last else "NCHW"
        colour = "grayscale" if self.channels == 1 else ("BGR" if self.bgr else "RGB")
        values = "pixels 0-255 as they are" if self.normalization is None else self.normalization.description
        return f"{self.name} {layout} {colour}, {values}"

    def normalized(self, pixels: np.ndarray) -> np.ndarray:
        """An image [H, W, C] of 0-255 pixels as the model takes it: channel order, values, layout."""
        if self.bgr and self.channels == 3:
            pixels = pixels[..., ::-1]
        if self.normalization is None:
            array = pixels.astype(self.dtype)
        else:
            norm = self.normalization
            mean, std = _per_channel(norm.mean, self.channels), _per_channel(norm.std, self.channels)
            array = ((pixels.astype(np.float32) * np.float32(norm.scale) - mean) / std).astype(self.dtype)
        return array if self.channels_last else np.ascontiguousarray(array.transpose(2, 0, 1))


def _per_channel(values: tuple[float, ...], channels: int) -> np.ndarray:
    """One value for every channel, or one each; a grayscale input takes the mean of three (ImageNet's)."""
    array = np.asarray(values, np.float32)
    return np.full(channels, array.mean(), np.float32) if len(array) != channels else array


def image_input(model: SourceModel, config: DataConfig, what: str) -> ImageInput:
    """The model's one image input (module doc); one line naming the fix where its shape does not say."""
    if len(model.specs) != 1:
        raise CalibrationDataError(f"{what} data is images, which feed a model of one image input; this model takes "
                                   f"{model.listed()} — give an .npz keyed by input name")
    spec = model.specs[0]
    shape = spec.shape
    if shape is None or len(shape) != 4 or spec.dtype.kind not in "fu":
        raise CalibrationDataError(f"{what} data is images but the model's input {spec.name} ({spec.describe()}) is "
                                   "no image batch (float or uint8, rank 4: NCHW or NHWC) — give an .npz")
    channels_last = shape[1] not in (1, 3) and shape[3] in (1, 3)
    if shape[1] not in (1, 3) and not channels_last:
        raise CalibrationDataError(f"{what} data is images but the model's input {spec.name} ({spec.describe()}) does "
                                   "not say its channels (1 or 3, on axis 1 for NCHW or axis 3 for NHWC) — export it "
                                   "with a fixed channel count, or give an .npz")
    spatial = tuple(shape[1:3] if channels_last else shape[2:4])
    fixed = tuple(d for d in spatial if isinstance(d, int) and d > 0)
    size = _size(config)
    if len(fixed) == 2 and size is not None and size != fixed:
        raise CalibrationDataError(f"the model fixes {spec.name}'s size at {fixed[0]}x{fixed[1]}; --size "
                                   f"{size[0]}x{size[1]} cannot feed it — drop --size")
    norm = config.normalization if spec.dtype.kind == "f" else None
    return ImageInput(spec.name, spec.dtype, int(shape[3] if channels_last else shape[1]), channels_last,
                      fixed if len(fixed) == 2 else size, norm, config.channel_order == "bgr")


def _size(config: DataConfig) -> tuple[int, int] | None:
    if config.size is None:
        return None
    return (config.size[0], config.size[0]) if len(config.size) == 1 else (config.size[0], config.size[1])
