"""The rate window and lag of a PromQL query, from the scrape interval Prometheus reports.

A fixed `rate(...[1m])` needs at least two samples in the minute: it answers nothing where
Prometheus scrapes every minute (the `prometheus` Helm chart's default) and is noisy at 30 s
(kube-prometheus-stack's). Queries may therefore say `$window`, filled in with four scrape
intervals and at least a minute (Grafana's `$__rate_interval` rule), and the lag (how long
before a query a placement must be to show fully in it) is that window plus one interval.
The interval is read from Prometheus' own API: `/api/v1/targets/metadata?metric=NAME` names the
targets exposing a metric, `/api/v1/targets` gives each active target's `scrapeInterval`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

WINDOW = "$window"
MIN_WINDOW = 60.0
# What a query written with a 1m window and a 15 s scrape assumes (the default before this).
DEFAULT_LAG = 75.0

_RANGE_FUNCTION = re.compile(
    r"\b(?:rate|irate|increase|delta|idelta|deriv|[a-z]+_over_time)\s*\(\s*"
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)"
)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def windowed_metrics(queries: Iterable[str]) -> set[str]:
    """Metric names read by a range function in the queries that use `$window`."""
    return {name for query in queries if WINDOW in query for name in _RANGE_FUNCTION.findall(query)}


def window_for(interval: float | None) -> float:
    """Four scrapes and at least a minute; a minute when the interval is unknown."""
    if interval is None:
        return MIN_WINDOW
    return float(max(MIN_WINDOW, math.ceil(4 * interval)))


def lag_for(interval: float | None) -> float:
    return DEFAULT_LAG if interval is None else window_for(interval) + interval


def with_window(query: str, window: float) -> str:
    return query.replace(WINDOW, f"{math.ceil(window)}s")


def parse_duration(text: Any) -> float | None:
    """Prometheus' duration format (`15s`, `1m30s`, `500ms`), or None."""
    if not isinstance(text, str) or not text:
        return None
    parts = _DURATION_PART.findall(text)
    if "".join(number + unit for number, unit in parts) != text:
        return None
    seconds = sum(float(number) * _UNIT[unit] for number, unit in parts)
    return seconds if seconds > 0 else None


def _data(payload: Any) -> Any:
    if not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, dict) else None
        raise ValueError(str(error or "unexpected response"))
    return payload.get("data")


def intervals_by_target(targets_payload: Any) -> dict[frozenset[tuple[str, str]], float]:
    """Each active target's labels -> its scrape interval, from /api/v1/targets."""
    data = _data(targets_payload)
    active = data.get("activeTargets") if isinstance(data, dict) else None
    found: dict[frozenset[tuple[str, str]], float] = {}
    for target in active if isinstance(active, list) else ():
        if not isinstance(target, dict) or not isinstance(target.get("labels"), dict):
            continue
        interval = parse_duration(target.get("scrapeInterval"))
        if interval is not None:
            found[_key(target["labels"])] = interval
    return found


def metric_interval(
    metadata_payload: Any, targets: Mapping[frozenset[tuple[str, str]], float]
) -> float | None:
    """The longest scrape interval of the targets exposing a metric (from
    /api/v1/targets/metadata?metric=NAME), or None when none of them is an active target."""
    data = _data(metadata_payload)
    intervals = [
        targets[key]
        for entry in (data if isinstance(data, list) else ())
        if isinstance(entry, dict)
        and isinstance(entry.get("target"), dict)
        and (key := _key(entry["target"])) in targets
    ]
    return max(intervals, default=None)


def _key(labels: Mapping[Any, Any]) -> frozenset[tuple[str, str]]:
    return frozenset((str(k), str(v)) for k, v in labels.items())
