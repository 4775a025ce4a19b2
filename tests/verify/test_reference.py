"""The float reference of a run: computed once, kept in memory up to a budget and on disk beyond it, shared by
the probes of a search through its head."""

import errno
import tempfile

import numpy as np
import onnx_ir as ir
from conftest import to_model, weight

from onnxq.verify.reference import OutputStore, Reference


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


def test_a_released_session_is_made_again_only_when_a_run_needs_it(rng):
    """Once every output is kept, the float session is dropped (a large model's is not held beside the quantized
    sessions that follow); the kept outputs need none, and a run that does (a stability check, a head past the
    store) gets a new one computing the same."""
    reference, runs = _counting_reference(rng, _batches(rng))
    batch = _batches(np.random.default_rng(5), 1)[0]
    first = reference.session.run(reference.names, batch)[0]
    reference.release_session()
    assert reference._session is not None  # nothing kept yet: kept
    reference.prefetch()
    expected = [o[0].copy() for _, o in reference]
    reference.release_session()
    assert reference._session is None
    assert all(np.array_equal(o[0], e) for (_, o), e in zip(reference, expected)) and len(runs) == 4
    assert reference._session is None  # iterating the kept outputs made none
    np.testing.assert_array_equal(reference.session.run(reference.names, batch)[0], first)


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


def test_outputs_that_cannot_be_recomputed_stay_in_memory_when_the_disk_refuses_them(rng, tmp_path, monkeypatch):
    """The sensitivity's all-off outputs (search.sensitivity): no session can recompute them later."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = OutputStore(300, recomputable=False)
    batches = [[rng.normal(0, 1, (4, 16)).astype(np.float32)] for _ in range(4)]
    store.append(batches[0])
    store.append(batches[1])  # over the budget: on disk
    monkeypatch.setattr(np, "save", lambda *_a, **_k: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    store.append(batches[2])
    store.append(batches[3])
    assert not store.stopped and len(store) == 4 and store.spilled == 1
    for i, expected in enumerate(batches):
        np.testing.assert_array_equal(store[i][0], expected[0])


def test_a_head_shares_the_outputs_and_counts_its_samples(rng):
    reference, runs = _counting_reference(rng, _batches(rng, 4))
    head = reference.head(5)  # batches of 4: two batches hold at least 5 samples
    assert not head.whole and head.samples == 8 and reference.samples == 16
    assert len(list(head)) == 2 and len(runs) == 2
    assert len(list(reference)) == 4 and len(runs) == 4  # the head's two are not computed again
    assert reference.head(13) is reference and reference.head(1000) is reference
    assert reference.head(1).samples == 4


def test_the_memory_budget_is_a_share_of_the_model_within_bounds(rng, monkeypatch):
    """A model's float outputs kept in memory: 1/MEMORY_SHARE of its weights, at least MIN_MEMORY_BYTES, at most
    MEMORY_BYTES — a language model's logits outweigh its weights. The rest go to disk, read back the same."""
    reference_module = __import__("onnxq.verify.reference", fromlist=["store_budget"])
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 256])
    y = tape.op("MatMul", [x, weight(tape, rng, "w", (256, 256))])  # 256 kB of weights
    y.name = "y"
    model = to_model(tape, [x], [y])
    assert reference_module.store_budget(model) == reference_module.MIN_MEMORY_BYTES
    assert reference_module.store_budget(None) == reference_module.MEMORY_BYTES
    monkeypatch.setattr(reference_module, "MIN_MEMORY_BYTES", 0)
    assert reference_module.store_budget(model) == 256 * 256 * 4 // 32
    monkeypatch.setattr(reference_module, "MEMORY_SHARE", 8)
    assert reference_module.store_budget(model) == 256 * 256 * 4 // 8
    batches = [{"x": rng.normal(0, 1, (16, 256)).astype(np.float32)} for _ in range(4)]  # 16 kB of outputs each
    reference = Reference(model, batches)
    reference.prefetch()
    assert len(reference.store) == 4 and reference.store.spilled == 2  # 32 kB kept in memory, the rest on disk
    for batch, got in reference:
        np.testing.assert_allclose(got[0], batch["x"] @ model.graph.initializers["w"].const_value.numpy(),
                                   rtol=1e-5, atol=1e-4)  # ORT's sums against numpy's: float32 rounding
