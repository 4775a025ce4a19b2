"""The [data] table: how the data a user has (text, images, one .npy, an .npz under other names) becomes the model's
inputs (onnxq.data reads it)."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from onnxq.config.checks import check_ranges
from onnxq.errors import ConfigError

__all__ = ["DataConfig", "NORMALIZATIONS", "Normalization"]


@dataclasses.dataclass(frozen=True)
class Normalization:
    """A pixel p in 0 … 255 becomes (p · scale − mean) / std, per channel (one value: every channel)."""

    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]
    description: str


# Named presets for --normalize: what the model was trained on decides, and a wrong one shifts every activation.
NORMALIZATIONS = {
    "imagenet": Normalization(1 / 255, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225),
                              "0-1, then ImageNet's mean and std (torchvision, timm)"),
    "unit": Normalization(1 / 255, (0.0,), (1.0,), "0-1"),
    "signed": Normalization(1 / 127.5, (1.0,), (1.0,), "-1..1 (Inception, MobileNet in TensorFlow)"),
    "raw": Normalization(1.0, (0.0,), (1.0,), "0-255 as floats (a model that normalizes inside)"),
}


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the calibration and verification data is text or images, how it becomes the model's inputs; where it
    is an .npz whose arrays are named otherwise, which array feeds which input."""

    # A Hugging Face tokenizer.json; None: the tokenizer.json beside the model, if there is one.
    tokenizer: str | None = None
    # The field of each .jsonl line that holds the text.
    field: str = "text"
    # An encoder's sentences: at most this many tokens, each batch padded to its longest. None: the length the
    # model fixes, else the tokenizer file's truncation length, else 512.
    max_length: int | None = None
    # A decoder's windows of this many tokens, cut from the text's tokens end to end. None: the length the model
    # fixes, else 128.
    window: int | None = None
    # Images: the model's height and width where its input leaves them open ([S] for S × S, or [H, W]).
    size: tuple[int, ...] | None = None
    # Images: a preset of NORMALIZATIONS; mean, std and scale replace its values.
    normalize: str = "imagenet"
    # Images: the mean subtracted from each channel after scaling (one value: every channel), over the preset's.
    mean: tuple[float, ...] | None = None
    # Images: what each channel is divided by after the mean (one value: every channel), over the preset's.
    std: tuple[float, ...] | None = None
    # Images: what each pixel (0 … 255) is multiplied by first, over the preset's (1/255 for 0-1).
    scale: float | None = None
    # Images: the channel order the model takes (OpenCV-trained models: bgr).
    channel_order: Literal["rgb", "bgr"] = "rgb"
    # Model input → the array of the data that feeds it, for data whose arrays are named otherwise (x = "x_train").
    input_map: dict[str, str] = dataclasses.field(default_factory=dict)
    # The same for the verification data (x = "x_test" beside x = "x_train" from one .npz); empty: input_map, where
    # the verification data has those arrays.
    verify_input_map: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.normalize not in NORMALIZATIONS:
            raise ConfigError(f"data.normalize {self.normalize!r} is not one of {', '.join(NORMALIZATIONS)} — or "
                              "give data.mean, data.std and data.scale")
        if self.size is not None and (len(self.size) not in (1, 2) or not all(1 <= s <= 65536 for s in self.size)):
            raise ConfigError(f"data.size {list(self.size)} (--size): give S or [H, W], each in [1, 65536]")
        for name in ("mean", "std"):
            values = getattr(self, name)
            if values is not None and (len(values) not in (1, 3) or not all(math.isfinite(v) for v in values)):
                raise ConfigError(f"data.{name} {list(values)} (--{name}): give one finite number, or one per "
                                  "channel (3)")
        if self.std is not None and not all(v > 0 for v in self.std):
            raise ConfigError(f"data.std {list(self.std)} (--std): each must be > 0")
        for table in ("input_map", "verify_input_map"):
            for name, array in getattr(self, table).items():
                if not isinstance(array, str) or not array:
                    raise ConfigError(f"data.{table} gives {name!r} {array!r} — give the name of an array of the data")

    def map_for(self, what: str) -> tuple[dict[str, str], bool]:
        """The input map of the calibration or the verification data, and whether it is the calibration's map
        serving the verification data too (then it applies only where that data has the arrays it names)."""
        if what == "verification" and self.verify_input_map:
            return self.verify_input_map, False
        return self.input_map, what == "verification"

    @property
    def normalization(self) -> Normalization:
        """The preset with mean, std and scale given over it."""
        preset = NORMALIZATIONS[self.normalize]
        changed = {k: v for k, v in (("scale", self.scale), ("mean", self.mean), ("std", self.std)) if v is not None}
        if not changed:
            return preset
        said = ", ".join(f"{k} {list(v) if isinstance(v, tuple) else v}" for k, v in changed.items())
        return dataclasses.replace(preset, **changed, description=f"{self.normalize} with {said}")
