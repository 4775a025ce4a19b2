"""numerics.saturation: where a reader stops telling values apart, read from its outputs at a histogram's bin
centres — exact bounds for hardswish and ReLU6 on a grid of quarter-width bins, none for a reader that tells its
end bins apart."""

import numpy as np

from onnxq.numerics.saturation import saturation_bounds

EDGES = np.arange(-8.0, 10.0 + 0.125, 0.25)  # bins of width 0.25 from -8 to 10
CENTRES = (EDGES[:-1] + EDGES[1:]) / 2


def _hardswish(x):
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def test_hardswish_saturates_below_minus_three_only():
    # The last centre below -3 is -3.125 (bin [-3.25, -3.0)): every value below -3.25 reads 0.
    assert saturation_bounds(EDGES, [_hardswish(CENTRES)]) == (-3.25, 10.0)


def test_relu6_saturates_on_both_sides():
    # Centres -0.125 and 6.125 are the last that read 0 and 6: bounds their bins' outer edges.
    assert saturation_bounds(EDGES, [np.clip(CENTRES, 0.0, 6.0)]) == (-0.25, 6.25)


def test_every_output_must_saturate():
    # The tensor read as it is too (a residual): nothing may be clipped.
    assert saturation_bounds(EDGES, [_hardswish(CENTRES), CENTRES]) == (-8.0, 10.0)


def test_a_reader_that_tells_the_ends_apart_keeps_the_edges():
    assert saturation_bounds(EDGES, [np.tanh(CENTRES / 100)]) == (-8.0, 10.0)
