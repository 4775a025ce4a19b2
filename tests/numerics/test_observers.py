import numpy as np

from onnxq.numerics import MinMaxObserver


def test_minmax_equals_brute_force_over_concatenated_batches(rng):
    batches = [rng.normal(0, s, (n, 7)).astype(np.float32) for s, n in [(1, 5), (3, 1), (0.5, 9), (2, 4)]]
    observer = MinMaxObserver()
    for b in batches:
        observer.observe(b)
    everything = np.concatenate([b.ravel() for b in batches])
    assert observer.range() == (float(everything.min()), float(everything.max()))
    assert observer.count == everything.size


def test_merge_is_order_independent(rng):
    parts = [rng.normal(0, 1, 100) for _ in range(4)]
    observers = []
    for p in parts:
        o = MinMaxObserver()
        o.observe(p)
        observers.append(o)
    a, b = MinMaxObserver(), MinMaxObserver()
    for o in observers:
        a.merge(o)
    for o in reversed(observers):
        b.merge(o)
    assert a.range() == b.range() == (float(np.concatenate(parts).min()), float(np.concatenate(parts).max()))


def test_empty_batches_are_ignored():
    o = MinMaxObserver()
    o.observe(np.zeros((0, 3), np.float32))
    assert o.empty
