"""A copy of the graph whose outputs are the values calibration observes, run on ONNX Runtime: what the runner and
the channel statistics both read values through."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.calibration.bodies import BodyValues
from onnxq.data.specs import Batch, sample_axis
from onnxq.errors import CalibrationDataError, ort_reason
from onnxq.io import OrtModel
from onnxq.io.irquery import model_names
from onnxq.io.sessions import ORT_ERRORS, session_options
from onnxq.targets.providers import CPU_PROVIDER

__all__ = ["Exposed", "BODY_WAYS"]

# How bodies' values leave their bodies, best first (calibration.bodies): a Loop's bags stacked per iteration
# (linear cost), carried in an accumulator (iterations of any size), or not at all (their nodes go dynamic).
BODY_WAYS = ("stacked", "carried", "none")


class Exposed:
    """A session whose outputs are the named values (or their min, max and size); the model's own outputs and
    whatever only they need are dropped. Values of If / Loop / Scan bodies come out as bags (calibration.bodies);
    `in_bodies` names them."""

    def __init__(self, model: ir.Model, names: list[str], reduce_in_graph: bool, way: str = BODY_WAYS[0]) -> None:
        self.model, self.requested, self.reduced, self.way = model, names, reduce_in_graph, way
        exposed = model.clone()
        taken = model_names(exposed)
        threads = BodyValues(exposed, taken, loops_stack=way == "stacked")
        values = {v.name: v for node in exposed.graph.all_nodes() for v in node.outputs if v.name in names}
        values.update({v.name: v for graph in threads.owner_graphs() for v in graph.inputs if v.name in names})
        missing = [n for n in names if n not in values]
        if missing:
            raise ValueError(f"values not produced by any node: {missing[:3]}")
        exposed.graph.outputs.clear()
        self.in_bodies, self.names = set(), []  # names: those exposed, in output order
        for n in names:
            body = threads.graph_of(values[n])
            if body is not None:
                self.in_bodies.add(n)
                if way == "none" or not threads.observable(body):  # its observer stays empty: the node goes dynamic
                    continue
                exposed.graph.outputs.extend(threads.bags(values[n], body, reduce_in_graph))
            elif reduce_in_graph:
                exposed.graph.outputs.extend(threads.extremes(values[n], exposed.graph))
            else:
                exposed.graph.outputs.append(values[n])
            self.names.append(n)
        RemoveUnusedNodesPass()(exposed)
        self.output_names = [v.name for v in exposed.graph.outputs]
        # Optimizations off: fused kernels would hide the tensors we observe. Nothing left to expose (every value
        # in a body, and the bodies' values dropped): no session.
        self.session = OrtModel(exposed).session(session_options(optimize=False), [CPU_PROVIDER]) \
            if self.output_names else None

    def takes_any_batch(self, batch: Batch) -> bool:
        """Whether the session takes any number of samples: no input it reads has a fixed size over 1 on its
        samples axis, and every input of the batch has that axis (a scalar fed as it is cannot be cut)."""
        for name, array in batch.items():
            axis = sample_axis(batch, name)
            if axis is not None and np.ndim(array) <= axis:
                return False
        for spec in self.session.get_inputs() if self.session is not None else ():
            axis = sample_axis(batch, spec.name) if spec.name in batch else None
            if axis is not None and len(spec.shape) > axis and isinstance(spec.shape[axis], int) \
                    and spec.shape[axis] > 1:
                return False
        return self.session is not None

    @property
    def threaded(self) -> bool:
        """Whether values of bodies are threaded out (calibration.bodies)."""
        return any(n in self.in_bodies for n in self.names)

    def run(self, batch: Batch) -> list[np.ndarray]:
        if self.session is None:
            return []
        try:
            return self.session.run(self.output_names, batch)
        except ORT_ERRORS as e:
            raise CalibrationDataError(f"ONNX Runtime rejected a calibration batch: {ort_reason(e)} — check that the "
                                       "data's values are ones the float model runs on (token ids within its "
                                       "vocabulary, the shapes it takes)") from None
