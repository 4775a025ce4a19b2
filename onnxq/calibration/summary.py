"""Calibration summaries: what the observers learned, saved as JSON (the calibration cache) and merged.

A summary is tied to one float model by a fingerprint of its graph and weights, so a cache computed for another
model (or another version of the same one) is refused instead of silently giving wrong ranges. It stores the
observers' states, not ranges, so one calibration serves every method and quantization setting.

File format (JSON, version 2; version 1, the same without "moments", is read too):
    {"format": "onnxq-calibration", "version": 1, "model_fingerprint": "blake2b:…", "samples": 128,
     "histogram_bins": 8192 | null, "tensors": {"<value name>": <TensorObserver state>, …}}
TensorObserver state: min/max/batch_min_sum/batch_max_sum as float.hex() strings (exact), count, batches,
histogram: null or {max_bins, exponent (bin width 2**exponent), offset (grid index of counts[0]), min, max,
counts: [int, …]}.
Optional "channels" (written when smoothing is asked for): {"<value name>": ChannelStats state} — per-channel max
|x| and a sample of rows of the activations SmoothQuant may smooth, of the float model like everything here.
Optional "moments" (written when the config asks for 4-bit weights fitted to the data: GPTQ, or activation-aware
clipping): per weight, the sum of XᵀX of the activations its nodes read, or of its diagonal, and their rows
(calibration.moment_sums) — what a 4-bit run quantizes from without reading the data again.
Optional "magnitudes" (written when a request asks for them: float16 compute's): {"<value name>": {"largest":
float.hex()}} — each value's max |x| (calibration.magnitudes.LargestMagnitude).
"""

from __future__ import annotations

import binascii
import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx_ir as ir

from onnxq.calibration.channels import ChannelStats
from onnxq.calibration.magnitudes import LargestMagnitude
from onnxq.calibration.moment_sums import StoredMoments
from onnxq.errors import CalibrationDataError, one_line
from onnxq.io import regular_file, write_output
from onnxq.numerics import TensorObserver
from onnxq.numerics.methods import RANGE_METHODS

__all__ = ["CalibrationSummary", "model_fingerprint", "FORMAT", "VERSION"]

FORMAT = "onnxq-calibration"
VERSION = 2
READABLE_VERSIONS = (1, 2)


def model_fingerprint(model: ir.Model) -> str:
    """A hash of the graph (ops, wiring, attributes) and every initializer's bytes."""
    digest = hashlib.blake2b(digest_size=16)
    for node in model.graph:
        digest.update(repr((node.domain, node.op_type, [v.name if v else "" for v in node.inputs],
                            [v.name for v in node.outputs],
                            sorted((k, repr(a.value)) for k, a in node.attributes.items()))).encode())
    for name in sorted(model.graph.initializers):
        tensor = model.graph.initializers[name].const_value
        digest.update(repr((name, str(tensor.dtype), tuple(tensor.shape))).encode())
        digest.update(np.ascontiguousarray(tensor.numpy()).view(np.uint8).data)
    return "blake2b:" + digest.hexdigest()


