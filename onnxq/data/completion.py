"""Inputs a language model takes that its users' data leaves out, made as its runtime makes them for a first step.
A decoder exported with a KV cache (Optimum's text-generation-with-past, onnxruntime-genai's builder)
takes past_key_values.L.key / .value, an attention_mask over past and new tokens, and often position_ids; what a
user has is windows of token ids. Each rule below makes one kind of input from the batch and the model's input
specs, in order (a later rule may read what an earlier one made); an input the data holds is never replaced.

- a cache input (named past / cache, float, one open dimension besides the samples axis: the past length): empty,
  past length 0 — the prefill of a window, which computes every layer on all its tokens; not a cross-attention
  cache (its length named as an encoder input's: the encoder's keys, which the data must hold);
- attention_mask: ones over past and new tokens (every token attended), when the caches are empty or absent;
- position_ids: as Hugging Face makes them, the attention mask's running count less one (1 where masked), over the
  new tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping

import numpy as np

from onnxq.data.head_sizes import CACHE_NAME
from onnxq.data.specs import Batch, InputSpec, laid_out

__all__ = ["completed", "completable", "RULES", "describe_made"]

_TOKENS = "input_ids"
_MADE = ("attention_mask", "position_ids")  # made by the rules below, beside the caches

# (what it makes, in the report's words; the rule) — a rule returns the array for a missing input, or None when the
# input is not of its kind or cannot be made from what the batch holds.
Rule = Callable[[InputSpec, Batch, Mapping[str, InputSpec]], "np.ndarray | None"]


def _empty_cache(spec: InputSpec, batch: Batch, specs: Mapping[str, InputSpec]) -> np.ndarray | None:
    if not _past_cache(spec, specs) or spec.sample_axis is None or _open_axis(spec) is None or _TOKENS not in batch:
        return None
    shape = [d if isinstance(d, int) else 0 for d in spec.shape]
    shape[spec.sample_axis] = np.asarray(batch[_TOKENS]).shape[0]
    return np.zeros(shape, spec.dtype)


def _past_cache(spec: InputSpec, specs: Mapping[str, InputSpec]) -> bool:
    """A float cache input of known rank whose length is a past: not a cross-attention cache, whose length is named
    as a dimension of an input that is neither a cache nor one the rules make (encoder_sequence_length, as in
    encoder_hidden_states) — the encoder's keys and values, no past to leave empty."""
    if not CACHE_NAME.search(spec.name) or spec.dtype.kind != "f" or spec.shape is None:
        return False
    lengths = {d for i, d in enumerate(spec.shape) if isinstance(d, str) and i != spec.sample_axis}
    return not any(not CACHE_NAME.search(s.name) and s.name not in _MADE and s.shape is not None
                   and lengths & set(s.shape) for s in specs.values())


def _open_axis(spec: InputSpec) -> int | None:
    """The one open dimension besides the samples axis (a cache's past length); None when there is not exactly one."""
    open_axes = [i for i, d in enumerate(spec.shape) if not isinstance(d, int) and i != spec.sample_axis]
    return open_axes[0] if len(open_axes) == 1 else None


def _past_length(batch: Batch, specs: Mapping[str, InputSpec]) -> int | None:
    """The past length the batch's caches hold (0 without caches; cross-attention caches hold the encoder's length,
    not a past); None when they disagree or cannot be told."""
    lengths = set()
    for name, spec in specs.items():
        if name in batch and _past_cache(spec, specs):
            axis = _open_axis(spec)
            if axis is None:
                return None
            lengths.add(np.asarray(batch[name]).shape[axis])
    return lengths.pop() if len(lengths) == 1 else (0 if not lengths else None)


def _all_ones_mask(spec: InputSpec, batch: Batch, specs: Mapping[str, InputSpec]) -> np.ndarray | None:
    past = _past_length(batch, specs)
    if spec.name != "attention_mask" or spec.dtype.kind not in "iu" or _TOKENS not in batch or past is None:
        return None
    samples, tokens = np.asarray(batch[_TOKENS]).shape[:2]
    return np.ones((samples, past + tokens), spec.dtype)


def _positions(spec: InputSpec, batch: Batch, specs: Mapping[str, InputSpec]) -> np.ndarray | None:
    if spec.name != "position_ids" or spec.dtype.kind not in "iu" or _TOKENS not in batch \
            or "attention_mask" not in batch:
        return None
    mask = np.asarray(batch["attention_mask"]).astype(np.int64)
    tokens = np.asarray(batch[_TOKENS]).shape[1]
    positions = np.cumsum(mask, axis=1) - 1
    positions[mask == 0] = 1
    return positions[:, -tokens:].astype(spec.dtype)


RULES: dict[str, tuple[str, Rule]] = {
    "cache": ("empty (past length 0)", _empty_cache),
    "attention_mask": ("ones over the tokens", _all_ones_mask),
    "position_ids": ("from the attention mask (running count - 1)", _positions),
}


def completed(batch: Batch, specs: list[InputSpec], made: MutableMapping[str, str] | None = None) -> Batch:
    """The batch with every input the rules can make that it lacks; `made` records name → how, for the report."""
    missing = [s for s in specs if s.name not in batch]
    if not missing:
        return batch
    by_name = {s.name: s for s in specs}
    arrays = dict(batch)
    for how, rule in RULES.values():
        for spec in missing:
            if spec.name in arrays:
                continue
            array = rule(spec, arrays, by_name)
            if array is not None:
                arrays[spec.name] = array
                if made is not None:
                    made[spec.name] = how
    return laid_out(arrays, getattr(batch, "axes", {}))


def completable(spec: InputSpec, specs: list[InputSpec]) -> bool:
    """Whether one of the rules makes this input when a batch holds the token ids (made-up inputs, and each step of a
    timed decoding, leave such inputs to the rules, as a user's token windows do)."""
    return spec.name in _MADE or _past_cache(spec, {s.name: s for s in specs})


def describe_made(made: Mapping[str, str]) -> str:
    """One line: what was made and how, caches counted rather than listed."""
    by_how: dict[str, list[str]] = {}
    for name, how in made.items():
        by_how.setdefault(how, []).append(name)
    parts = [f"{names[0]} {how}" if len(names) == 1 else f"{len(names)} inputs {how} ({names[0]}, …)"
             for how, names in by_how.items()]
    return ("inputs the data leaves out, made as a decoder's first step takes them: " + "; ".join(parts)
            + " — give them in the data to calibrate on other values")
