"""A new range method is one registration (numerics.methods.range_method): the config accepts it, calibration
summaries and quantize() use it — nothing else changes."""

from __future__ import annotations

import numpy as np
import pytest

import onnxq
from onnxq.errors import ConfigError
from onnxq.numerics.methods import RANGE_METHODS, range_method


@pytest.fixture
def absmax():
    """A method this test adds: the range ±max |x| (symmetric around zero whatever the data)."""

    @range_method("absmax-test")
    def _absmax(observer, request):
        largest = max(abs(observer.min), abs(observer.max))
        return -largest, largest

    yield "absmax-test"
    del RANGE_METHODS["absmax-test"]


def test_a_registered_method_is_usable_end_to_end(samples_dir, absmax):
    data = dict(np.load(samples_dir / "mlp_calib.npz"))
    plain = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(method="minmax"),
                              verify=onnxq.VerifyConfig(enabled=False))
    minmax = onnxq.quantize(samples_dir / "mlp.onnx", data, config=plain).report.ranges
    added = onnxq.quantize(samples_dir / "mlp.onnx", data, config=plain.replace(
        calibration=onnxq.CalibrationConfig(method=absmax))).report.ranges
    assert added.keys() == minmax.keys()
    for name, (low, high) in minmax.items():
        assert added[name] == (-max(-low, high), max(-low, high))


def test_an_unknown_method_is_refused_with_the_known_ones():
    with pytest.raises(ConfigError, match="calibration.method 'median' is not one of .*'percentile'"):
        onnxq.CalibrationConfig(method="median")
