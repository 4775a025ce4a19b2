"""The language-model defaults: a model recognized as a decoder language model — an output [batch,
sequence, V] over the rows of the table its input ids index — gets what its kind needs where the config leaves the
choice open, and the summary says so:

- activation_granularity auto → per-token activations (one scale per token row, at run time) with SmoothQuant's α
  search when smooth is off and calibration data is given: SmolLM2's static per-tensor model ran 1.57x float's
  perplexity, per-token + SmoothQuant 1.02x (docs/guides/language-models.md);
- blocks.accuracy_level unset → 4 (int8 activations per block) for 4-bit weights on a CPU target: decode 4.3x
  float's speed instead of 2.7x at +0.003x perplexity (SmolLM2-135M); step accuracy_level then measures it against
  level 0 and keeps 0 where level 4 changes greedy next tokens (steps.accuracy_level). 0 for a GPU target.
- blocks.vocabulary_bits unset → 8 for 4-bit weights: the token table and the lm_head (one table when tied) join
  the 8-bit tier (blocks.int8_nodes); the sensitivity ranks them first, and SmolLM2-135M's perplexity goes 1.090x →
  1.055x float for a file of 0.160x → 0.186x.

Any other model: per-tensor activations, accuracy_level 0, as before."""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from onnxq.config import QuantConfig
from onnxq.targets import int8_activations_refusal
from onnxq.verify.tasks.rules import language_model_logits

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
    eight_bit = _vocabulary_in_8_bits(model, config, mode, found)
    chosen = config.replace(activation_granularity=granularity, smooth=smooth, blocks=dataclasses.replace(
        config.blocks, accuracy_level=level, int8_nodes=tuple(dict.fromkeys(config.blocks.int8_nodes + eight_bit))))
    if not decoder:
        return chosen, None
    output, vocabulary, tokens = found
    made = ([(f"per-token activations{' with SmoothQuant (alpha searched)' if smooth == 'auto' else ''}",
              "--activations per-tensor")] if config.activation_granularity == "auto" and granularity == "per-token"
            else [])
    if config.blocks.accuracy_level is None and mode == "weight-only":
        made.append((f"MatMulNBits accuracy_level {level}", "--accuracy-level 0"))
    if eight_bit and config.blocks.vocabulary_bits is None:
        made.append((f"the token table and lm_head in 8-bit blocks ({', '.join(eight_bit)})", "--vocabulary-bits 4"))
    said = (f": {', '.join(m for m, _ in made)} ({' / '.join(f for _, f in made)} to choose otherwise)" if made
            else "")
    return chosen, (f"language model recognized ({output} over {vocabulary} tokens, the rows {tokens} indexes; its "
                    f"logits judged by perplexity){said}")


def _vocabulary_in_8_bits(model: ir.Model, config: QuantConfig, mode: str,
                          found: tuple[str, int, str] | None) -> tuple[str, ...]:
    """The names of the nodes over the vocabulary that take 8-bit blocks among 4-bit weights (none when
    vocabulary_bits is 4, the weights are not 4-bit, or the model is no decoder)."""
    bits = config.blocks.vocabulary_bits or 8
    if found is None or bits != 8 or mode != "weight-only" or config.weights.bits != 4:
        return ()
    output, vocabulary, _ = found
    return (*_token_tables(model, vocabulary), *_lm_head(model, output))


# What may stand between the lm_head's product and the logits: a bias, a scale, a soft cap, a reshape, a cast.
_TO_LOGITS = frozenset({"Add", "Mul", "Div", "Tanh", "Reshape", "Identity", "Cast", "Squeeze", "Unsqueeze"})


def _lm_head(model: ir.Model, logits: str) -> tuple[str, ...]:
    """The MatMul / Gemm with a constant weight that makes the logits, seen back through _TO_LOGITS."""
    value = next(o for o in model.graph.outputs if o.name == logits)
    for _ in range(8):
        node = value.producer()
        if node is None or node.op_type not in _TO_LOGITS | {"MatMul", "Gemm"}:
            return ()
        if node.op_type in ("MatMul", "Gemm"):
            weighted = len(node.inputs) > 1 and node.inputs[1] is not None and node.inputs[1].const_value is not None
            return (node.name,) if weighted and node.name else ()
        computed = [v for v in node.inputs if v is not None and v.const_value is None]
        if len(computed) != 1:
            return ()
        value = computed[0]
    return ()


def _token_tables(model: ir.Model, vocabulary: int) -> tuple[str, ...]:
    """The main graph's Gathers of a constant table with a row per token."""
    return tuple(node.name for node in model.graph if node.op_type == "Gather" and node.name and node.inputs[0]
                 is not None and node.inputs[0].const_value is not None
                 and len(node.inputs[0].const_value.shape) == 2 and node.inputs[0].const_value.shape[0] == vocabulary)
