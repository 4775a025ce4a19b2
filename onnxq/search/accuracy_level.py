"""MatMulNBits' accuracy_level as a measured choice for a decoder's 4-bit weights: level 4 (int8 activations per block)
decodes faster on CPUs, and onnxruntime's users report it flipping greedy tokens on some models (onnxruntime #29849:
Qwen3-0.6B, Phi-3.5-mini). The run's model at level 4 is checked against the same model at level 0 (float
activations) on the verification data: level 4 is kept where its greedy next tokens agree with float's at most
LEVEL4_MAX_LOSS less often than level 0's do, and its perplexity is no worse by more than LEVEL4_MAX_PERPLEXITY."""

from __future__ import annotations

import dataclasses

from onnxq.report.record import escape

__all__ = ["LEVEL4_MAX_LOSS", "LEVEL4_MAX_PERPLEXITY", "LevelChoice", "level4_holds"]

# The share of positions whose greedy next token level 4 may change beyond level 0's changes (one in a hundred: a
# quantized model whose blocks take float activations already changes some; level 4's own rounding of the
# activations must not add more than that).
LEVEL4_MAX_LOSS = 0.01
# Level 4's perplexity over level 0's, at most.
LEVEL4_MAX_PERPLEXITY = 1.01


@dataclasses.dataclass(frozen=True)
class LevelChoice:
    """Level 4 against level 0 on the verification data: each one's next-token agreement with float and perplexity
    ratio, and the level kept."""

    output: str
    agreement: tuple[float, float]  # level 4, level 0
    perplexity_ratio: tuple[float | None, float | None]  # level 4, level 0 (quantized over float)
    kept: int
    key = "accuracy_level"  # report.Section

    def to_dict(self) -> dict:
        return {"output": self.output, "kept": self.kept,
                "level4": {"next_token_agreement": self.agreement[0], "perplexity_ratio": self.perplexity_ratio[0]},
                "level0": {"next_token_agreement": self.agreement[1], "perplexity_ratio": self.perplexity_ratio[1]}}

    def text(self) -> list[str]:
        def figures(i: int) -> str:
            ratio = self.perplexity_ratio[i]
            return f"next-token agreement {self.agreement[i]:.4f}" + ("" if ratio is None else
                                                                       f", perplexity {ratio:.3f}x")
        why = ("within" if self.kept == 4 else "beyond") + f" {LEVEL4_MAX_LOSS:g} of level 0's agreement"
        return [f"accuracy level: {self.kept} kept — level 4 (int8 activations) {figures(0)}; level 0 {figures(1)} "
                f"({why})"]

    def html(self) -> str:
        return f"<h2>MatMulNBits accuracy level</h2><p>{escape(self.text()[0])}</p>"


def level4_holds(agreement: tuple[float, float], perplexity_ratio: tuple[float | None, float | None]) -> bool:
    """Whether level 4 keeps greedy next tokens and perplexity within the bounds of level 0's."""
    ratio4, ratio0 = perplexity_ratio
    perplexity_holds = ratio4 is None or ratio0 is None or ratio4 <= ratio0 * LEVEL4_MAX_PERPLEXITY
    return agreement[0] >= agreement[1] - LEVEL4_MAX_LOSS and perplexity_holds
