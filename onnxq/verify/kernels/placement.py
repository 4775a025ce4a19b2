"""Which kernel ran each node, on which execution provider — read from ONNX Runtime's profiler.

The profile lists the graph ORT actually executed, after its optimizations, with the provider of every node;
fused nodes keep the name of the node they replaced (a quantized MatMul becomes MatMulIntegerToFloat under the
same name), so each quantized node of the model can be looked up. A placement is per provider: a quantized node
counts as on an integer kernel of that provider only when it ran there — a CUDA session's MatMulIntegerToFloat
ran on the CPU (no CUDA kernel), with a copy each way, and is counted as a fallback. Where a provider is absent,
verify.kernels.predict gives the same record from ORT's kernel registrations (targets.ort_kernels), marked predicted.
"""

from __future__ import annotations

import collections
import dataclasses
import html
import json
import math
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

import onnx
import onnx_ir as ir
import onnxruntime as ort

from onnxq.data.specs import Batch
from onnxq.errors import OutputPathError
from onnxq.handlers.registry import product_op_types
from onnxq.targets.ort_kernels import INTEGER_KERNELS, MEMCPY_OPS
from onnxq.io.model_sessions import ModelSource, make_session
from onnxq.targets.providers import CPU_PROVIDER, provider_named, short_provider_name

__all__ = ["INTEGER_KERNELS", "float_product_kernels",
           "NodeRun", "Placement", "profile_placement", "profiled_session", "quantized_nodes", "short"]

_CPU = CPU_PROVIDER
# A node whose every output is a few integers computes shapes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape).
# ORT's GPU providers place such nodes on the CPU on purpose (GetCpuPreferredNodes: their values are read on the
# host), although they have GPU kernels: seen on the H100 (MiniLM, onnxruntime-gpu 1.31.1: 13 Gather, 13
# Unsqueeze, 12 Concat). Rank is at most 8 in practice, so 8 values bound a shape.
_SHAPE_TYPES = frozenset({"int64", "int32"})
_SHAPE_VALUES = 8
_LAYOUT_TOKEN = re.compile(r"_token_\d+$")
# ORT's float forms of a planned product after its own fusions (MatMul + Add -> FusedMatMul, Conv + Relu ->
# FusedConv).
_FUSED_FLOAT = frozenset({"FusedMatMul", "FusedGemm", "FusedConv"})


def short(provider: str) -> str:
    return short_provider_name(provider)


def float_product_kernels() -> frozenset[str]:
    """Kernels that compute a planned product in float: the handler registry's product op types (a new op counts
    as soon as its planner is registered) and ORT's fused float forms."""
    return product_op_types() | _FUSED_FLOAT


@dataclasses.dataclass(frozen=True)
class NodeRun:
    name: str
    op_type: str  # the kernel ORT ran (after fusion)
    provider: str
    # Each output's element type and number of values, where the profile records them (ORT's output_type_shape).
    outputs: tuple[tuple[str, int], ...] = ()

    @property
    def shape_arithmetic(self) -> bool:
        """Whether every output is a few integers: a shape computation."""
        return bool(self.outputs) and all(t in _SHAPE_TYPES and n <= _SHAPE_VALUES for t, n in self.outputs)


