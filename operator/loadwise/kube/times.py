"""Kubernetes' timestamps (metav1.Time: RFC 3339, whole seconds, UTC)."""

from __future__ import annotations

from datetime import UTC, datetime


def stamp(when: float | None = None) -> str:
    """`when` (now by default) as the API server writes a metav1.Time."""
    moment = datetime.now(UTC) if when is None else datetime.fromtimestamp(when, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
