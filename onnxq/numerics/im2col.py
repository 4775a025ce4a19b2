"""A Conv's input as the [rows, K] matrix of MLAS's im2col GEMM: one row per output position, K over (kernel taps,
input channels of the group), channels fastest — the order in which AVX2's U8S8 kernel pairs K (numerics.pairs.
gemm_view is the weight's side). Padding holds the activation's zero point: a padded float 0, quantized."""

from __future__ import annotations

import dataclasses

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
    channels = a.shape[1] // geometry.group
    part = a[:, group * channels:(group + 1) * channels]
    return im2col_groups(part, dataclasses.replace(geometry, group=1), zero_point)[:, 0]


def im2col_groups(a: np.ndarray, geometry: ConvGeometry, fill: int = 0) -> np.ndarray:
    """A [N, C, *spatial] input as every group's GEMM rows at once: [N · prod(output), group, taps · C/group],
    K ordered as im2col's (kernel taps, input channels of the group, channels fastest); padding holds `fill`."""
    groups, n = geometry.group, len(geometry.kernel)
    windows = _windows(a, geometry, fill)  # [N, C, *out, *kernel]
    split = windows.reshape(a.shape[0], groups, a.shape[1] // groups, *windows.shape[2:])  # a view: C split
    order = (0, *range(3, 3 + n), 1, *range(3 + n, 3 + 2 * n), 2)  # [N, *out, group, *kernel, C/group]
    rows = np.ascontiguousarray(split.transpose(order))  # the one copy
    return rows.reshape(-1, groups, int(np.prod(geometry.kernel)) * (a.shape[1] // groups))


def _windows(a: np.ndarray, geometry: ConvGeometry, fill: int) -> np.ndarray:
    """The padded input's windows as a view [N, C, *out, *kernel]: each output position's taps, strides and
    dilations applied (no copy but the padding's)."""
    n = len(geometry.kernel)
    padded = np.pad(a, ((0, 0), (0, 0), *geometry.padding(a.shape[2:])), constant_values=fill)
    spans = [(k - 1) * d + 1 for k, d in zip(geometry.kernel, geometry.dilations)]
    windows = np.lib.stride_tricks.sliding_window_view(padded, spans, axis=tuple(range(2, 2 + n)))
    out = geometry.output_shape(a.shape[2:])
    index = (slice(None), slice(None), *(slice(0, s * (o - 1) + 1, s) for s, o in zip(geometry.strides, out)),
             *(slice(None, None, d) for d in geometry.dilations))
    return windows[index]
