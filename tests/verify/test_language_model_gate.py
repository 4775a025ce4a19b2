"""A language model's gate: its next-token logits judged by the perplexity ratio on the data's own next
tokens (next-token agreement reported), its cache outputs (present.*) as state, reported and judged through the
logits. The default bar passes good W8A8 (1.03x) and 4-bit (1.10x) models and fails the 1.6x static one."""

import math
import tracemalloc

import numpy as np
import pytest

import onnxq
from onnxq.verify.metrics import MetricsAccumulator, Operand, OutputMetrics
from onnxq.verify.outcome import failures_for, task_tolerances
from onnxq.verify.tasks.measures import next_token_nll
from onnxq.verify.tasks.types import OutputTask, PERPLEXITY_BAR

TASKS = {"logits": OutputTask("next-token", "test", labels="input_ids"), "present.0.key": OutputTask("state", "test")}


def test_next_token_nll_is_the_direct_count(rng):
    logits = rng.normal(0, 2, (2, 5, 7))
    tokens = rng.integers(0, 7, (2, 5))
    mask = np.array([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])  # left padding: the first pair of sample 0 is not scored
    total, count = 0.0, 0
    for i in range(2):
        for t in range(4):
            if mask[i, t] and mask[i, t + 1]:
                p = np.exp(logits[i, t]) / np.exp(logits[i, t]).sum()
                total -= math.log(p[tokens[i, t + 1]])
                count += 1
    got = next_token_nll(logits, tokens, mask)
    assert got[1] == count == 7 and got[0] == pytest.approx(total, rel=1e-12)
    # A mask over past and new tokens (a decode step): its last `sequence` columns are the tokens'.
    with_past = np.concatenate([np.ones((2, 3), np.int64), mask], axis=1)
    assert next_token_nll(logits, tokens, with_past) == got


def test_a_window_s_log_softmax_is_made_a_few_positions_at_a_time_with_the_same_figures(rng):
    """SmolLM2's window: 128 positions × 49,152 classes. Its float64 log-softmax whole held three 50 MB copies; a
    few positions at a time hold under 20 MB, and each row's figures are its own: the same sums bit for bit."""
    logits = rng.normal(0, 5, (1, 128, 49152)).astype(np.float32)
    tokens = rng.integers(0, 49152, (1, 128))
    scores = logits[0, :-1].astype(np.float64)
    top = scores.max(axis=-1, keepdims=True)
    whole = top[:, 0] + np.log(np.exp(scores - top).sum(axis=-1)) - scores[np.arange(127), tokens[0, 1:]]
    del scores, top
    tracemalloc.start()
    try:
        got = next_token_nll(logits, tokens, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == (float(whole.sum()), 127)
    assert peak < 32 * 2**20, peak


def test_the_accumulator_measures_perplexity_when_the_logits_carry_their_tokens(rng):
    logits = rng.normal(0, 1, (4, 6, 9))
    tokens = rng.integers(0, 9, (4, 6))
    reference = Operand(logits)
    reference.tokens = (tokens, None)
    accumulator = MetricsAccumulator(TASKS["logits"])
    accumulator.add(reference, logits * 0.5)  # flatter: the float model's tokens less likely, or more
    m = accumulator.result()
    nll = next_token_nll(logits, tokens, None)[0], next_token_nll(logits * 0.5, tokens, None)[0]
    assert m.scored_tokens == 20
    assert m.perplexity_ratio == pytest.approx(math.exp((nll[1] - nll[0]) / 20), rel=1e-12)
    unscored = MetricsAccumulator(TASKS["logits"])
    unscored.add(Operand(logits), logits)  # no tokens: no perplexity, and the numeric bars judge
    assert unscored.result().perplexity_ratio is None


def _metrics(ratio: float, cosine: float) -> OutputMetrics:
    return OutputMetrics(samples=48, max_abs_error=3.0, mean_abs_error=0.5, cosine_mean=cosine, cosine_min=cosine,
                         sqnr_db=12.0, task="next-token", task_agreement=0.83, task_units=6096,
                         perplexity_reference=44.31, perplexity=44.31 * ratio, scored_tokens=6096)


@pytest.mark.parametrize("ratio, cosine, passes", [
    (1.022, 0.995, True),   # W8A8 per token + SmoothQuant (SmolLM2: 1.022-1.024x)
    (1.103, 0.984, True),   # 4-bit GPTQ (1.103x)
    (1.106, 0.90, True),    # a lower cosine does not fail what the perplexity passes
    (1.637, 0.90, False),   # static int8 per tensor (1.637x): fails
])
def test_the_default_bar_passes_the_good_language_models_and_fails_the_bad(ratio, cosine, passes):
    tolerance = task_tolerances(onnxq.VerifyConfig(), TASKS, {})("logits")
    assert tolerance.max_perplexity_ratio == PERPLEXITY_BAR == 1.15
    failures = failures_for(_metrics(ratio, cosine), tolerance)
    assert (not failures) == passes
    if not passes:
        assert failures == ("perplexity 1.637x float's > 1.15x (72.54 vs 44.31 over 6096 next tokens)",)


def test_cache_outputs_are_reported_and_an_output_tolerance_still_gates_them():
    state = OutputMetrics(samples=48, max_abs_error=1.0, mean_abs_error=0.1, cosine_mean=0.966, cosine_min=0.9,
                          sqnr_db=10.0)
    # SmolLM2-135M in 4 bits at 1.10x: 11 of its 60 present.* outputs at cosine 0.966-0.98, under a numeric bar.
    assert failures_for(state, task_tolerances(onnxq.VerifyConfig(), TASKS, {})("present.0.key")) == ()
    own = onnxq.VerifyConfig(output_tolerances={"present.0.key": onnxq.Tolerance(min_cosine=0.98)})
    assert failures_for(state, task_tolerances(own, TASKS, {})("present.0.key")) == ("cosine 0.9660 < 0.98",)
    stricter = onnxq.VerifyConfig(output_tolerances={"logits": onnxq.Tolerance(max_perplexity_ratio=1.05)})
    assert failures_for(_metrics(1.103, 0.984), task_tolerances(stricter, TASKS, {})("logits"))
