"""`spec.pools`: nodes whose safe utilisation differs from the policy's (GPU nodes, memory-heavy
nodes, spot nodes) get hot thresholds of their own, by a node selector; a node's own annotation
`loadwise.io/hot-thresholds` overrides both (framework/heat.py applies them, for placement,
rebalancing and the status alike)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from .selector_model import LabelSelector
from .spec_model import SpecModel as _Model

Percent = Annotated[float, Field(ge=1, le=100)]


class PoolThresholds(_Model):
    """The pool's hot thresholds: each one given replaces the policy's, the others stay."""

    cpu: Percent | None = Field(None, description="Percent CPU utilisation.")
    memory: Percent | None = Field(None, description="Percent memory utilisation.")
    dimensions: dict[str, Percent] = Field(
        default_factory=dict,
        max_length=8,
        description="Percent utilisation per extra dimension the policy declares, by its name.",
    )


class NodePool(_Model):
    """Nodes with hot thresholds of their own. A node in several pools takes the first's."""

    name: str = Field(
        pattern=r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$",
        max_length=63,
        description="The pool's name, in the status and `explain`.",
    )
    node_selector: LabelSelector = Field(
        description="The pool's nodes, by their labels (e.g. matchLabels "
        "node.kubernetes.io/instance-type or a node group's label)."
    )
    hot_thresholds: PoolThresholds = Field(description="Its hot thresholds.")

    @model_validator(mode="after")
    def _selects_something(self) -> NodePool:
        if not self.node_selector.match_labels and not self.node_selector.match_expressions:
            raise ValueError(
                f"pool {self.name}: an empty nodeSelector selects every node; set hotThresholds "
                "instead"
            )
        return self
