"""Speed per provider: a note per provider where the quantized model is not faster, naming the way out there.
The timings were measured on an H100 (onnxruntime-gpu 1.31.1) for all-MiniLM-L6-v2 at
batch 32 × 128: float 2.92 ms; static QDQ 0.76×, dynamic 0.028×, int4 MatMulNBits 0.92× of float's speed."""

import pytest

from onnxq.verify.speed.latency import SpeedCheck, slower_notes

CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"
FLOAT_MS = 2.92


def _cuda(speedup: float) -> SpeedCheck:
    return SpeedCheck(CUDA, FLOAT_MS, FLOAT_MS / speedup, 5)


def test_an_int8_cpu_model_slower_on_cuda_points_at_target_cuda():
    cpu = SpeedCheck(CPU, 130.21, 92.65, 5)  # MiniLM's timing on an AVX2 CPU: 1.41x
    notes = slower_notes([cpu, _cuda(0.76)], "portable", searched=False)
    assert notes == ["SPEED: the quantized model is not faster than float on CUDAExecutionProvider (3.8 ms vs 2.9 ms)"
                     "; target portable is not meant for CUDA; --target cuda plans the forms CUDA runs fast — see "
                     "docs/guides/gpus.md"]


@pytest.mark.parametrize("speedup", [0.028, 0.034])
def test_integer_operators_falling_back_to_the_cpu_are_named_slower_too(speedup):
    (note,) = slower_notes([SpeedCheck(CPU, 1.0, 0.5, 5), _cuda(speedup)], "portable", searched=False)
    assert "not faster than float on CUDAExecutionProvider" in note and "--target cuda" in note


def test_a_cuda_model_says_where_it_is_meant_to_run():
    """Target cuda on a GPU machine: its CPU timing is not its deployment (float16 is cast on x86); on CUDA a
    weight-only model slower at a prefill batch is told what its blocks are for, not offered --check-speed."""
    notes = slower_notes([SpeedCheck(CPU, 114.0, 132.5, 5), _cuda(0.92)], "cuda", searched=False, weight_only=True)
    assert notes[0].endswith("(132.5 ms vs 114.0 ms); target cuda is not meant for CPU — see docs/guides/cpu-fleets.md")
    assert "on CUDAExecutionProvider (3.2 ms vs 2.9 ms); weight-only blocks are for size and memory-bound " \
           "decoding" in notes[1]


def test_faster_everywhere_says_nothing_and_a_search_is_not_offered_again():
    assert slower_notes([SpeedCheck(CPU, 2.0, 1.0, 5), _cuda(1.6)], "cpu+cuda", searched=False) == []
    (note,) = slower_notes([SpeedCheck(CPU, 1.0, 2.0, 5)], "portable", searched=True)
    assert note.endswith("(2.0 ms vs 1.0 ms) — see docs/guides/cpu-fleets.md")
