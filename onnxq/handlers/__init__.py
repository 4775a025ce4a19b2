"""Per-op planners. Importing this package registers the built-in handlers."""

from onnxq.handlers import (attention, conv, embed_layer_norm, float_only, gather, gemm, lstm,  # noqa: F401
                            matmul)  # registration side effect
from onnxq.handlers.plan import NodePlan, PlanContext, Skip, WeightSpec
from onnxq.handlers.planner import plan_model
from onnxq.handlers.registry import handler_for, register, registered_op_types

__all__ = [
    "NodePlan", "PlanContext", "Skip", "WeightSpec", "plan_model", "handler_for", "register", "registered_op_types",
]
