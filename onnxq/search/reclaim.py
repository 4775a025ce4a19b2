"""After the fallback's bisection, each node it kept float quantized again, costliest first, where the tolerance
still holds on all verification inputs.

The bisection keeps a prefix of the sensitivity ranking float; the ranking measures one node at a time, so the
prefix holds nodes whose harm only showed beside others, and nodes whose float-ness the rest no longer needs.
Quantizing each again (most multiply-adds first: search.compute) and keeping it quantized where the whole check
still passes leaves a set in which no single node can be quantized again — the fewest, cheapest float nodes a
greedy search finds. Each try is one build and one check on all inputs: a probe on a quarter of them
flips on one answer for a task metric, and a kept try must be the one the gate sees. Bounded by a count of tries.
Deterministic: same ranking, same costs, same tries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Protocol

__all__ = ["Reclaimed", "reclaim"]


class Candidate(Protocol):
    excluded: tuple[str, ...]

    @property
    def passed(self) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Reclaimed:
    chosen: Candidate  # the last passing candidate (the bisection's when none was reclaimed)
    nodes: tuple[str, ...]  # quantized again, in the order tried
    tries: int


def reclaim(chosen: Candidate, costs: Mapping[str, float], attempt: Callable[[tuple[str, ...]], Candidate],
            max_tries: int) -> Reclaimed:
    """Try each of chosen.excluded, costliest first (ties: the least harmful, i.e. last ranked, first), without it
    float: attempt(excluded) builds and checks on all inputs."""
    rank = {name: i for i, name in enumerate(chosen.excluded)}
    order = sorted(chosen.excluded, key=lambda n: (-costs.get(n, 0.0), -rank[n]))[:max(0, max_tries)]
    current, nodes = chosen, []
    for name in order:
        tried = attempt(tuple(n for n in current.excluded if n != name))
        if tried.passed:
            current = tried
            nodes.append(name)
    return Reclaimed(current, tuple(nodes), len(order))
