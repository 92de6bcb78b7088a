"""A node's own hot thresholds: the annotation `loadwise.io/hot-thresholds`, e.g.
`cpu=70,memory=85,gpu=90` (percent, 1-100; a dimension by the name policies declare). It
overrides the policy's thresholds and its pools' for that node (framework/heat.py). A value
that cannot be read is refused whole, with a message naming it, and the node keeps the
policy's thresholds (the status says so)."""

from __future__ import annotations

import re
from collections.abc import Mapping

ANNOTATION = "loadwise.io/hot-thresholds"
_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


def parse_node_thresholds(annotations: Mapping[str, str]) -> tuple[dict[str, float], str]:
    """(resource -> percent, "") or ({}, why the annotation is refused); ({}, "") without it."""
    value = annotations.get(ANNOTATION)
    if value is None:
        return {}, ""
    found: dict[str, float] = {}
    for part in str(value).split(","):
        name, sep, number = (x.strip() for x in part.partition("="))
        if not sep or not _NAME.match(name):
            return {}, f'{ANNOTATION} "{value}": {part.strip()!r} is not NAME=PERCENT'
        try:
            percent = float(number)
        except ValueError:
            percent = -1.0
        if not 1 <= percent <= 100:
            return {}, f'{ANNOTATION} "{value}": {name}={number} is not a percent (1-100)'
        if name in found:
            return {}, f'{ANNOTATION} "{value}": {name} is given twice'
        found[name] = percent
    return found, ""