@dataclasses.dataclass
class CalibrationSummary:
    """What calibration observed of one model, per activation (extremes and histograms), and the smoothing's
    per-channel statistics, the 4-bit weights' second moments and float values' largest magnitudes where asked:
    onnxq.calibrate() returns it, save() writes it as the calibration cache (--calib-cache), and merge() folds in a
    shard's summary exactly."""

    model_fingerprint: str
    observers: dict[str, TensorObserver]
    samples: int
    histogram_bins: int | None
    channels: dict[str, ChannelStats] = dataclasses.field(default_factory=dict)
    moments: StoredMoments | None = None
    magnitudes: dict[str, LargestMagnitude] = dataclasses.field(default_factory=dict)

    def ranges(self, names: Iterable[str], method: str, *, qmin: int, qmax: int, symmetric: bool,
               percentile: float) -> dict[str, tuple[float, float]]:
        missing = [n for n in names if n not in self.observers]
        if missing:
            raise CalibrationDataError(
                f"the calibration summary has no range for '{missing[0]}' ({len(missing)} missing) — it was made "
                "with other settings; recalibrate with this config")
        if RANGE_METHODS[method].needs_histogram and self.histogram_bins is None:
            raise CalibrationDataError(
                f"method {method} needs histograms and the calibration summary has none — recalibrate with "
                f"--method {method}")
        return {n: self.observers[n].range(method, qmin=qmin, qmax=qmax, symmetric=symmetric,
                                           percentile=percentile) for n in names}

    def check_model(self, fingerprint: str, where: str) -> None:
        if fingerprint != self.model_fingerprint:
            raise CalibrationDataError(
                f"calibration cache {where} was made for another model (fingerprint {self.model_fingerprint[:20]}… "
                f"≠ {fingerprint[:20]}…) — delete it or pass this model's cache")

    def merge(self, other: CalibrationSummary) -> None:
        if other.model_fingerprint != self.model_fingerprint:
            raise CalibrationDataError("cannot merge calibration summaries of different models (fingerprint "
                                       f"{other.model_fingerprint[:20]}… ≠ {self.model_fingerprint[:20]}…) — "
                                       "calibrate every shard with the same model file")
        if other.histogram_bins != self.histogram_bins:
            raise CalibrationDataError("cannot merge calibration summaries with different histogram settings — "
                                       "calibrate every shard with the same onnxq and [calibration] settings")
        if set(other.observers) != set(self.observers):
            raise CalibrationDataError("cannot merge calibration summaries of different tensors — calibrate every "
                                       "shard with the same config (its op types, exclusions, smoothing)")
        if set(other.channels) != set(self.channels):
            raise CalibrationDataError("cannot merge calibration summaries with and without smoothing statistics — "
                                       "calibrate every shard with --smooth, or none")
        if (other.moments is None) != (self.moments is None):
            raise CalibrationDataError("cannot merge calibration summaries with and without the 4-bit weights' second "
                                       "moments — calibrate every shard with the same --weights (or [blocks])")
        if self.moments is not None:
            try:
                self.moments.merge(other.moments)
            except ValueError:
                raise CalibrationDataError("cannot merge calibration summaries whose second moments are of other "
                                           "weights — calibrate every shard with the same config") from None
        if set(other.magnitudes) != set(self.magnitudes):
            raise CalibrationDataError("cannot merge calibration summaries of other values' magnitudes — calibrate "
                                       "every shard with the same config")
        for name, observer in other.observers.items():
            self.observers[name].merge(observer)
        for name, magnitude in other.magnitudes.items():
            self.magnitudes[name].merge(magnitude)
        for name, stats in other.channels.items():
            self.channels[name].merge(stats)
        self.samples += other.samples

    def to_json(self) -> dict:
        data = {"format": FORMAT, "version": VERSION, "model_fingerprint": self.model_fingerprint,
                "samples": self.samples, "histogram_bins": self.histogram_bins,
                "tensors": {n: o.state() for n, o in self.observers.items()}}
        if self.channels:
            data["channels"] = {n: c.state() for n, c in self.channels.items()}
        if self.moments is not None:
            data["moments"] = self.moments.state()
        if self.magnitudes:
            data["magnitudes"] = {n: m.state() for n, m in self.magnitudes.items()}
        return data

    def save(self, path: str | os.PathLike) -> Path:
        """Write through the output guard (io.outputs): staged beside the target, in place when the run ends."""
        text = json.dumps(self.to_json(), separators=(",", ":"))
        return write_output(path, lambda staged: staged.write_text(text), "calibration cache")

    def copy(self) -> CalibrationSummary:
        return self.from_json(self.to_json(), "a copy")

    @classmethod
    def load(cls, path: str | os.PathLike) -> CalibrationSummary:
        path = regular_file(path, "calibration summary", CalibrationDataError)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise CalibrationDataError(f"{one_line(path)} is not an onnxq calibration summary (not JSON)") from None
        except OSError as e:
            raise CalibrationDataError(f"calibration summary {one_line(path)} cannot be read ({e.strerror})") from None
        return cls.from_json(data, str(path))

    @classmethod
    def from_json(cls, data: object, path: str) -> CalibrationSummary:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CalibrationDataError(f'{path} is not an onnxq calibration summary (no "format": "{FORMAT}")')
        if data.get("version") not in READABLE_VERSIONS:
            raise CalibrationDataError(f"{path} has summary version {data.get('version')}; this onnxq reads "
                                       f"versions {', '.join(map(str, READABLE_VERSIONS))} — recalibrate")
        try:
            observers = {n: TensorObserver.from_state(s) for n, s in data["tensors"].items()}
            channels = {n: ChannelStats.from_state(s) for n, s in data.get("channels", {}).items()}
            moments = StoredMoments.from_state(data["moments"]) if data.get("moments") is not None else None
            magnitudes = {n: LargestMagnitude.from_state(s) for n, s in data.get("magnitudes", {}).items()}
            return cls(data["model_fingerprint"], observers, int(data["samples"]), data["histogram_bins"], channels,
                       moments, magnitudes)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError, binascii.Error) as e:
            raise CalibrationDataError(f"{path} is a damaged calibration summary ({type(e).__name__}: {e})") from None
