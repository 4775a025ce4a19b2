"""The float reference of a run: computed once, kept in memory up to a budget and on disk beyond it, shared by
the probes of a search through its head."""

import errno
import tempfile

import numpy as np
import onnx_ir as ir
from conftest import to_model, weight

from onnxq.verify.reference import Reference


def _counting_reference(rng, batches, memory_bytes=1 << 30):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 16])
    y = tape.op("MatMul", [x, weight(tape, rng, "w", (16, 16))])
    y.name = "y"
    reference = Reference(to_model(tape, [x], [y]), batches, memory_bytes)
    runs = []
    run = reference.session.run
    reference.session = type("Counting", (), {"run": lambda self, *a: runs.append(1) or run(*a)})()
    return reference, runs


def _batches(rng, count=3):
    return [{"x": rng.normal(0, 1, (4, 16)).astype(np.float32)} for _ in range(count)]


def test_outputs_kept_in_memory_are_computed_once(rng):
    reference, runs = _counting_reference(rng, _batches(rng))
    reference.prefetch()
    assert len(list(reference)) == 3 and len(runs) == 3 and reference.store.spilled == 0


def test_outputs_over_the_memory_budget_go_to_disk_and_are_still_computed_once(rng, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kept, _ = _counting_reference(np.random.default_rng(1), _batches(np.random.default_rng(2)))
    reference, runs = _counting_reference(np.random.default_rng(1), _batches(np.random.default_rng(2)),
                                          memory_bytes=300)  # one batch's 256 bytes fit, two do not
    reference.prefetch()
    assert len(runs) == 3 and reference.store.spilled == 2
    assert len(list(tmp_path.glob("onnxq-reference-*/*.npy"))) == 2
    for (_, got), (_, expected) in zip(reference, kept):
        np.testing.assert_array_equal(got[0], expected[0])  # bit-identical from disk
    assert len(runs) == 3
    reference.store.close()
    assert not list(tmp_path.glob("onnxq-reference-*"))


def test_a_failed_write_stops_storing_and_the_rest_is_recomputed(rng, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def disk_full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", disk_full)
    reference, runs = _counting_reference(rng, _batches(rng), memory_bytes=300)
    reference.prefetch()
    assert reference.store.stopped and len(runs) == 2  # stopped at the batch that could not be kept
    assert len([o for _, o in reference]) == 3 and len(runs) == 4  # batch 0 kept; 1 (again) and 2 computed


def test_a_head_shares_the_outputs_and_counts_its_samples(rng):
    reference, runs = _counting_reference(rng, _batches(rng, 4))
    head = reference.head(5)  # batches of 4: two batches hold at least 5 samples
    assert not head.whole and head.samples == 8 and reference.samples == 16
    assert len(list(head)) == 2 and len(runs) == 2
    assert len(list(reference)) == 4 and len(runs) == 4  # the head's two are not computed again
    assert reference.head(13) is reference and reference.head(1000) is reference
    assert reference.head(1).samples == 4
