"""Shards calibrated apart and merged give the summary of one process reading them in turn, bit for bit: ranges,
histograms, SmoothQuant's channel extremes and GPTQ's XᵀX sums; on data without a batch axis too, and with
calibration.max_samples bounding the whole run (the first samples, in shard order), for 2 and 3 workers. What a
Spark or Dask task runs (onnxq.distributed.shard_summary over the shards plan_shards cut), without Ray."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

import onnxq
from onnxq.calibration.summary import CalibrationSummary
from onnxq.cli.main import main
from onnxq.distributed import plan_shards, shard_summary
from onnxq.errors import CalibrationDataError

INT4 = onnxq.QScheme("int4", symmetric=True)


def _shard_files(folder, arrays: dict[str, np.ndarray], sizes: list[int]) -> list:
    folder.mkdir()
    paths, start = [], 0
    for i, size in enumerate(sizes):
        paths.append(folder / f"part{i}.npz")
        np.savez(paths[-1], **{k: v[start:start + size] for k, v in arrays.items()})
        start += size
    return paths


def _merged(model, paths, config, workers: int) -> CalibrationSummary:
    """Each worker's shards dealt round-robin, merged in reverse: merging is order-free."""
    config, shards = plan_shards(model, paths, config)
    parts = [shard_summary(model, shards[i::workers], config) for i in range(min(workers, len(shards)))]
    return onnxq.merge_calibrations(CalibrationSummary.from_json(p, f"part {i}") for i, p in enumerate(parts[::-1]))


def _without_row_samples(summary: CalibrationSummary) -> str:
    """The summary as JSON, less SmoothQuant's row samples (re-drawn by a merge, in proportion to the rows each
    shard saw: a sample of the same data, not the same rows)."""
    data = summary.to_json()
    for stats in data.get("channels", {}).values():
        stats.pop("rows")
    return json.dumps(data, sort_keys=True)


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("max_samples", [None, 100])
def test_shards_merge_into_the_single_summary_with_moments(samples_dir, tmp_path, workers, max_samples):
    """The sample transformer's 128 samples in shards of 20, 52 and 56 (batches of 8 cut short at each shard's end,
    as one process reading the folder cuts them); 100 samples: 20, 52 and 28."""
    model = samples_dir / "tiny_transformer.onnx"
    data = dict(np.load(samples_dir / "tiny_transformer_calib.npz"))
    paths = _shard_files(tmp_path / "shards", data, [20, 52, 56])
    config = onnxq.QuantConfig(weights=INT4, smooth="auto",
                               calibration=onnxq.CalibrationConfig(max_samples=max_samples))
    single = onnxq.calibrate(model, paths[0].parent, config=config)
    merged = _merged(model, paths, config, workers)
    assert merged.samples == single.samples == (max_samples or 128)
    assert len(single.moments.weights) == 6 and single.histogram_bins == 8192 and single.channels
    assert _without_row_samples(merged) == _without_row_samples(single)
    for key in single.moments.weights:  # the means GPTQ reads, bit for bit
        assert np.array_equal(merged.moments.means()[key], single.moments.means()[key])


def test_a_two_thread_process_is_the_merge_of_one_thread_shards(samples_dir, tmp_path):
    """The single process's BLAS on 2 threads, each shard's on 1 (as a Ray actor runs it): the XᵀX sums, and so
    the whole summary, are the same bits (numerics.gram makes each batch's product on one BLAS thread; on 2 threads
    OpenBLAS's product differs in the last bits of hundreds of the 4096 elements)."""
    model = samples_dir / "tiny_transformer.onnx"
    data = dict(np.load(samples_dir / "tiny_transformer_calib.npz"))
    paths = _shard_files(tmp_path / "shards", data, [40, 48, 40])
    config = onnxq.QuantConfig(weights=INT4)
    with threadpool_limits(limits=2, user_api="blas"):
        single = onnxq.calibrate(model, paths[0].parent, config=config)
    with threadpool_limits(limits=1, user_api="blas"):
        merged = _merged(model, paths, config, workers=3)
    assert merged.samples == single.samples == 128 and len(single.moments.weights) == 6
    assert json.dumps(merged.to_json(), sort_keys=True) == json.dumps(single.to_json(), sort_keys=True)