@dataclasses.dataclass(frozen=True)
class Placement:
    provider: str
    runs: tuple[NodeRun, ...]
    # For each quantized node of the model: the kernel that ran it (None: not found, folded or fused away).
    quantized: dict[str, NodeRun | None]
    # How it was found: "profiled" (a real session, one batch) or "predicted" (ORT's kernel registrations, the
    # provider being absent here: targets.ort_kernels says where the table comes from).
    source: str = "profiled"
    # Where a prediction and the real session disagree (the provider present): each node, predicted vs ran.
    mismatches: tuple[str, ...] = ()
    # "assigned" (a provider that compiles subgraphs, targets.providers): the quantized nodes compiled into its
    # subgraphs together with the DequantizeLinear nodes feeding them — the provider runs those on its own integer
    # path — and how many subgraphs it made.
    compiled: frozenset[str] = frozenset()
    subgraphs: int = 0

    @property
    def kernels(self) -> dict[str, int]:
        """Executed kernels by op type, copies included."""
        return dict(sorted(collections.Counter(r.op_type for r in self.runs).items()))

    @property
    def by_provider(self) -> dict[str, int]:
        return dict(collections.Counter(r.provider for r in self.runs))

    def _here(self, kinds: frozenset[str]) -> list[str]:
        return [n for n, r in self.quantized.items() if r is not None and r.provider == self.provider
                and r.op_type in kinds]

    @property
    def integer(self) -> list[str]:
        """Quantized nodes that ran on an integer or low-bit kernel of this provider (or were compiled into its
        subgraphs with their DequantizeLinear nodes)."""
        return [n for n in self._here(INTEGER_KERNELS | float_product_kernels())
                if n in self.compiled or self.quantized[n].op_type in INTEGER_KERNELS]

    @property
    def float_fallbacks(self) -> list[str]:
        """Quantized nodes that ran on this provider as DequantizeLinear + a float product."""
        return [n for n in self._here(float_product_kernels()) if n not in self.compiled]

    @property
    def unplanned_integer(self) -> list[NodeRun]:
        """Integer kernels this provider ran for no quantized node: ORT quantized a node onnxq left float (its
        WeightBiasQuantization of a float Conv between quantized ones did): the report's float node ran int8."""
        matched = {id(r) for r in self.quantized.values() if r is not None}
        return [r for r in self.runs if r.provider == self.provider and r.op_type in INTEGER_KERNELS
                and id(r) not in matched]

    @property
    def elsewhere(self) -> list[NodeRun]:
        """Quantized nodes that ran on another provider than this one (no kernel here for their types)."""
        return [r for r in self.quantized.values() if r is not None and r.provider != self.provider]

    def _on_cpu(self) -> list[NodeRun]:
        if self.provider == _CPU:
            return []
        return [r for r in self.runs if r.provider == _CPU and r.op_type not in MEMCPY_OPS]

    @property
    def cpu_fallbacks(self) -> list[NodeRun]:
        """Nodes (copies and shape arithmetic excluded) that ran on the CPU although another provider was asked
        for."""
        return [r for r in self._on_cpu() if not r.shape_arithmetic]

    @property
    def cpu_shape_nodes(self) -> list[NodeRun]:
        """Shape arithmetic the provider left to the CPU on purpose (not a fallback: ORT reads shapes on the host)."""
        return [r for r in self._on_cpu() if r.shape_arithmetic]

    @property
    def copies(self) -> int:
        """Copies between devices ORT inserted (MemcpyFromHost / MemcpyToHost nodes)."""
        return sum(r.op_type in MEMCPY_OPS for r in self.runs)

    def text(self) -> list[str]:
        """The summary's lines: kernels on this provider, then what did not run as planned."""
        where = short(self.provider)
        here = [r for r in self.runs if r.provider == self.provider]
        integer = collections.Counter(r.op_type for r in here if r.op_type in INTEGER_KERNELS)
        listed = ", ".join(f"{n} {op}" for op, n in integer.most_common()) or "none"
        floats = sum(r.op_type in float_product_kernels() for r in here)
        lines = [self._headline(where, listed, floats)]
        if self.cpu_shape_nodes:
            ops = collections.Counter(r.op_type for r in self.cpu_shape_nodes)
            lines.append(f"  {len(self.cpu_shape_nodes)} shape computation(s) on the CPU, where ORT places them "
                         "(outputs of a few integers): " + ", ".join(f"{n} {op}" for op, n in ops.most_common(4)))
        return lines + [f"  ! {finding}" for finding in self.findings()]

    def brief(self) -> str:
        """The summary's one line: how many quantized nodes run on integer kernels, and how that is known."""
        where = short(self.provider)
        if self.source == "assigned":
            return (f"{len(self.integer)}/{len(self.quantized)} quantized nodes compiled into {where} with their "
                    f"DequantizeLinear (ORT's graph assignment: {where} runs them on its int8 path)")
        how = "" if self.source == "profiled" else " (predicted: no such provider here)"
        return f"{len(self.integer)}/{len(self.quantized)} quantized nodes on integer kernels of {where}{how}"

    def _headline(self, where: str, integer: str, floats: int) -> str:
        if self.source == "assigned":
            return (f"ORT {where} placement (ORT's graph assignment: {self.subgraphs} compiled subgraph(s)): "
                    f"{len(self.integer)}/{len(self.quantized)} quantized nodes compiled into {where} with their "
                    f"DequantizeLinear, which runs them on its int8 path; {len(self.runs)} nodes in all, "
                    f"{self.by_provider.get(self.provider, 0)} on {where}")
        how = "" if self.source == "profiled" else " (predicted: no such provider here; ORT's kernel registrations)"
        return (f"ORT {where} kernels{how}: integer {integer}; float MatMul/Gemm/Conv {floats} "
                f"({len(self.integer)}/{len(self.quantized)} quantized nodes on integer kernels of {where})")

    def findings(self) -> list[str]:
        found = []
        where = short(self.provider)
        if self.float_fallbacks:
            advice = provider_named(self.provider).float_product_advice
            advice = f" — {advice}" if advice else ""
            ops = "/".join(sorted({self.quantized[n].op_type for n in self.float_fallbacks}))
            found.append(f"{len(self.float_fallbacks)} quantized node(s) ran on {where} as DequantizeLinear + float "
                         f"{ops}{advice}")
        if self.elsewhere:
            ops = collections.Counter(f"{r.op_type} on {short(r.provider)}" for r in self.elsewhere)
            found.append(f"{len(self.elsewhere)} quantized node(s) fell back from {where} (no {where} kernel for "
                         "their types): " + ", ".join(f"{n} {op}" for op, n in ops.most_common(4)))
        if self.unplanned_integer:
            first = self.unplanned_integer[0]
            found.append(f"{len(self.unplanned_integer)} integer kernel(s) ran for node(s) onnxq left float (e.g. "
                         f"{first.name} as {first.op_type}): ORT quantized them itself")
        missing = [n for n, r in self.quantized.items() if r is None]
        if missing:
            found.append(f"{len(missing)} quantized node(s) not found in the executed graph (folded or fused; inside "
                         "an If / Loop / Scan body: a branch not taken, or renamed by ORT's fusion in the body)")
        if self.cpu_fallbacks:
            ops = collections.Counter(r.op_type for r in self.cpu_fallbacks)
            found.append(f"{len(self.cpu_fallbacks)} node(s) fell back to CPU: "
                         + ", ".join(f"{n} {op}" for op, n in ops.most_common(6))
                         + (f"; {self.copies} copies between devices" if self.copies else ""))
        if self.mismatches:
            found.append(f"the kernel table predicted {len(self.mismatches)} quantized node(s) otherwise than this "
                         f"session ran them (e.g. {self.mismatches[0]}): targets/ort_kernels.py needs updating for "
                         f"onnxruntime {ort.__version__}")
        return found

    def html(self) -> str:
        kernels = ", ".join(f"{n} {html.escape(op)}" for op, n in self.kernels.items())
        how = "predicted from ORT's kernel registrations" if self.source == "predicted" else "ran"
        return (f"<p>Kernels ORT {how} on {html.escape(short(self.provider))}: {kernels} "
                f"({len(self.integer)}/{len(self.quantized)} quantized nodes on integer kernels there)</p>"
                + "".join(f"<p class='fail'>{html.escape(f)}</p>" for f in self.findings()))

    def to_dict(self) -> dict:
        return {"provider": self.provider, "source": self.source, "kernels": self.kernels,
                "by_provider": self.by_provider, "integer": self.integer, "float_fallbacks": self.float_fallbacks,
                "elsewhere": [_run_dict(r) for r in self.elsewhere], "copies": self.copies,
                "cpu_fallbacks": [_run_dict(r) for r in self.cpu_fallbacks],
                "cpu_shape_nodes": [_run_dict(r) for r in self.cpu_shape_nodes],
                "quantized": {n: (None if r is None else _run_dict(r)) for n, r in self.quantized.items()},
                "mismatches": list(self.mismatches), "findings": self.findings(),
                **({"compiled": sorted(self.compiled), "subgraphs": self.subgraphs} if self.source == "assigned" else {})}


