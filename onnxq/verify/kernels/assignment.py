"""Placement on a provider that compiles subgraphs (OpenVINO): ORT's graph assignment, node by node.

ORT's profiler shows such a provider's work as one node per compiled subgraph, so the quantized nodes cannot be
looked up in it. The session records instead which provider took each node of the graph it partitioned
(session.record_ep_graph_assignment_info). A quantized node counts as on the provider's integer path when it and
every DequantizeLinear feeding it went into the provider's subgraphs: the provider then sees the Q/DQ pair around
the product and chooses its precision itself (OpenVINO's low-precision transformations run it in int8). Which
providers are read this way is the provider's record (targets.providers: placement "assigned").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import onnx_ir as ir

from onnxq.data.specs import Batch
from onnxq.io import load_model
from onnxq.targets.providers import provider_named
from onnxq.verify.kernels.placement import NodeRun, Placement, profile_placement
from onnxq.io.model_sessions import ModelSource, make_session

__all__ = ["assigned_placement", "read_placement", "PLACEMENT_READERS"]


def assigned_placement(model: ModelSource, provider: str, batch: Batch, quantized: Mapping[str, str]) -> Placement:
    """Each node's provider as ORT assigned it when the session was made (the batch is not run: the assignment
    is made before any run)."""
    session = make_session(model, optimize=True, provider=provider, record_assignment=True)
    runs: dict[str, NodeRun] = {}
    subgraphs = 0
    for assigned in session.get_provider_graph_assignment_info():
        subgraphs += assigned.ep_name == provider
        for node in assigned.get_nodes():
            runs[node.name] = NodeRun(node.name, node.op_type, assigned.ep_name)
    graph = (model if isinstance(model, ir.Model) else load_model(model)).graph
    return Placement(provider, tuple(runs.values()), {n: runs.get(n) for n in quantized}, source="assigned",
                     compiled=_compiled(graph, runs, provider, quantized), subgraphs=subgraphs)


def _compiled(graph: ir.Graph, runs: Mapping[str, NodeRun], provider: str,
              quantized: Mapping[str, str]) -> frozenset[str]:
    """The quantized nodes assigned to the provider together with every DequantizeLinear feeding them."""
    found = set()
    for node in graph.all_nodes():
        name = node.name or ""
        if name not in quantized or name not in runs or runs[name].provider != provider:
            continue
        feeders = [v.producer() for v in node.inputs if v is not None and v.producer() is not None]
        dequantizers = [f for f in feeders if f.op_type == "DequantizeLinear"]
        if dequantizers and all(f.name in runs and runs[f.name].provider == provider for f in dequantizers):
            found.add(name)
    return frozenset(found)


# targets.providers' placement kinds → how a real session's placement is read.
PLACEMENT_READERS: dict[str, Callable[[ModelSource, str, Batch, Mapping[str, str]], Placement]] = {
    "profiled": profile_placement, "assigned": assigned_placement}


def read_placement(model: ModelSource, provider: str, batch: Batch, quantized: Mapping[str, str]) -> Placement:
    """The placement of the quantized nodes on a provider present here, read the way the provider allows."""
    return PLACEMENT_READERS[provider_named(provider).placement](model, provider, batch, quantized)
