"""Informer event handling without a server: bookmarks, expiry, odd objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from loadwise.informer import Gone, Informer


def informer(seen: list[tuple[str | None, str]]) -> Informer:
    def on_event(kind: str | None, obj: Mapping[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name == "odd":
            raise KeyError("a handler bug")
        seen.append((kind, name))

    return Informer(None, "/api/v1/pods", on_event)  # type: ignore[arg-type]


def test_events_advance_the_resource_version_and_bookmarks_only_that() -> None:
    seen: list[tuple[str | None, str]] = []
    inf = informer(seen)
    inf._dispatch({"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}})
    inf._dispatch({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    assert seen == [("ADDED", "a")]
    assert inf.resource_version == "9"


def test_a_handler_error_costs_one_event_not_the_stream() -> None:
    seen: list[tuple[str | None, str]] = []
    inf = informer(seen)
    inf._dispatch(
        {"type": "ADDED", "object": {"metadata": {"name": "odd", "resourceVersion": "2"}}}
    )
    inf._dispatch(
        {"type": "DELETED", "object": {"metadata": {"name": "b", "resourceVersion": "3"}}}
    )
    assert seen == [("DELETED", "b")]
    assert inf.resource_version == "3"


def test_expired_resource_version_means_relist() -> None:
    inf = informer([])
    with pytest.raises(Gone):
        inf._dispatch({"type": "ERROR", "object": {"kind": "Status", "code": 410}})
    with pytest.raises(RuntimeError):
        inf._dispatch({"type": "ERROR", "object": {"kind": "Status", "code": 500}})
