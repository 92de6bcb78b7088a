"""Indexes kept as a dict of sets (hostname -> nodes, claim -> assumed PVs, object -> waiting
PreBinds): a key stays only while its set holds something, so the index never grows with keys
that are gone."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def discard(index: dict[K, set[V]], key: K, value: V) -> None:
    """Take `value` out of the set under `key`, and the key too once its set is empty."""
    values = index.get(key)
    if values is not None:
        values.discard(value)
        if not values:
            del index[key]
