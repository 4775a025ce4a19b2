"""Calibration by request: a run states what it must observe once, as a CalibrationRequest made from its plans, and
passes that value along (calibration, ranges); its ranges are a pure function of request, statistics and config.
Float16 compute's largest magnitudes are a kind of request too, collected and merged like every statistic."""

import sys

import numpy as np
import onnx_ir as ir
import pytest

import onnxq
from onnxq.calibration.magnitudes import largest_magnitudes
from onnxq.calibration.request import CalibrationRequest, observe
from onnxq.calibration.summary import CalibrationSummary
from onnxq.data.dataset import iter_batches
from onnxq.passes.forms.quantize import needed_ranges


def _spy_needed_ranges(monkeypatch) -> list[tuple[list, list[str]]]:
    """Every call of needed_ranges, wherever a module bound it: (plans, names)."""
    calls = []

    def recorded(plans, config):
        names = needed_ranges(plans, config)
        calls.append((list(plans), names))
        return names

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("onnxq") and getattr(module, "needed_ranges", None) \
                is needed_ranges:
            monkeypatch.setattr(module, "needed_ranges", recorded)
    return calls


def _spy_observe(monkeypatch) -> list[CalibrationRequest]:
    requests = []
    import onnxq.ranges

    def recorded(model, request, batches, progress, fingerprint):
        requests.append(request)
        return observe(model, request, batches, progress, fingerprint)

    monkeypatch.setattr(onnxq.ranges, "observe", recorded)
    return requests


@pytest.mark.parametrize("smooth", ["off", 0.5])
def test_a_run_makes_its_request_once_and_it_is_what_needed_ranges_gives(samples_dir, monkeypatch, smooth):
    """The sample transformer, static: the plans' ranges asked for once (single-plan calls are QuantizePass's own
    precondition, a plan at a time), and that request is the one calibration observes; smoothed (0.5), on the
    smoothed graph's plans."""
    calls, requests = _spy_needed_ranges(monkeypatch), _spy_observe(monkeypatch)
    config = onnxq.QuantConfig(smooth=smooth)
    result = onnxq.quantize(samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz",
                            config=config)
    planned = [(plans, names) for plans, names in calls if len(plans) > 1]
    assert len(planned) == 1, [len(p) for p, _ in calls]
    plans, names = planned[0]
    assert len(requests) == 1 and requests[0].ranges == tuple(names)
    assert requests[0].histogram_bins == 8192 and not requests[0].in_bodies and len(names) == 4, requests[0]
    assert result.report.calibration_samples > 0


def test_largest_magnitudes_merge_bit_for_bit_in_the_summary(samples_dir, rng):
    """Magnitudes of every MatMul output of the sample transformer over 4 batches: shards observed apart, merged in
    either order, give the one pass's summary bit for bit (a maximum is order-free), and the state survives JSON."""
    model = ir.load(samples_dir / "tiny_transformer.onnx")
    names = tuple(n.outputs[0].name for n in model.graph if n.op_type == "MatMul")
    request = CalibrationRequest((), None, magnitudes=names)
    data = dict(np.load(samples_dir / "tiny_transformer_calib.npz"))
    batches = list(iter_batches({k: v[:32] for k, v in data.items()}, 8))
    whole = observe(model, request, lambda: iter(batches), None, "")
    first, second = (observe(model, request, lambda part=part: iter(part), None, "")
                     for part in (batches[:1], batches[1:]))
    for a, b in ((first, second), (second, first)):
        merged = a.copy()
        merged.merge(b)
        assert merged.to_json() == whole.to_json()
    assert whole.samples == 32 and set(whole.magnitudes) == set(names) and len(names) >= 6
    found = {n: m.largest for n, m in CalibrationSummary.from_json(whole.to_json(), "x").magnitudes.items()}
    assert found == largest_magnitudes(model, names, batches)
    assert all(0.5 < v < 1e4 for v in found.values())  # real activations: finite, of their own scale
