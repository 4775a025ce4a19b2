"""The language-model defaults (issue 33): a model recognized as a decoder language model — an output [batch,
sequence, V] over the rows of the table its input ids index — gets what its kind needs where the config leaves the
choice open, and the summary says so:

- activation_granularity auto → per-token activations (one scale per token row, at run time) with SmoothQuant's α
  search when smooth is off and calibration data is given: SmolLM2's static per-tensor model ran 1.57x float's
  perplexity, per-token + SmoothQuant 1.02x (README, Language models);
- blocks.accuracy_level unset → 4 (int8 activations per block) for 4-bit weights on a CPU target: decode 4.3x
  float's speed instead of 2.7x at +0.003x perplexity (issue 33); the gate checks the result on the deployed
  kernels. 0 for a GPU target.

Any other model: per-tensor activations, accuracy_level 0, as before."""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from onnxq.config import QuantConfig
from onnxq.targets import int8_activations_refusal
from onnxq.verify.task_rules import language_model_logits

__all__ = ["language_model_defaults"]


def language_model_defaults(model: ir.Model, config: QuantConfig, mode: str,
                            has_data: bool) -> tuple[QuantConfig, str | None]:
    """(the config with the open choices made, a note saying what was recognized and chosen, or None)."""
    found = language_model_logits(model)
    decoder = found is not None
    granularity = config.activation_granularity
    if granularity == "auto":  # recipe auto chooses per group of layers itself, from per-tensor
        per_token = decoder and mode in ("static", "dynamic") and config.recipe == "manual"
        granularity = "per-token" if per_token else "per-tensor"
    smooth = "auto" if granularity == "per-token" and config.activation_granularity == "auto" \
        and config.smooth == "off" and has_data else config.smooth
    level = config.blocks.accuracy_level
    if level is None and mode == "weight-only":  # blocks are for weight-only models: others keep them as given
        level = 4 if decoder and not int8_activations_refusal(config.target) else 0
    chosen = config.replace(activation_granularity=granularity, smooth=smooth,
                            blocks=dataclasses.replace(config.blocks, accuracy_level=level))
    if not decoder:
        return chosen, None
    output, vocabulary, tokens = found
    made = ([f"per-token activations{' with SmoothQuant (alpha searched)' if smooth == 'auto' else ''}"]
            if config.activation_granularity == "auto" and granularity == "per-token" else [])
    if config.blocks.accuracy_level is None and mode == "weight-only":
        made.append(f"MatMulNBits accuracy_level {level}")
    said = (f": {', '.join(made)} (--activations per-tensor / --accuracy-level 0 to choose otherwise)" if made
            else "")
    return chosen, (f"language model recognized ({output} over {vocabulary} tokens, the rows {tokens} indexes; its "
                    f"logits judged by perplexity){said}")
