"""Label selectors in a SchedulingPolicy (pods, namespaces, node pools), as Kubernetes'
LabelSelector, validated by the API server (CEL) and by the model alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from ..labels import requirement_matches
from .spec_model import SpecModel as _Model


class LabelSelectorRequirement(_Model):
    """One label requirement, as in a Kubernetes LabelSelector."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.operator in ['In', 'NotIn']"
                    " ? (has(self.values) && size(self.values) > 0)"
                    " : (!has(self.values) || size(self.values) == 0)",
                    "message": "In and NotIn need values; Exists and DoesNotExist take none",
                }
            ]
        }
    )

    key: str = Field(min_length=1, max_length=317, description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="How the key relates to the values."
    )
    values: list[Annotated[str, Field(max_length=63)]] = Field(
        default_factory=list, max_length=256, description="Values for In and NotIn."
    )

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        if (self.operator in ("In", "NotIn")) != bool(self.values):
            raise ValueError("In and NotIn need values; Exists and DoesNotExist take none")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        return requirement_matches(self.key, self.operator, self.values, labels)


class LabelSelector(_Model):
    """Selects objects by label (pods for podSelector, their namespaces for namespaceSelector,
    nodes for a pool's nodeSelector); an empty selector selects all."""

    match_labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict,
        description="Labels the object (the pod; for namespaceSelector its namespace; for a "
        "pool its node) must carry with exactly these values.",
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=64, description="Requirements that must all hold."
    )

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )
