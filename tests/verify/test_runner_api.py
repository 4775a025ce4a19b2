"""verify.runner, the API the searches use: a candidate's outputs compared batch by batch exactly as the gate's own
accumulator compares them, each candidate from nothing; the budgets each bar leaves."""

import math

import numpy as np

from onnxq.config import Tolerance, VerifyConfig
from onnxq.verify.metrics import MetricsAccumulator
from onnxq.verify.runner import OutputComparison, bar_budgets
from onnxq.verify.tasks.types import OutputTask


def test_a_comparison_gives_the_gate_s_figures_and_starts_each_candidate_from_nothing(rng):
    top1 = OutputTask("top1", "class scores")
    reference = [rng.normal(size=(8, 10)).astype(np.float32) for _ in range(3)]
    noisy = [r + rng.normal(0, 0.3, r.shape).astype(np.float32) for r in reference]
    comparison = OutputComparison(["logits"], {"logits": top1}, None)
    comparison.start()
    for ref, got in zip(reference, noisy):
        comparison.add([ref], [got], samples=8)
    figures, task = comparison.result()
    gate = MetricsAccumulator(top1)
    for ref, got in zip(reference, noisy):
        gate.add(ref, got)
    assert task is None and figures["logits"] == gate.result()
    assert 0.9 < figures["logits"].cosine_mean < 0.999 and figures["logits"].samples == 24
    comparison.start()  # the next candidate: identical outputs, nothing left of the last one
    for ref in reference:
        comparison.add([ref], [ref], samples=8)
    again, _ = comparison.result()
    assert again["logits"].samples == 24 and again["logits"].cosine_mean == 1.0 and math.isinf(again["logits"].sqnr_db)


def test_budgets_are_what_each_bar_leaves():
    config = VerifyConfig(tolerance=Tolerance(min_cosine=0.98))
    budgets = bar_budgets(config, ["embedding", "logits"], {"logits": OutputTask("top1", "class scores")})
    assert math.isclose(budgets["embedding"], 0.02, abs_tol=1e-12)
    assert math.isclose(budgets["logits"], 0.02, abs_tol=1e-12)
    assert math.isclose(budgets["task:logits"], 0.01, abs_tol=1e-12)  # 1 - top-1's 0.99 bar
    assert "task:embedding" not in budgets
