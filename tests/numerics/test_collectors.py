"""Every calibration statistic follows one protocol (numerics.collector.Collector) and is a monoid: shards observed
apart and merged give what one pass over all of them gives, and the state survives the calibration cache."""

import numpy as np
import pytest

from onnxq.calibration.channels import ChannelStats
from onnxq.calibration.magnitudes import LargestMagnitude
from onnxq.numerics.collector import Collector
from onnxq.numerics.observers import TensorObserver

COLLECTORS = {"observer": lambda: TensorObserver(), "observer+histogram": lambda: TensorObserver(2048),
              "channels": lambda: ChannelStats(max_rows=1000), "magnitudes": lambda: LargestMagnitude()}


def _shards(rng):
    return [rng.normal(0, s, (16, 24)).astype(np.float32) for s in (0.5, 2.0, 1.0, 4.0)]


@pytest.mark.parametrize("kind", COLLECTORS)
def test_shards_merged_equal_one_pass(rng, kind):
    make = COLLECTORS[kind]
    assert isinstance(make(), Collector)
    shards = _shards(rng)
    whole, first, second = make(), make(), make()
    for i, shard in enumerate(shards):
        whole.observe(shard)
        (first if i < 2 else second).observe(shard)
    first.merge(second)
    restored = type(first).from_state(first.state())
    # Everything exact: extremes, sums and histograms; the row sample holds every row (under max_rows).
    assert restored.state() == first.state()
    if kind == "channels":
        np.testing.assert_array_equal(first.absmax, whole.absmax)
        np.testing.assert_array_equal(np.sort(first.rows, axis=0), np.sort(whole.rows, axis=0))
    else:
        assert first.state() == whole.state()


def test_a_magnitude_is_the_largest_of_any_order_infinite_past_a_nan(rng):
    """max |x| over shards merged in every order is the one pass's, bit for bit; an empty batch adds nothing; a NaN
    or an infinity anywhere makes it infinite (float16 compute keeps such a value float32)."""
    import itertools
    import math

    shards = _shards(rng) + [np.zeros((0, 24), np.float32)]
    whole = LargestMagnitude()
    for shard in shards:
        whole.observe(shard)
    assert whole.largest == float(max(np.abs(s).max() for s in shards if s.size)) > 8.0
    for order in itertools.permutations(range(len(shards))):
        parts = []
        for i in order:
            parts.append(LargestMagnitude())
            parts[-1].observe(shards[i])
        merged = parts[0]
        for part in parts[1:]:
            merged.merge(part)
        assert merged.state() == whole.state()
    assert LargestMagnitude().largest == 0.0
    whole.observe(np.array([1.0, np.nan], np.float32))
    assert whole.largest == math.inf
    whole.observe(np.ones(3, np.float32))
    assert LargestMagnitude.from_state(whole.state()).largest == math.inf
