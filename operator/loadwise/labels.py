"""One label requirement matched as Kubernetes matches it (apimachinery's labels and the
node-affinity helpers): the policy model's pod selectors and the framework's selectors share it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_INTEGER = re.compile(r"[+-]?[0-9]+\Z")


def requirement_matches(
    key: str, operator: str, values: Sequence[str], labels: Mapping[str, str]
) -> bool:
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt"):
        if key not in labels or len(values) != 1:
            return False
        have, want = labels[key], values[0]
        if not (_INTEGER.match(have) and _INTEGER.match(want)):
            return False  # as Go's strconv.ParseInt: no spaces, no underscores
        return int(have) > int(want) if operator == "Gt" else int(have) < int(want)
    return False  # unknown operators never match
