"""The SchedulingPolicy reference (docs/policy-reference.md), generated from the same schema as
the CRD, so the page, the CRD and the model cannot disagree; a test fails on drift.
`python -m loadwise.policies.crd --write` rewrites it with the CRD files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .crd_schema import build_crd

TARGET = "docs/policy-reference.md"
HEADER = """# SchedulingPolicy reference

Generated from the pydantic model (`operator/loadwise/policies/policy.py`) by
`python -m loadwise.policies.crd --write`; do not edit. What the fields do together, with examples:
[SchedulingPolicy](policy.md). `apiVersion: {group}/{version}`, `kind: {kind}`, cluster-scoped
(short name `schedpol`). The API server checks the bounds and rules below; a policy that
passes them but not the operator's model is marked `Ready=False` with the reason.
"""


def _type(schema: dict[str, Any]) -> str:
    kind = str(schema.get("type", "object"))
    if kind == "array":
        return f"array of {_type(schema.get('items') or {})}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map of {_type(schema['additionalProperties'])}"
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    return kind


def _bounds(schema: dict[str, Any]) -> str:
    parts = []
    for key, text in (
        ("minimum", "≥ {}"),
        ("maximum", "≤ {}"),
        ("minLength", "length ≥ {}"),
        ("maxLength", "length ≤ {}"),
        ("maxItems", "at most {} items"),
        ("pattern", "matches `{}`"),
    ):
        if key in schema:
            parts.append(text.format(schema[key]))
    return ", ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _rows(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any], bool]]:
    required = set(schema.get("required", ()))
    for name, sub in (schema.get("properties") or {}).items():
        field = f"{path}.{name}" if path else name
        yield field, sub, name in required
        if sub.get("type") == "object" and "properties" in sub:
            yield from _rows(sub, field)
        items = sub.get("items") or {}
        if sub.get("type") == "array" and "properties" in items:
            yield from _rows(items, f"{field}[]")


def _table(schema: dict[str, Any], root: str) -> list[str]:
    lines = [
        "| field | type | default | bounds | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    rules: list[tuple[str, dict[str, Any]]] = []
    for field, sub, required in _rows(schema, root):
        default = sub.get("default")
        shown = "required" if required else "" if default is None else f"`{json.dumps(default)}`"
        if sub.get("type") == "object" and "properties" in sub and default is not None:
            shown = "its fields' defaults"
        lines.append(
            f"| `{field}` | {_type(sub)} | {shown} | {_cell(_bounds(sub))} "
            f"| {_cell(str(sub.get('description', '')))} |"
        )
        rules += [(field, rule) for rule in sub.get("x-kubernetes-validations", ())]
    rules = [(root, rule) for rule in schema.get("x-kubernetes-validations", ())] + rules
    if rules:
        lines += ["", "Rules the API server checks (CEL):", ""]
        lines += [
            f"- `{field}`: {_cell(str(rule.get('message', rule['rule'])))}" for field, rule in rules
        ]
    return lines


def render() -> str:
    crd = build_crd()
    spec = crd["spec"]
    version = spec["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    lines = [
        HEADER.format(group=spec["group"], version=version["name"], kind=spec["names"]["kind"])
    ]
    for part in ("spec", "status"):
        lines += [f"## {part}", "", _cell(str(schema[part].get("description", ""))), ""]
        lines += _table(schema[part], part)
        lines.append("")
    lines += ["## kubectl get schedpol columns", ""]
    lines += [
        f"- `{column['name'].upper()}`: `{column['jsonPath']}`"
        for column in version["additionalPrinterColumns"]
    ]
    return "\n".join(lines).rstrip("\n") + "\n"
