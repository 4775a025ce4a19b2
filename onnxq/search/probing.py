"""How a search tries candidates: bisection over "how many of the ranked items to change", each candidate verified
on the first share of the verification inputs while bisecting (a probe) and the answer confirmed on all of them.

The float reference is computed once per run and shared (onnxq.verify.reference); a probe costs the quantized model
on a quarter of the inputs, on this CPU's deployed kernels only (a confirmation also checks every target).
Confirmation checks that k passes on all inputs and k − 1 does not, and bisects on all inputs on whichever side the
probes were wrong, so the answer is the one a bisection on all inputs finds whenever passing is monotone in k.
Shared by the fallback and recipe auto.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Hashable
from typing import Any

import onnx_ir as ir

from onnxq.verify import Verification
from onnxq.verify import Reference

__all__ = ["smallest_passing", "smallest_confirmed", "ProbeLog", "CandidateCheck", "Trials", "PROBE_SHARE",
           "PROBE_MIN_SAMPLES"]

PROBE_SHARE = 0.25  # of the verification samples, for a probe
PROBE_MIN_SAMPLES = 8


def smallest_passing(failing: int, passing: int, passes: Callable[[int], bool]) -> int:
    """The smallest k in (failing, passing] for which passes(k) holds, given that passes(failing) does not and
    passes(passing) does, assuming more changes never hurt. About log2(passing - failing) probes."""
    while passing - failing > 1:
        middle = (failing + passing) // 2
        if passes(middle):
            passing = middle
        else:
            failing = middle
    return passing


def smallest_confirmed(failing: int, passing: int, probe: Callable[[int], bool],
                       whole: Callable[[int], bool]) -> int | None:
    """smallest_passing by the probes (probe(passing) holds, whole(failing) is known not to), confirmed on all
    inputs: k must pass whole and k − 1 fail; where the probes erred, the bisection goes on with whole. None when
    not even `passing` passes on all inputs (checked only when the probes were too lenient)."""
    k = smallest_passing(failing, passing, probe)
    if not whole(k):  # the probes were too lenient
        return smallest_passing(k, passing, whole) if whole(passing) else None
    if k - 1 > failing and whole(k - 1):  # too strict
        return smallest_passing(failing, k - 1, whole)
    return k


@dataclasses.dataclass
class ProbeLog:
    """What a search's verification cost."""

    probe_samples: int  # samples a probe verifies on
    samples: int  # samples a confirmation verifies on (all)
    probes: int = 0
    confirmations: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"probe_samples": self.probe_samples, "samples": self.samples, "probes": self.probes,
                "confirmations": self.confirmations, "seconds": round(self.seconds, 3)}

    def text(self) -> str:
        probes = (f"{self.probes} probe(s) on {self.probe_samples} samples, " if self.probes else "")
        return f"{probes}{self.confirmations} check(s) on all {self.samples}, {self.seconds:.1f} s"


class CandidateCheck:
    """Verifies a search's candidates against the run's one float reference: on its head (probe) or on all of it."""

    def __init__(self, reference: Reference, verify: Callable[[ir.Model, Reference], Verification]) -> None:
        self.reference = reference
        self.head = reference.head(max(PROBE_MIN_SAMPLES, math.ceil(reference.samples * PROBE_SHARE)))
        self._verify = verify
        self.log = ProbeLog(self.head.samples, reference.samples)

    @property
    def partial(self) -> bool:
        """Whether a probe sees fewer inputs than a confirmation."""
        return not self.head.whole

    def full(self, whole: bool) -> bool:
        """Whether a check asked for (whole or probe) runs on all inputs: a probe does when the head is all."""
        return whole or not self.partial

    def __call__(self, model: ir.Model, whole: bool) -> Verification:
        full = self.full(whole)
        start = time.perf_counter()
        verification = self._verify(model, self.reference if full else self.head)
        self.log.seconds += time.perf_counter() - start
        if full:
            self.log.confirmations += 1
        else:
            self.log.probes += 1
        return verification


class Trials:
    """A search's candidates by key, each built once per kind of check: make(key, whole) builds one and verifies it
    (with the CandidateCheck). Candidates checked on all inputs are kept; of a probe only its outcome is."""

    def __init__(self, make: Callable[[Hashable, bool], Any], check: CandidateCheck) -> None:
        self._make = make
        self.check = check
        self._outcomes: dict[Hashable, bool] = {}
        self._kept: dict[Hashable, Any] = {}

    def passes(self, key: Hashable, whole: bool = False) -> bool:
        """Whether the candidate meets the tolerance: no bar measured below it (a bar its inputs cannot show is
        met — a probe's quarter of them shows few)."""
        if self.check.full(whole):
            return not self.confirmed(key).verification.failed
        if key not in self._outcomes:
            self._outcomes[key] = not self._make(key, False).verification.failed
        return self._outcomes[key]

    def confirmed(self, key: Hashable) -> Any:
        """The candidate, verified on all inputs."""
        if key not in self._kept:
            self._kept[key] = self._make(key, True)
        return self._kept[key]

    def smallest(self, failing: int, passing: int, key: Callable[[int], Hashable]) -> int | None:
        """smallest_confirmed over candidates key(k)."""
        return smallest_confirmed(failing, passing, lambda k: self.passes(key(k)),
                                  lambda k: self.passes(key(k), whole=True))
