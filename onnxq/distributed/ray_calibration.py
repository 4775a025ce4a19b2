"""calibrate_on_ray: onnxq calibrate mapped over shards of the data with Ray actors, one per worker, each holding the
model and one ONNX Runtime session for all its shards; their partial summaries (JSON-ready dicts, the format
`python -m onnxq merge` reads) are merged exactly on the caller.

The engine-neutral unit is shard_summary(model, shards, config): a Spark or Dask user maps it over partitions of
the shards that plan_shards cut (calibration.max_samples bounds the whole run: the first max_samples samples, in
shard order) and merges what comes back with onnxq.merge_calibrations (docs/scale/distributed.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from onnxq.data.axes import read_layout
from onnxq.calibration.shards import Shard, split_samples
from onnxq.data.specs import DataSource, input_specs
from onnxq.calibration.summary import CalibrationSummary
from onnxq.calibration_api import calibrate_shards, merge_calibrations
from onnxq.config import QuantConfig
from onnxq.errors import ConfigError
from onnxq.io import load_model
from onnxq.io.custom_ops import custom_op_libraries

__all__ = ["calibrate_on_ray", "shard_summary", "plan_shards", "Shard", "RAY_MISSING"]

RAY_MISSING = ("calibration on Ray needs Ray, which is not installed here — pip install 'onnxq[ray]' (or pip install "
               "ray)")


def shard_summary(model: str | os.PathLike, shards: Sequence[Shard | DataSource],
                  config: QuantConfig | Mapping[str, Any] | None = None) -> dict:
    """The partial summary of these shards, as JSON-ready data: what one worker of any engine returns. The shards
    are read as onnxq calibrate reads its data (onnxq.calibrate_shards); calibration.max_samples bounds these
    shards together — give the shards plan_shards cut for the whole run to bound it."""
    return calibrate_shards(model, shards, config=config).to_json()


def plan_shards(model: str | os.PathLike, shards: Sequence[Shard | DataSource],
                config: QuantConfig | Mapping[str, Any] | None = None) -> tuple[QuantConfig, list[Shard]]:
    """Made once, on the caller: the config with the layout the first shard's shapes say (every worker reads the
    shards alike), and the shards cut to the run's first calibration.max_samples samples, in order."""
    config = QuantConfig.of(config)
    with custom_op_libraries(config.custom_op_libraries):
        float_model = load_model(model)
    sources = tuple(s.source if isinstance(s, Shard) else s for s in shards)
    layout = read_layout(float_model, config.calibration, sources)[0]
    specs = input_specs(float_model, layout.sample_axes, layout.constant_inputs, layout.unbatched_inputs)
    return config.replace(calibration=layout), split_samples(shards, specs, layout.max_samples)


class _Worker:
    """A Ray actor: the model prepared once, then every shard it is given through one session."""

    def __init__(self, model: str, config: QuantConfig) -> None:
        self.model, self.config = model, config

    def summarize(self, shards: list[Shard]) -> dict:
        return shard_summary(self.model, shards, self.config)


def calibrate_on_ray(model: str | os.PathLike, shards: Sequence[DataSource], *,
                     config: QuantConfig | Mapping[str, Any] | None = None, workers: int = 2,
                     address: str | None = None) -> CalibrationSummary:
    """Shards (paths every worker can read, or arrays) dealt round-robin to `workers` actors; the merged summary
    equals calibrating on all the shards in one process, read in turn, bit for bit (calibration.max_samples: the
    first samples of them all). address: a running cluster's ("auto", or ray://host:port); None starts a local one
    for this call, and stops it after."""
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    if not shards:
        raise ConfigError("calibration on Ray needs at least one shard of data")
    config, shards = plan_shards(model, shards, config)  # checked here, before a cluster starts
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
