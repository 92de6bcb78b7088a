"""An error answer of a metrics source as one short line a user can read: the source's own
message field when the body is JSON with one, else the body as text (never a bytes repr)."""

from __future__ import annotations

import json


def error_text(body: bytes, field: str, limit: int = 200) -> str:
    """`field`: where the source puts its message (Prometheus: error; Kubernetes: message)."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get(field), str):
        text = payload[field]
    else:
        text = body.decode("utf-8", errors="replace")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
