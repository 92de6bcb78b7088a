"""Label and node selectors with Kubernetes' matching rules (apimachinery labels, nodeaffinity).

A nil Selector selects nothing and an empty one everything; a NodeSelectorTerm with no
requirements matches no node; NotIn and DoesNotExist match when the label is absent; Gt and Lt
compare integers and fail when either side does not parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..labels import requirement_matches


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return requirement_matches(self.key, self.operator, self.values, labels)


def _requirements(raw: Any) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(str(r.get("key", "")), str(r.get("operator", "")), tuple(r.get("values") or ()))
        for r in raw or ()
    )


@dataclass(frozen=True, slots=True)
class Selector:
    match_labels: tuple[tuple[str, str], ...]
    expressions: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.expressions
        )

    def with_requirements(self, extra: tuple[Requirement, ...]) -> Selector:
        return Selector(self.match_labels, self.expressions + extra)


EVERYTHING = Selector((), ())


def parse_label_selector(raw: Mapping[str, Any] | None) -> Selector | None:
    """None for a nil selector (selects nothing)."""
    if raw is None:
        return None
    return Selector(
        tuple((str(k), str(v)) for k, v in (raw.get("matchLabels") or {}).items()),
        _requirements(raw.get("matchExpressions")),
    )


def selects(selector: Selector | None, labels: Mapping[str, str]) -> bool:
    return selector is not None and selector.matches(labels)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]  # only metadata.name is defined

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        fields = {"metadata.name": name}
        return all(r.matches(labels) for r in self.expressions) and all(
            r.matches(fields) for r in self.fields
        )


def parse_node_selector_term(raw: Mapping[str, Any]) -> NodeSelectorTerm:
    return NodeSelectorTerm(
        _requirements(raw.get("matchExpressions")), _requirements(raw.get("matchFields"))
    )


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """spec.nodeSelector AND (any of the required node affinity terms)."""

    node_selector: tuple[tuple[str, str], ...]
    terms: tuple[NodeSelectorTerm, ...] | None  # None: no required node affinity

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not all(labels.get(k) == v for k, v in self.node_selector):
            return False
        return self.terms is None or any(t.matches(name, labels) for t in self.terms)

    @property
    def empty(self) -> bool:
        return not self.node_selector and self.terms is None


def parse_required_node_affinity(spec: Mapping[str, Any]) -> RequiredNodeAffinity:
    selector = tuple((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = None
    if required is not None:
        terms = tuple(parse_node_selector_term(t) for t in required.get("nodeSelectorTerms") or ())
    return RequiredNodeAffinity(selector, terms)


def parse_preferred_node_affinity(
    spec: Mapping[str, Any],
) -> tuple[tuple[int, NodeSelectorTerm], ...]:
    preferred = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    )
    return tuple(
        (int(p.get("weight") or 0), parse_node_selector_term(p.get("preference") or {}))
        for p in preferred or ()
    )
