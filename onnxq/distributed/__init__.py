"""Calibration sharded over a cluster: each worker turns its shards into a partial summary (one ONNX Runtime session
per worker), and the partials merge exactly into the single-process summary (calibration.summary: min/max,
fixed-grid histograms, channel maxima). Ray is the engine run and tested here, an optional extra
(pip install onnxq[ray]) imported only when asked for; any other engine maps the same two calls
(docs/scale/distributed.md)."""

from onnxq.distributed.ray_calibration import Shard, calibrate_on_ray, plan_shards, shard_summary

__all__ = ["calibrate_on_ray", "shard_summary", "plan_shards", "Shard"]
