"""A Conv's input as the [rows, K] matrix of MLAS's im2col GEMM: one row per output position, K over (kernel taps,
input channels of the group), channels fastest — the order in which AVX2's U8S8 kernel pairs K (numerics.pairs.
gemm_view is the weight's side). Padding holds the activation's zero point: a padded float 0, quantized."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

__all__ = ["ConvGeometry", "im2col", "im2col_groups"]


@dataclasses.dataclass(frozen=True)
class ConvGeometry:
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    # (begin_1, …, begin_n, end_1, …, end_n), as ONNX writes pads; auto_pad resolved by `padded`.
    pads: tuple[int, ...]
    group: int
    auto_pad: str = "NOTSET"

    def padding(self, spatial: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        """(begin, end) per spatial axis for an input of this spatial shape."""
        n = len(self.kernel)
        if self.auto_pad in ("NOTSET", ""):
            pads = self.pads or (0,) * (2 * n)
            return tuple((pads[i], pads[i + n]) for i in range(n))
        if self.auto_pad == "VALID":
            return ((0, 0),) * n
        result = []
        for size, k, s, d in zip(spatial, self.kernel, self.strides, self.dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            result.append((small, large) if self.auto_pad == "SAME_UPPER" else (large, small))
        return tuple(result)

    def output_shape(self, spatial: tuple[int, ...]) -> tuple[int, ...]:
        return tuple((size + b + e - (k - 1) * d - 1) // s + 1 for size, (b, e), k, s, d
                     in zip(spatial, self.padding(spatial), self.kernel, self.strides, self.dilations))


def im2col(a: np.ndarray, geometry: ConvGeometry, zero_point: int, group: int) -> np.ndarray:
    """Group `group`'s columns of a [N, C, *spatial] uint8 input: [N · prod(output), taps · C/group]."""
    spatial = a.shape[2:]
    channels = a.shape[1] // geometry.group
    part = a[:, group * channels:(group + 1) * channels]
    padded = np.pad(part, ((0, 0), (0, 0), *geometry.padding(spatial)), constant_values=zero_point)
    out = geometry.output_shape(spatial)
    taps = []
    for tap in itertools.product(*(range(k) for k in geometry.kernel)):
        index = tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                      for t, d, s, o in zip(tap, geometry.dilations, geometry.strides, out))
        taps.append(padded[(slice(None), slice(None), *index)])
    columns = np.stack(taps, axis=1)  # [N, taps, C/group, *out]
    columns = np.moveaxis(columns.reshape(columns.shape[0], -1, *out), 1, -1)  # [N, *out, taps · C/group]
    return columns.reshape(-1, columns.shape[-1])


def im2col_groups(a: np.ndarray, geometry: ConvGeometry) -> np.ndarray:
    """A float [N, C, *spatial] input as every group's GEMM rows at once: [N · prod(output), group, taps · C/group],
    K ordered as im2col's (kernel taps, input channels of the group, channels fastest); padding holds 0."""
    spatial = a.shape[2:]
    padded = np.pad(a, ((0, 0), (0, 0), *geometry.padding(spatial)))
    out = geometry.output_shape(spatial)
    taps = []
    for tap in itertools.product(*(range(k) for k in geometry.kernel)):
        index = tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                      for t, d, s, o in zip(tap, geometry.dilations, geometry.strides, out))
        taps.append(padded[(slice(None), slice(None), *index)])
    columns = np.stack(taps, axis=-1)  # [N, C, *out, taps]
    columns = np.moveaxis(columns, 1, -1)  # [N, *out, taps, C]
    rows = columns.reshape(-1, len(taps), geometry.group, a.shape[1] // geometry.group)  # [rows, taps, g, C/g]
    return np.ascontiguousarray(rows.transpose(0, 2, 1, 3)).reshape(rows.shape[0], geometry.group, -1)
