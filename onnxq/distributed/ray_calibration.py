"""calibrate_on_ray: onnxq calibrate mapped over shards of the data with Ray actors, one per worker, each holding the
model and one ONNX Runtime session for all its shards; their partial summaries (JSON-ready dicts, the format
`python -m onnxq merge` reads) are merged exactly on the caller.

The engine-neutral unit is shard_summary(model, shards, config): a Spark or Dask user maps it over partitions of
shard paths and merges what comes back with onnxq.merge_calibrations (docs/scale/distributed.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from onnxq.data.specs import DataSource
from onnxq.calibration.summary import CalibrationSummary
from onnxq.calibration_api import calibration_job, merge_calibrations
from onnxq.config import QuantConfig
from onnxq.errors import ConfigError
from onnxq.io import load_model
from onnxq.io.custom_ops import custom_op_libraries

__all__ = ["calibrate_on_ray", "shard_summary", "RAY_MISSING"]

RAY_MISSING = ("calibration on Ray needs Ray, which is not installed here — pip install 'onnxq[ray]' (or pip install "
               "ray)")


def shard_summary(model: str | os.PathLike, shards: Sequence[DataSource],
                  config: QuantConfig | Mapping[str, Any] | None = None) -> dict:
    """The partial summary of these shards, as JSON-ready data: what one worker of any engine returns."""
    config = QuantConfig.of(config)
    with custom_op_libraries(config.custom_op_libraries):  # a worker's process registers them itself
        return calibration_job(load_model(model), config).run(list(shards)).to_json()


class _Worker:
    """A Ray actor: the model prepared once, then every shard it is given through one session."""

    def __init__(self, model: str, config: QuantConfig) -> None:
        self.model, self.config = model, config

    def summarize(self, shards: list[DataSource]) -> dict:
        return shard_summary(self.model, shards, self.config)


def calibrate_on_ray(model: str | os.PathLike, shards: Sequence[DataSource], *,
                     config: QuantConfig | Mapping[str, Any] | None = None, workers: int = 2,
                     address: str | None = None) -> CalibrationSummary:
    """Shards (paths every worker can read, or arrays) dealt round-robin to `workers` actors; the merged summary
    equals calibrating on all the shards in one process, bit for bit. address: a running cluster's ("auto", or
    ray://host:port); None starts a local one for this call, and stops it after."""
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    if not shards:
        raise ConfigError("calibration on Ray needs at least one shard of data")
    config = QuantConfig.of(config)  # checked here, before a cluster starts
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        actor = ray.remote(num_cpus=1)(_Worker)
        count = max(1, min(workers, len(shards)))
        pool = [actor.remote(os.fspath(model), config) for _ in range(count)]
        partials = ray.get([w.summarize.remote(list(shards[i::count])) for i, w in enumerate(pool)])
    finally:
        if started:
            ray.shutdown()
    return merge_calibrations(CalibrationSummary.from_json(p, f"Ray worker {i}") for i, p in enumerate(partials))
