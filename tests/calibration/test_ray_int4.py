"""A 4-bit run calibrated on Ray: 2 workers over 3 shards, calibration.max_samples bounding the whole run; the merged
summary is that of this process reading the shards in turn (onnxq.calibrate, its BLAS on as many threads as it has),
bit for bit (its XᵀX sums too), and the int4 file quantized from it is that process's file, byte for byte. A batch's
XᵀX is made on one BLAS thread (numerics.gram), as a Ray actor runs its BLAS on its one CPU: its last bits follow the
CPU's kernels, not the thread count. The one Ray test of the default run (a local cluster: seconds)."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import onnxq
from onnxq.distributed import calibrate_on_ray

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'onnxq[ray]'")


def test_int4_from_a_ray_calibration_is_the_single_process_file(samples_dir, tmp_path):
    model = samples_dir / "tiny_transformer.onnx"
    data = dict(np.load(samples_dir / "tiny_transformer_calib.npz"))
    folder = tmp_path / "shards"
    folder.mkdir()
    shards = []
    for i, (start, stop) in enumerate(((0, 40), (40, 88), (88, 128))):
        shards.append(folder / f"part{i}.npz")
        np.savez(shards[-1], **{k: v[start:stop] for k, v in data.items()})
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4", symmetric=True),
                               calibration=onnxq.CalibrationConfig(max_samples=96))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        merged = calibrate_on_ray(model, shards, config=config, workers=2)
    finally:
        ray.shutdown()
    with threadpool_limits(limits=2, user_api="blas"):
        single = onnxq.calibrate(model, folder, config=config)  # the folder read whole, in turn
    assert merged.samples == single.samples == 96 and merged.to_json() == single.to_json()
    files = []
    for name, summary in (("ray", merged), ("single", single)):
        files.append(tmp_path / f"{name}.onnx")
        onnxq.quantize(model, calibration_cache=summary, config=config, verify_data=samples_dir /
                       "tiny_transformer_calib.npz", output=files[-1])
    assert files[0].read_bytes() == files[1].read_bytes()
