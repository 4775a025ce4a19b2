"""Graph passes, by what they do: preparation/ (the float model made ready to plan, and the checks before planning),
forms/ (the quantize pass and the rewrite forms it dispatches to: qdq, dynamic, blockwise, …), formats/ (the output
formats' lowerings and the deployed graph's last touches), float16/ (float16 compute), smoothing/ (SmoothQuant's
rescaling on the float graph), graph/ (the builder, contracts and the applying of plans every pass shares)."""

from onnxq.passes.forms.dynamic import InsertDynamicPass
from onnxq.passes.forms.qdq import InsertQdqPass
from onnxq.passes.forms.quantize import QuantizePass
from onnxq.passes.forms.registry import REWRITE_FORMS, RewriteInputs, rewrite_form
from onnxq.passes.preparation.checks import check_model

__all__ = ["InsertDynamicPass", "InsertQdqPass", "QuantizePass", "REWRITE_FORMS", "RewriteInputs", "rewrite_form",
           "check_model"]
