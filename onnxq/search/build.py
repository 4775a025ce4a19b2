"""One way to build a quantized model from a float graph, shared by every search (the fallback, recipe auto, the
sensitivity twins): plan every node under the user's config and the search's decisions, then rewrite with the
run's statistics. What a search decides (nodes kept float, 4-bit nodes at 8 bits, nodes per token) is an
Overrides value: it never rewrites the user's config, so the report shows the config as given."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import onnx_ir as ir

from onnxq.calibration.moments import WeightMoments
from onnxq.config import QuantConfig
from onnxq.handlers import NodePlan, Skip, plan_model
from onnxq.handlers.planner import replan_dynamic
from onnxq.passes.graph.apply import apply_plans
from onnxq.passes.forms.quantize import needed_ranges

__all__ = ["Overrides", "Statistics", "Built", "Builder", "unobserved_bodies_dynamic"]

UNOBSERVED = ("no calibrated range for its activation (the calibration data never ran this subgraph; or calibration "
              "could not pass its values out: a body other than If / Loop / Scan, a Scan whose iterations differ in "
              "size — --method minmax passes those; or the cache predates subgraph calibration)")


def unobserved_bodies_dynamic(plans: list[NodePlan], skips: list[Skip], config: QuantConfig,
                              ranges: Mapping[str, tuple[float, float]]) -> tuple[list[NodePlan], list[Skip]]:
    """Subgraph nodes whose activation has no range, planned again dynamic with the reason: the data never computed
    it (a branch not taken, a loop without iterations), a cache written before onnxq observed subgraphs holds
    none, or calibration cannot pass it out of its body (calibration.bodies)."""
    unobserved = {p.node for p in plans if p.scope and any(n not in ranges for n in needed_ranges([p], config))}
    return replan_dynamic(plans, skips, config, unobserved, UNOBSERVED) if unobserved else (plans, skips)


@dataclasses.dataclass(frozen=True)
class Overrides:
    """A search's decisions, by node name, on top of the user's config."""

    float_nodes: tuple[str, ...] = ()  # kept float (fallback)
    eight_bit: tuple[str, ...] = ()  # 4-bit weights in 8-bit blocks (fallback's middle tier)
    per_token: tuple[str, ...] = ()  # activations per token (recipe auto)
    compute: str = ""  # the float arithmetic, when a search chose it (--check-speed: float32 where float16 is slower)
    # MatMulNBits' accuracy_level, where a search chose it (steps.accuracy_level: 0 where 4 changes greedy tokens).
    accuracy_level: int | None = None

    def __or__(self, other: Overrides) -> Overrides:
        level = self.accuracy_level if other.accuracy_level is None else other.accuracy_level
        return Overrides(self.float_nodes + other.float_nodes, self.eight_bit + other.eight_bit,
                         self.per_token + other.per_token, other.compute or self.compute, level)

    def effective(self, config: QuantConfig) -> QuantConfig:
        """The config the planner and the passes read: the user's, with these nodes added to its own lists."""
        if self == Overrides():
            return config
        changes: dict = {}
        if self.float_nodes:
            changes["exclude_nodes"] = config.exclude_nodes + self.float_nodes
        if self.per_token:
            changes["per_token_nodes"] = config.per_token_nodes + self.per_token
        blocks = config.blocks
        if self.eight_bit:
            blocks = dataclasses.replace(blocks, int8_nodes=blocks.int8_nodes + self.eight_bit)
        if self.accuracy_level is not None:
            blocks = dataclasses.replace(blocks, accuracy_level=self.accuracy_level)
        if blocks is not config.blocks:
            changes["blocks"] = blocks
        if self.compute:
            changes["compute"] = self.compute
        return config.replace(**changes)


@dataclasses.dataclass(frozen=True)
class Statistics:
    """What calibration measured, the same for every model a run builds from one float graph."""

    ranges: Mapping[str, tuple[float, float]]
    moments: WeightMoments | None = None
    magnitudes: Mapping[str, float] | None = None  # float16 compute: max |x| per float value (steps.magnitudes)


@dataclasses.dataclass
class Built:
    model: ir.Model
    plans: list[NodePlan]
    skips: list[Skip]
    bias_notes: dict[str, str]  # how a node's bias was kept where it is not plain int32: float (why), widened weights
    kept_qdq: dict[str, str]  # format qoperator: nodes left in QDQ form, with why


@dataclasses.dataclass(frozen=True)
class Builder:
    """Everything a model is built from but a search's new decisions."""

    float_model: ir.Model  # the float graph (smoothed, when asked); never rewritten
    config: QuantConfig  # the user's
    mode: str
    stats: Statistics
    overrides: Overrides = Overrides()  # decisions already made (recipe auto's per-token nodes)

    @property
    def effective_config(self) -> QuantConfig:
        return self.overrides.effective(self.config)

    def build(self, extra: Overrides = Overrides()) -> Built:
        """A clone of the float graph, planned and rewritten (clones share the float weights; each weight's
        quantization is shared across builds: passes.graph.builder.shared_weight_quantization)."""
        config = (self.overrides | extra).effective(self.config)
        model = self.float_model.clone()
        plans, skips = plan_model(model.graph, config, self.mode)
        plans, skips = unobserved_bodies_dynamic(plans, skips, config, self.stats.ranges)
        rewritten = apply_plans(model, plans, self.stats.ranges, config, self.mode, self.stats.moments,
                                self.stats.magnitudes)
        return Built(model, plans, skips, rewritten.bias_notes, rewritten.kept_qdq)

    def on(self, float_model: ir.Model) -> Builder:
        """The same, from another float graph (a smoothed one)."""
        return dataclasses.replace(self, float_model=float_model)
