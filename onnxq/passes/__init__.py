"""Graph passes: preconditions; the quantize pass and the rewrite forms it dispatches to (forms.py: qdq, dynamic,
blockwise); output-format lowerings; smoothing."""

from onnxq.passes.forms import REWRITE_FORMS, RewriteInputs, rewrite_form
from onnxq.passes.insert_dynamic import InsertDynamicPass
from onnxq.passes.insert_qdq import InsertQdqPass
from onnxq.passes.prepare import check_model
from onnxq.passes.quantize import QuantizePass

__all__ = ["InsertDynamicPass", "InsertQdqPass", "QuantizePass", "REWRITE_FORMS", "RewriteInputs", "rewrite_form",
           "check_model"]
