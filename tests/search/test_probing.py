"""The search's bisection: probes on part of the inputs, the answer confirmed on all of them — the same k as a
bisection on all inputs whichever way the probes err."""

import pytest

from onnxq.search.probing import smallest_confirmed, smallest_passing


def _counted(threshold):
    calls = []

    def passes(k):
        calls.append(k)
        return k >= threshold

    return passes, calls


@pytest.mark.parametrize("probe_threshold", [1, 3, 5, 9, 17, 32])
def test_confirmation_finds_what_bisection_on_all_inputs_finds(probe_threshold):
    whole_threshold = 9
    expected = smallest_passing(0, 32, lambda k: k >= whole_threshold)
    probe, _ = _counted(probe_threshold)
    whole, whole_calls = _counted(whole_threshold)
    assert smallest_confirmed(0, 32, probe, whole) == expected == 9
    if probe_threshold == whole_threshold:
        assert whole_calls == [9, 8]  # the answer and the one below it, nothing more
    else:
        assert len(whole_calls) <= 2 + 5  # a bisection on all inputs only over the side the probes erred


def test_no_check_below_a_known_failure():
    whole, whole_calls = _counted(1)
    assert smallest_confirmed(0, 8, lambda k: k >= 1, whole) == 1
    assert whole_calls == [1]  # 0 is known to fail: not checked again


def test_when_not_even_the_bound_passes_on_all_inputs_there_is_no_answer():
    whole, whole_calls = _counted(100)  # nothing passes on all inputs
    assert smallest_confirmed(0, 16, lambda k: k >= 4, whole) is None
    assert whole_calls == [4, 16]  # the answer failed, so the bound was checked


def test_nodes_of_equal_task_harm_rank_by_how_far_they_move_the_outputs():
    """A task metric counts whole answers: on 64 strings, many nodes each change one (harm 0.52 apiece on the PP-OCR
    recognizer). Among equal harms the node that moves the outputs most (1 − cosine) ranks first, not the first
    name."""
    from onnxq.search.sensitivity import NodeSensitivity, ranked
    from onnxq.verify.metrics import OutputMetrics

    def node(name, harm, cosine):
        metrics = OutputMetrics(samples=64, max_abs_error=0.0, mean_abs_error=0.0, cosine_mean=cosine,
                                cosine_min=cosine, sqnr_db=20.0)
        return NodeSensitivity(name, "Conv", {"y": metrics}, 20.0, harm)
    order = ranked([node("a", 0.52, 0.999), node("b", 0.52, 0.990), node("c", 1.04, 0.9995), node("d", 0.52, 0.995)])
    assert [n.name for n in order] == ["c", "b", "d", "a"]