def _run_dict(run: NodeRun) -> dict:
    return {"name": run.name, "op_type": run.op_type, "provider": run.provider}


def quantized_nodes(model: ModelSource) -> dict[str, str]:
    """Nodes of a quantized model that do int8 work: consumers of a DequantizeLinear output (QDQ), integer
    operators (MatMulInteger, QOperator's MatMulIntegerToFloat / QGemm). Name → op type. Weights are not loaded."""
    graph = (model if isinstance(model, ir.Model) else ir.from_proto(onnx.load(str(model),
                                                                                 load_external_data=False))).graph
    found, products = {}, float_product_kernels()
    for node in graph.all_nodes():  # subgraphs too: ORT profiles the nodes of the bodies it runs
        if node.op_type in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"):
            continue
        producers = {v.producer().op_type for v in node.inputs if v is not None and v.producer() is not None}
        if node.op_type in INTEGER_KERNELS or (producers & {"DequantizeLinear"} and node.op_type in products):
            found[node.name or ""] = node.op_type
    return found


def profile_placement(model: ModelSource, provider: str, batch: Batch, quantized: Mapping[str, str]) -> Placement:
    """Run one batch with ORT's profiler on the provider (all optimizations on, as deployed)."""
    return profiled_session(model, provider, batch, quantized)[1]


