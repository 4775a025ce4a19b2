"""quantize() as a flat list of named steps over one RunState (run.py), one small file per step."""

from onnxq.steps.report import build_report
from onnxq.steps.run import STEPS, Step, run_steps
from onnxq.steps.state import RunInputs, RunState

__all__ = ["STEPS", "Step", "run_steps", "RunInputs", "RunState", "build_report"]
