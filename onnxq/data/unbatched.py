"""Models that take one sample per run, with no batch axis: torchvision's detection models take one image
[3, H, W] (their transform batches it inside). The data stacks the samples on a first axis the model lacks — N
images as [N, 3, H, W] — and each batch the run feeds is one of them, whole (its inputs laid out as held constant:
a batch of one sample), as onnxruntime.quantization's readers feed one dict per run. The layout is read off the
data's shapes where they say it (calibration.unbatched_inputs otherwise)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from onnxq.data.specs import Batch, InputSpec, laid_out
from onnxq.errors import CalibrationDataError

__all__ = ["one_sample_batches", "inferred_unbatched", "fits_model", "stacks_samples"]


def one_sample_batches(batch: Batch, ranks: Mapping[str, int], what: str) -> Iterator[Batch]:
    """The batch's samples one at a time: an unbatched input (ranks: its rank in the model) given with a first axis
    of its own is cut along it; given at the model's rank it is one sample (a reader's dict). Every input of each
    sample is fed whole; an input of any other rank passes as it is, for validation to refuse."""
    counts = {k: batch[k].shape[0] for k, rank in ranks.items() if k in batch and np.ndim(batch[k]) == rank + 1}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{k}: {n}" for k, n in counts.items())
        raise CalibrationDataError(f"{what} inputs without a batch axis have different numbers of samples ({detail}) "
                                   "— stack the same samples of each on its first axis")
    whole = dict.fromkeys(batch, None)
    if not counts:
        yield laid_out(dict(batch), whole)
        return
    for i in range(next(iter(counts.values()))):
        yield laid_out({k: v[i] if k in counts else v for k, v in batch.items()}, whole)


def fits_model(shape: tuple[int, ...], model_shape: tuple) -> bool:
    """Every dimension the model fixes has that length."""
    return all(not isinstance(want, int) or got == want for got, want in zip(shape, model_shape, strict=True))


def stacks_samples(spec: InputSpec, shape: tuple[int, ...]) -> bool:
    """Data of this shape stacks samples of the model's whole input on a first axis of its own (rank one more, its
    first dimension the model's fixed first), the model reading axis 0 as its samples': no batch axis to read them
    on. Whether the rest fits what the model fixes is fits_model's."""
    model = spec.shape
    return (spec.sample_axis == 0 and model is not None and len(model) >= 1 and isinstance(model[0], int)
            and len(shape) == len(model) + 1 and shape[1] == model[0])


def inferred_unbatched(specs: list[InputSpec], shapes: Mapping[str, tuple[int, ...]]) -> tuple[str, ...]:
    """The inputs whose data stacks samples of the model's whole input (rank one more, the rest fitting what the
    model fixes, its first dimension fixed: no batch axis to read them on) — only when every input that carries
    samples is one, with the same count. () otherwise (a model with a batch axis, or data that does not say)."""
    placed = [s for s in specs if s.sample_axis is not None]
    if not placed or any(s.name not in shapes or not stacks_samples(s, shapes[s.name])
                         or not fits_model(shapes[s.name][1:], s.shape) for s in placed):
        return ()
    if len({shapes[s.name][0] for s in placed}) > 1:
        return ()
    return tuple(s.name for s in placed)

