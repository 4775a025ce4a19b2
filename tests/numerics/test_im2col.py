"""im2col against the definition: row (n, output position), column (tap, channel of the group) is the padded input at
position · stride + tap · dilation — one loop per row and tap, on random geometries (strides, dilations, pads,
auto_pad, groups; 1-D to 3-D), seeded."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onnxq.numerics.im2col import ConvGeometry, im2col, im2col_groups


def _by_definition(a: np.ndarray, geometry: ConvGeometry, fill: float) -> np.ndarray:
    """[N · prod(out), group, taps · C/group] by loops."""
    padded = np.pad(a, ((0, 0), (0, 0), *geometry.padding(a.shape[2:])), constant_values=fill)
    out = geometry.output_shape(a.shape[2:])
    channels = a.shape[1] // geometry.group
    taps = list(itertools.product(*(range(k) for k in geometry.kernel)))
    rows = []
    for n in range(a.shape[0]):
        for position in itertools.product(*(range(o) for o in out)):
            row = np.empty((geometry.group, len(taps) * channels), a.dtype)
            for t, tap in enumerate(taps):
                at = tuple(p * s + k * d for p, s, k, d in zip(position, geometry.strides, tap, geometry.dilations))
                for g in range(geometry.group):
                    row[g, t * channels:(t + 1) * channels] = padded[(n, slice(g * channels, (g + 1) * channels),
                                                                      *at)]
            rows.append(row)
    return np.stack(rows)


def _geometries(rng: np.random.Generator, count: int):
    for _ in range(count):
        rank = int(rng.integers(1, 4))
        kernel = tuple(int(k) for k in rng.integers(1, 4, rank))
        dilations = tuple(int(d) for d in rng.integers(1, 3, rank))
        group = int(rng.choice([1, 2, 3]))
        geometry = ConvGeometry(kernel, tuple(int(s) for s in rng.integers(1, 3, rank)), dilations,
                                tuple(int(p) for p in rng.integers(0, 3, 2 * rank)), group,
                                str(rng.choice(["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"])))
        spatial = tuple(int(x) for x in rng.integers(max(kernel) * max(dilations), 7, rank))
        yield geometry, (2, group * int(rng.integers(1, 3)), *spatial)


@pytest.mark.parametrize("seed", range(4))
def test_im2col_is_the_definition(seed):
    rng = np.random.default_rng(seed)
    for geometry, shape in _geometries(rng, 10):
        a = rng.standard_normal(shape).astype(np.float32)
        expected = _by_definition(a, geometry, 0.0)
        assert np.array_equal(im2col_groups(a, geometry), expected), geometry
        q = rng.integers(0, 256, shape).astype(np.uint8)
        expected = _by_definition(q, geometry, 9)
        for g in range(geometry.group):
            assert np.array_equal(im2col(q, geometry, 9, g), expected[:, g]), geometry