def profiled_session(model: ModelSource, provider: str, batch: Batch,
                     quantized: Mapping[str, str]) -> tuple[ort.InferenceSession, Placement]:
    """profile_placement, and the session it profiled (profiling ended: later runs are not profiled), for a caller
    that goes on running the model as deployed."""
    with tempfile.TemporaryDirectory(prefix="onnxq-profile-") as scratch:
        session = make_session(model, optimize=True, provider=provider,
                               profile_prefix=str(Path(scratch) / "profile"))
        session.run(None, batch)
        try:
            events = json.loads(Path(session.end_profiling()).read_text())
        except (OSError, ValueError) as e:  # ORT wrote it into the temporary folder: a full disk cuts it short
            raise OutputPathError(f"onnxruntime's profile of the quantized model could not be read back from the "
                                  f"temporary folder ({type(e).__name__}) — is that disk full? Free some space, or "
                                  "set verify.check_kernels = false") from None
    return session, placement_from_profile(provider, events, quantized)


def placement_from_profile(provider: str, events: list[dict], quantized: Mapping[str, str]) -> Placement:
    """The placement an ORT profile (its JSON events) records: also how recorded profiles (tests' fixtures of a
    GPU run) are read."""
    runs = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith("_kernel_time"):
            node = name[: -len("_kernel_time")]
            args = event["args"]
            runs[node] = NodeRun(node, args.get("op_name", "?"), args.get("provider", "?"),
                                 _outputs(args.get("output_type_shape", ())))
    # ORT's layout transformer (NCHW → NHWC for QLinearConv, MaxPool) renames the nodes it rebuilds "<name>_token_<n>".
    relaid = {_LAYOUT_TOKEN.sub("", name): run for name, run in runs.items()}
    return Placement(provider, tuple(runs.values()), {n: runs.get(n) or relaid.get(n) for n in quantized})


def _outputs(type_shapes: list) -> tuple[tuple[str, int], ...]:
    """ORT's output_type_shape ([{"int64": [3]}, ...]) as (element type, number of values) per output."""
    found = []
    for entry in type_shapes:
        for element_type, shape in entry.items():
            found.append((element_type, int(math.prod(shape))))
    return tuple(found)
