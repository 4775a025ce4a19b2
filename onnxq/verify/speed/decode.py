"""A decoder's speed as it is used: one token at a time with its KV cache. The default speed line times a
batch of whole windows — a prefill — where a 4-bit model reads 0.73x float while it decodes 4.3x faster: decoding
reads every weight for one token, so it is bound by memory, which 4-bit weights cut by 8.

Batch 1: the first verification window's first tokens are the prefill (its cache made by the model, not timed), then
`steps` of its next tokens are fed one by one, each with the cache the step before made (present.* fed back as
past_key_values.*), on the float and the quantized model in turns; tokens per second, medians of the rounds."""

from __future__ import annotations

import dataclasses
import html
import re
import time
from collections.abc import Mapping, Sequence

import numpy as np
import onnxruntime as ort

from onnxq.data.completion import completable, completed
from onnxq.data.specs import Batch, InputSpec, sample_axis
from onnxq.io.model_sessions import ModelSource
from onnxq.verify.speed.latency import timed_in_turns
from onnxq.targets.providers import CPU_PROVIDER, short_provider_name

__all__ = ["DecodeSpeed", "decode_speed", "cache_pairs", "decode_window", "carried"]

_PAST = re.compile(r"past_key_values|past")


@dataclasses.dataclass(frozen=True)
class DecodeSpeed:
    key = "decode_speed"
    provider: str
    prefill_tokens: int
    steps: int
    rounds: int
    float_tokens_per_s: float
    quantized_tokens_per_s: float

    @property
    def speedup(self) -> float:
        return self.quantized_tokens_per_s / self.float_tokens_per_s

    def text(self) -> list[str]:
        verdict = "faster" if self.speedup > 1 else "NOT FASTER than float"
        return [f"decode on {short_provider_name(self.provider)} (KV cache, batch 1, {self.steps} tokens "
                f"after a {self.prefill_tokens}-token prefill): float {self.float_tokens_per_s:.1f} tokens/s, quantized "
                f"{self.quantized_tokens_per_s:.1f} tokens/s ({self.speedup:.2f}x, {verdict}; median of {self.rounds})"]

    def html(self) -> str:
        return f"<p>{html.escape(self.text()[0])}</p>"

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "speedup": self.speedup}


def cache_pairs(input_names: Sequence[str], output_names: Sequence[str]) -> dict[str, str]:
    """Cache output → the input the next step reads it as (present.L.key → past_key_values.L.key), by name, as
    Optimum's and onnxruntime-genai's exports pair them; {} when some cache input has no output."""
    outputs = set(output_names)
    pairs = {}
    for name in input_names:
        if not _PAST.search(name):
            continue
        made = _PAST.sub("present", name, count=1)
        if made not in outputs:
            return {}
        pairs[made] = name
    return pairs


def decode_speed(models: tuple[ModelSource, ModelSource], batch: Batch, specs: list[InputSpec], steps: int = 16,
                 rounds: int = 3, provider: str = CPU_PROVIDER, in_turn: bool = False) -> DecodeSpeed | None:
    """models: the float and the quantized model. None when the model has no cache to feed back, or the window is too
    short (under 4 tokens); a window shorter than twice `steps` decodes its second half. in_turn: each model's
    session made, timed and dropped before the other's (verify.speed.latency.check_speed)."""
    tokens = np.asarray(batch.get("input_ids", np.zeros((0, 0))))
    if tokens.ndim != 2 or tokens.shape[1] < 4:
        return None
    steps = min(steps, tokens.shape[1] // 2)
    window = tokens[:1]
    prefill = window.shape[1] - steps
    decode = (window, prefill, specs, carried(batch, specs))
    seconds = timed_in_turns(models, provider, in_turn, lambda sessions: _decode_rounds(sessions, decode, rounds))
    if seconds is None:
        return None
    per_s = [steps / float(np.median(s)) for s in seconds]
    return DecodeSpeed(provider, prefill, steps, rounds, per_s[0], per_s[1])


def _decode_rounds(sessions: list, decode: tuple, rounds: int) -> list[list[float]] | None:
    """Each session's seconds per round of decoding, in alternation; None where the model has no cache to feed
    back."""
    window, prefill, specs, others = decode
    pairs = cache_pairs([i.name for i in sessions[0].get_inputs()], [o.name for o in sessions[0].get_outputs()])
    if not pairs:
        return None
    for session in sessions:  # warm-up: the first runs allocate, and pack the weights
        if decode_window(session, window, prefill, specs, pairs, others) is None:
            return None
    seconds: list[list[float]] = [[] for _ in sessions]
    for _ in range(rounds):
        for i, session in enumerate(sessions):
            seconds[i].append(decode_window(session, window, prefill, specs, pairs, others)[0])
    return seconds


def carried(batch: Batch, specs: list[InputSpec]) -> dict[str, np.ndarray]:
    """The batch's first sample of every input a decoding step does not make (a seq2seq decoder's encoder states
    and mask and cross-attention caches, a merged decoder's use_cache_branch): fed unchanged with every step."""
    others = {}
    for spec in specs:
        if spec.name == "input_ids" or spec.name not in batch or completable(spec, specs):
            continue
        axis = sample_axis(batch, spec.name)
        array = np.asarray(batch[spec.name])
        others[spec.name] = array if axis is None else np.take(array, [0], axis=axis)
    return others


def decode_window(session: ort.InferenceSession, window: np.ndarray, prefill: int, specs: list[InputSpec],
                  pairs: Mapping[str, str], others: Mapping[str, np.ndarray] | None = None
                  ) -> tuple[float, dict[str, np.ndarray]] | None:
    """(Seconds to decode window[prefill:] one token at a time after a prefill of window[:prefill], which is not
    timed; the last step's outputs); None when the session wants an input neither the rules nor `others` (carried)
    give."""
    others = others or {}
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    feed = completed({**others, "input_ids": window[:, :prefill]}, specs)
    if not wanted <= set(feed):
        return None
    cache = dict(zip(names, session.run(names, {k: v for k, v in feed.items() if k in wanted})))
    pasts = {past: feed[past] for past in pairs.values() if past in feed}
    start = time.perf_counter()
    for t in range(prefill, window.shape[1]):
        # An empty cache output beside a past that held values keeps the past: a merged seq2seq decoder's cached
        # branch returns no cross-attention keys, which stay those of its first step.
        pasts = {past: cache[made] if cache[made].size or not np.size(pasts.get(past, 0)) else pasts[past]
                 for made, past in pairs.items()}
        step = {**others, "input_ids": window[:, t:t + 1], "attention_mask": np.ones((1, t + 1), np.int64),
                "position_ids": np.array([[t]], np.int64), **pasts}
        cache = dict(zip(names, session.run(names, {k: v for k, v in step.items() if k in wanted})))
    return time.perf_counter() - start, cache
