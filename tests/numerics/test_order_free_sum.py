"""numerics.order_free_sum: the same bits whatever the order of the addends and however they are split into partial
sums merged afterwards (a float32 running sum is not: its last bits follow the order), and within 2**-40 of the
exact sum relative to each element's largest addend."""

from fractions import Fraction

import numpy as np

from onnxq.numerics.order_free_sum import OrderFreeSum


def _addends(rng) -> list[np.ndarray]:
    """12 float32 arrays of 64 values spread over 16 decades, of both signs, zeros among them."""
    parts = [(rng.standard_normal(64) * 10.0 ** rng.integers(-8, 8, 64)).astype(np.float32) for _ in range(12)]
    parts[3][:5] = 0
    return parts


def _summed(parts: list[np.ndarray]) -> OrderFreeSum:
    total = OrderFreeSum((64,))
    for part in parts:
        total.add(part)
    return total


def test_any_order_and_any_split_give_the_same_bits(rng):
    parts = _addends(rng)
    whole = _summed(parts)
    shuffled = [parts[i] for i in rng.permutation(len(parts))]
    for cut in (1, 5, 11):
        first, second = _summed(shuffled[:cut]), _summed(shuffled[cut:])
        second.merge(first)
        assert np.array_equal(second.value(), whole.value()) and second.state() == whole.state()
    # Three partial sums merged in another order, and a round trip through the stored state.
    a, b, c = (_summed(shuffled[i::3]) for i in range(3))
    c.merge(OrderFreeSum.from_state(a.state()))
    c.merge(b)
    assert np.array_equal(c.value(), whole.value())
    # What the order-free sum replaces is not: a float32 running sum changes with the order.
    running = [np.sum(np.stack(p), axis=0, dtype=np.float32) for p in (parts, shuffled)]
    assert not np.array_equal(*running)


def test_each_element_is_within_2_to_the_minus_40_of_its_largest_addend(rng):
    parts = _addends(rng)
    got = _summed(parts).value()
    exact = np.array([float(sum(Fraction(float(p[i])) for p in parts)) for i in range(64)])
    largest = np.max(np.abs(np.stack(parts)), axis=0).astype(np.float64)
    assert np.all(np.abs(got - exact) <= largest * 2.0 ** -40)


def test_cancelling_addends_sum_to_zero_and_nothing_added_is_zero():
    total = OrderFreeSum((3,))
    total.add(np.array([0.0, -1.5, 1e-30]))
    total.add(np.array([0.0, 1.5, -1e-30]))
    assert np.array_equal(total.value(), np.zeros(3)) and np.array_equal(OrderFreeSum((2, 2)).value(), np.zeros((2, 2)))
