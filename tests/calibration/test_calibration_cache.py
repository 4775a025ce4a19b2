"""Calibration summaries: cache round trip, stale-cache refusal, shards merged equal the single run, CLI."""

import json

import numpy as np
import pytest

import onnxq
from onnxq.cli.main import main
from onnxq.errors import CalibrationDataError


@pytest.fixture
def transformer(samples_dir):
    return samples_dir / "tiny_transformer.onnx", dict(np.load(samples_dir / "tiny_transformer_calib.npz"))


def _ranges(result):
    return result.report.ranges


def test_cache_is_written_then_read_without_calibrating(transformer, tmp_path):
    model, data = transformer
    cache = tmp_path / "calib.json"
    first = onnxq.quantize(model, data, calibration_cache=cache)
    assert cache.is_file() and json.loads(cache.read_text())["format"] == "onnxq-calibration"
    calls = []
    second = onnxq.quantize(model, data, calibration_cache=cache, progress=calls.append)
    assert calls == []  # no calibration pass
    assert _ranges(second) == _ranges(first)
    assert any("calibration cache" in n for n in second.report.notes)
    # The same samples are held out for verification as in the run that wrote the cache.
    assert second.report.verification.samples == first.report.verification.samples == 12
    # No data at all: the cache alone quantizes statically; verification falls back to synthetic inputs, loudly.
    third = onnxq.quantize(model, calibration_cache=cache)
    assert third.report.mode == "static" and _ranges(third) == _ranges(first)
    assert third.report.verification.data == "synthetic inputs"
    assert any("synthetic" in n for n in third.report.notes) and any("cache" in n for n in third.report.notes)


def test_one_cache_serves_every_method_and_setting(transformer, tmp_path):
    model, data = transformer
    cache = tmp_path / "calib.json"
    onnxq.quantize(model, data, calibration_cache=cache, verify_data=data)  # all 128 samples calibrate
    for method in ("avgminmax", "percentile", "entropy", "mse"):
        config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(method=method))
        cached = onnxq.quantize(model, calibration_cache=cache, config=config, verify_data=data)
        direct = onnxq.quantize(model, data, config=config, verify_data=data)
        assert _ranges(cached) == _ranges(direct), method
    attention = onnxq.QuantConfig(quantize_activation_matmul=True)
    assert onnxq.quantize(model, calibration_cache=cache, config=attention, verify_data=data).report.left_float == ()


def test_stale_cache_is_refused(transformer, samples_dir, tmp_path):
    model, data = transformer
    cache = tmp_path / "calib.json"
    onnxq.quantize(model, data, calibration_cache=cache)
    other = onnxq.calibrate(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz")
    with pytest.raises(CalibrationDataError, match="made for another model"):
        onnxq.quantize(model, data, calibration_cache=other)
    # Same graph, one weight changed: also another model.
    import onnx_ir as ir

    changed = ir.load(model)
    w = changed.graph.initializers["attention.query.weight"]
    w.const_value = ir.tensor(w.const_value.numpy() * 1.01, name=w.name)
    with pytest.raises(CalibrationDataError, match="made for another model"):
        onnxq.quantize(changed, calibration_cache=cache, verify_data=data)


def test_damaged_or_foreign_files_are_refused(tmp_path):
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(CalibrationDataError, match="not an onnxq calibration summary"):
        onnxq.CalibrationSummary.load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("not json")
    with pytest.raises(CalibrationDataError, match="not JSON"):
        onnxq.CalibrationSummary.load(tmp_path / "y.json")


def test_shards_merged_equal_the_single_run(transformer, tmp_path):
    model, data = transformer
    ids = data["input_ids"]
    # Shards cut at batch boundaries (batch size 8): average MinMax depends on how samples are batched.
    whole = onnxq.calibrate(model, {"input_ids": ids})
    shards = [onnxq.calibrate(model, {"input_ids": part}) for part in (ids[:40], ids[40:56], ids[56:])]
    for order in (shards, shards[::-1]):
        merged = onnxq.merge_calibrations(order)
        assert merged.samples == whole.samples == 128
        for name, observer in whole.observers.items():
            other = merged.observers[name]
            np.testing.assert_array_equal(other.histogram.counts, observer.histogram.counts)
            for method in ("minmax", "percentile", "entropy", "mse"):
                assert other.range(method) == observer.range(method)
            assert other.range("avgminmax") == pytest.approx(observer.range("avgminmax"), rel=1e-12)
    # The shard files merged by the CLI give the same quantized model as calibrating on everything.
    paths = []
    for i, s in enumerate(shards):
        paths.append(str(s.save(tmp_path / f"shard{i}.json")))
    assert main(["merge", *paths, "-o", str(tmp_path / "merged.json")]) == 0
    whole.save(tmp_path / "whole.json")
    config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(method="percentile"))
    a = onnxq.quantize(model, calibration_cache=tmp_path / "merged.json", config=config, verify_data=data,
                       output=tmp_path / "a.onnx")
    b = onnxq.quantize(model, calibration_cache=tmp_path / "whole.json", config=config, verify_data=data,
                       output=tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert a.report.passed and b.report.passed


def test_cli_calibrate_then_quantize_from_the_cache(transformer, samples_dir, tmp_path, capsys):
    model, _ = transformer
    data = str(samples_dir / "tiny_transformer_calib.npz")
    assert main(["calibrate", str(model), "--calib", data, "-o", str(tmp_path / "s.json")]) == 0
    assert "128 samples" in capsys.readouterr().out
    code = main([str(model), "--calib-cache", str(tmp_path / "s.json"), "--verify-data", data, "--method", "mse",
                 "-o", str(tmp_path / "q.onnx"), "--report", str(tmp_path / "r.json")])
    assert code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["config"]["calibration"]["method"] == "mse" and report["calibration_samples"] == 128
    # A stale cache is one line and exit 2.
    assert main([str(samples_dir / "mlp.onnx"), "--calib-cache", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "made for another model" in err
    assert main(["merge", str(tmp_path / "nope.json"), "-o", str(tmp_path / "m.json")]) == 2


def test_summaries_that_cannot_merge_say_how_to_make_them_again(transformer, samples_dir):
    model, data = transformer
    plain = onnxq.calibrate(model, data)
    other_model = onnxq.calibrate(samples_dir / "mlp.onnx", dict(np.load(samples_dir / "mlp_calib.npz")))
    smoothed = onnxq.calibrate(model, data, config=onnxq.QuantConfig(smooth="auto"))
    for second, fix in ((other_model, "calibrate every shard with the same model file"),
                        (smoothed, "calibrate every shard with --smooth, or none")):
        with pytest.raises(CalibrationDataError, match=r"^cannot merge calibration summaries [^\n]* — ") as refused:
            onnxq.merge_calibrations([plain, second])
        assert fix in str(refused.value)
