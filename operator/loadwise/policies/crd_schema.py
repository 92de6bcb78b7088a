"""The SchedulingPolicy CRD as an object, built from the pydantic model (the one source of
truth): crd.py writes it as the CRD files, policy_reference.py as the reference page."""

from __future__ import annotations

from typing import Any

from .policy import GROUP, KIND, PLURAL, VERSION, SchedulingPolicySpec, SchedulingPolicyStatus

_KEEP = {
    "type",
    "description",
    "properties",
    "items",
    "additionalProperties",
    "required",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "maxItems",
    "enum",
    "default",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
}


def openapi_schema(model: type[Any]) -> dict[str, Any]:
    """A structural OpenAPI v3 schema (refs inlined, titles and nulls dropped) for a model."""
    raw = model.model_json_schema(by_alias=True)
    defs = raw.pop("$defs", {})
    return _convert(raw, defs)


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, defs)
    if "anyOf" in node:  # Optional[X]: the API has no null, an absent field means unset
        variants = [v for v in node["anyOf"] if v.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"cannot express union {node['anyOf']} in a structural schema")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if rest.get("default", "") is None:
            rest.pop("default")
        return _convert({**variants[0], **rest}, defs)
    if "const" in node:
        node = {**node, "enum": [node["const"]]}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP:
            continue
        if key == "properties":
            out[key] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _convert(value, defs)
        elif key == "additionalProperties":
            # Structural schemas forbid `false` here; unknown fields are refused by the server's
            # strict field validation (kubectl's default) and always by the pydantic model.
            continue
        elif key == "default" and isinstance(value, dict | list) and not value:
            continue  # empty defaults only add noise to the stored object
        else:
            out[key] = value
    if "properties" in out:
        out["type"] = "object"
        out.pop("default", None)
        # An optional object field defaults to its fields' defaults, so the stored object is
        # complete (and CEL rules on it see every field).
        required = set(out.get("required", ()))
        for name, sub in out["properties"].items():
            if name not in required and sub.get("type") == "object" and "properties" in sub:
                sub["default"] = _object_default(sub)
    if out.get("type") == "number" and isinstance(out.get("default"), float):
        out["default"] = _number(out["default"])
    return out


def _object_default(schema: dict[str, Any]) -> dict[str, Any]:
    return {name: sub["default"] for name, sub in schema["properties"].items() if "default" in sub}


def _number(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def build_crd() -> dict[str, Any]:
    spec_schema = openapi_schema(SchedulingPolicySpec)
    status_schema = openapi_schema(SchedulingPolicyStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["schedpol"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {  # weights, not usage: named so
                            "name": "CPU-Weight",
                            "type": "number",
                            "jsonPath": ".spec.weights.cpu",
                        },
                        {
                            "name": "Mem-Weight",
                            "type": "number",
                            "jsonPath": ".spec.weights.memory",
                        },
                        {"name": "Strategy", "type": "string", "jsonPath": ".spec.strategy"},
                        {"name": "Source", "type": "string", "jsonPath": ".spec.metrics.source"},
                        {"name": "Precedence", "type": "integer", "jsonPath": ".spec.precedence"},
                        {"name": "Fallback", "type": "boolean", "jsonPath": ".spec.fallback"},
                        {
                            "name": "Fresh-Nodes",
                            "type": "integer",
                            "jsonPath": ".status.nodesWithFreshMetrics",
                        },
                        {
                            "name": "Ready",
                            "type": "string",
                            "jsonPath": ".status.conditions[?(@.type=='Ready')].status",
                        },
                        {  # Ready says the spec is in use; this, whether scoring is load-aware
                            "name": "Metrics-Available",
                            "type": "string",
                            "jsonPath": ".status.conditions[?(@.type=='MetricsAvailable')].status",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "Declares how loadwise scores nodes for the pods "
                            "it selects: weights of real CPU and memory utilisation.",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {
                                    **spec_schema,
                                    "description": SchedulingPolicySpec.__doc__,
                                    # A policy without spec is stored (and shown by kubectl
                                    # get -o yaml) with every default filled in by the server.
                                    "default": {},
                                },
                                "status": {
                                    **status_schema,
                                    "description": SchedulingPolicyStatus.__doc__,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
