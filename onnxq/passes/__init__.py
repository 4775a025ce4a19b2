"""Graph passes: preconditions, static QDQ insertion, dynamic quantization."""

from onnxq.passes.insert_dynamic import InsertDynamicPass
from onnxq.passes.insert_qdq import InsertQdqPass
from onnxq.passes.prepare import check_model

__all__ = ["InsertDynamicPass", "InsertQdqPass", "check_model"]