def _unbatched_model() -> onnx.ModelProto:
    """x [3, 16] (no batch axis) → MatMul w [16, 8]."""
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 1, (16, 8)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("workers", [2, 3])
def test_data_without_a_batch_axis_is_read_as_calibrate_reads_it(rng, tmp_path, workers):
    """40 samples of the whole input [3, 16] in shards of 9, 14 and 17, each fed alone; 30 samples asked."""
    model = tmp_path / "unbatched.onnx"
    onnx.save(_unbatched_model(), model)
    paths = _shard_files(tmp_path / "shards", {"x": rng.normal(0, 1, (40, 3, 16)).astype(np.float32)}, [9, 14, 17])
    config = onnxq.QuantConfig(weights=INT4, calibration=onnxq.CalibrationConfig(max_samples=30))
    single = onnxq.calibrate(model, paths[0].parent, config=config)
    merged = _merged(model, paths, config, workers)
    assert merged.samples == single.samples == 30 and single.observers["x"].batches == 30
    assert json.dumps(merged.to_json(), sort_keys=True) == json.dumps(single.to_json(), sort_keys=True)


def test_a_summary_without_moments_says_so(samples_dir, tmp_path, capsys):
    """A summary calibrated without --weights int4 (or written by an older onnxq, version 1): a 4-bit run that asks
    for GPTQ is one line and exit 2, nothing written; with blocks.method auto it rounds to nearest and says why.
    Merging it with one holding moments is refused."""
    model, data = samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz"
    plain = onnxq.calibrate(model, data)
    old = plain.to_json() | {"version": 1}
    cache = tmp_path / "old.json"
    cache.write_text(json.dumps(old))
    toml = tmp_path / "gptq.toml"
    toml.write_text('[blocks]\nmethod = "gptq"\n')
    out = tmp_path / "q.onnx"
    code = main([str(model), "--weights", "int4", "--config", str(toml), "--calib-cache", str(cache), "-o", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not out.exists() and len(err) == 1
    assert "blocks.method = gptq fits the weights to their activations" in err[0] and "--calib-cache" in err[0]
    result = onnxq.quantize(model, calibration_cache=cache, config=onnxq.QuantConfig(weights=INT4))
    assert any("the calibration cache holds no second moments" in n for n in result.report.notes)
    with_moments = onnxq.calibrate(model, data, config=onnxq.QuantConfig(weights=INT4))
    with pytest.raises(CalibrationDataError, match="with and without the 4-bit weights' second moments"):
        onnxq.merge_calibrations([with_moments, plain])


def test_the_command_line_keeps_the_moments_and_quantize_reads_no_data(samples_dir, tmp_path, capsys):
    """calibrate --weights int4 writes the XᵀX sums; quantize --weights int4 --calib-cache writes the file a run on
    the data itself writes (verified on the same data: nothing held back), byte for byte."""
    model, data = samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz"
    cache = tmp_path / "calib.json"
    assert main(["calibrate", str(model), "--calib", str(data), "--weights", "int4", "-o", str(cache)]) == 0
    assert "8 tensors, second moments of 6 weights, 128 samples" in capsys.readouterr().out
    from_cache, direct = tmp_path / "cache.onnx", tmp_path / "direct.onnx"
    assert main([str(model), "--weights", "int4", "--calib-cache", str(cache), "--verify-data", str(data),
                 "-o", str(from_cache)]) == 0
    assert "second moments of 6 weight(s) from calibration cache" in capsys.readouterr().out
    assert main([str(model), "--weights", "int4", "--calib", str(data), "--verify-data", str(data),
                 "-o", str(direct)]) == 0
    assert from_cache.read_bytes() == direct.read_bytes()
