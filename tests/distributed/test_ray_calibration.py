"""Calibration sharded on Ray: a local cluster of 2 workers started by the test, each an actor
with one ONNX Runtime session over its shards; the merged summary is the single-process one, bit for bit."""

import json

import numpy as np
import pytest

import onnxq
from onnxq.calibration.summary import CalibrationSummary
from onnxq.cli.main import main
from onnxq.distributed import calibrate_on_ray, shard_summary
from onnxq.errors import ConfigError

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'onnxq[ray]'")
# Ray's worker processes start in seconds each (10-30 s a test on 2 busy cores): with the longer tests.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """One local cluster of 2 worker slots for the module (starting one takes seconds): calibrate_on_ray uses a
    cluster this process is connected to, and starts (and stops) its own only when there is none."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def shards(samples_dir, tmp_path_factory):
    """The sample transformer's calibration data cut into 4 shard files, each a whole number of batches (8)."""
    folder = tmp_path_factory.mktemp("shards")
    data = dict(np.load(samples_dir / "tiny_transformer_calib.npz"))
    count = len(next(iter(data.values())))
    paths = []
    for i, start in enumerate(range(0, count - count % 8, 8)):
        paths.append(folder / f"part{i:02d}.npz")
        np.savez(paths[-1], **{k: v[start:start + 8] for k, v in data.items()})
    return paths


def _same(a: CalibrationSummary, b: CalibrationSummary) -> bool:
    return json.dumps(a.to_json(), sort_keys=True) == json.dumps(b.to_json(), sort_keys=True)


def test_two_workers_merge_to_the_single_process_summary(samples_dir, shards):
    model = samples_dir / "tiny_transformer.onnx"
    merged = calibrate_on_ray(model, shards, workers=2)
    single = onnxq.calibrate(model, [dict(np.load(p)) for p in shards])
    assert merged.samples == single.samples == 8 * len(shards) and _same(merged, single)
    # What a Spark or Dask task returns: the same partial format, merged by the same call.
    parts = [CalibrationSummary.from_json(shard_summary(model, shards[i::2]), "part") for i in range(2)]
    assert _same(onnxq.merge_calibrations(parts), single)


def test_smoothing_statistics_merge_exactly_but_their_row_sample(samples_dir, shards):
    """SmoothQuant's per-channel extremes merge exactly; its sample of rows is re-drawn from the shards' samples in
    proportion to the rows each stands for — a sample of the same data, not the same rows."""
    model, config = samples_dir / "tiny_transformer.onnx", onnxq.QuantConfig(smooth="auto")
    merged = calibrate_on_ray(model, shards, config=config, workers=2)
    single = onnxq.calibrate(model, [dict(np.load(p)) for p in shards], config=config)
    assert merged.to_json()["tensors"] == single.to_json()["tensors"] and merged.channels.keys() == single.channels.keys()
    for name, stats in single.channels.items():
        other = merged.channels[name]
        assert {k: v for k, v in other.state().items() if k != "rows"} == {
            k: v for k, v in stats.state().items() if k != "rows"}
        assert other.rows.shape == stats.rows.shape
        assert np.all(other.rows <= stats.high) and np.all(other.rows >= stats.low)


def test_the_command_line_calibrates_a_folder_of_shards_on_ray(samples_dir, shards, tmp_path, capsys):
    out = tmp_path / "calib.json"
    code = main(["calibrate", str(samples_dir / "tiny_transformer.onnx"), "--calib", str(shards[0].parent), "--ray",
                 "--workers", "2", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    assert f"{len(shards)} shards on 2 Ray workers" in capsys.readouterr().out
    single = onnxq.calibrate(samples_dir / "tiny_transformer.onnx", shards[0].parent)
    assert CalibrationSummary.load(out).to_json() == single.to_json()


def test_no_shards_is_one_line():
    with pytest.raises(ConfigError, match="at least one shard"):
        calibrate_on_ray("model.onnx", [])
