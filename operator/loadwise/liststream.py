"""A Kubernetes list response split into its items while its bytes still arrive.

A start-up list of 50,000 pods is one 85 MB JSON document. Decoding it whole waited for its
last byte and then held the decoded list at once; split as it streams, each item is decoded
and fed while the API server is still sending the rest, on the other core.

The API server writes a list as `{"kind":..,"apiVersion":..,"metadata":{..},"items":[{..},..]}`
(Go's field order) and every item's first field is its metadata, so an item ends where
`},{"metadata":` follows. That byte sequence cannot occur inside a JSON string (a quote there is
escaped); it can occur deeper in an item (a StatefulSet's volumeClaimTemplates), and then the
piece cut there does not decode: `feed` raises ValueError and the caller lists again without
splitting. A split can fail but never yield a wrong item.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

_ITEMS = b'"items":['
_BETWEEN = b'},{"metadata":'


class ListSplitter:
    def __init__(self) -> None:
        self.metadata: Mapping[str, Any] | None = None  # the list's, once its header is read
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[Any]:
        """The items completed by this chunk, decoded."""
        buffer = self._buffer + chunk
        if self.metadata is None:
            at = buffer.find(_ITEMS)
            if at < 0:
                self._buffer = buffer
                return []
            header = orjson.loads(buffer[:at] + b'"items":[]}')
            if not isinstance(header, dict) or not isinstance(header.get("metadata"), dict):
                raise ValueError("list response without metadata before its items")
            self.metadata = header["metadata"]
            buffer = buffer[at + len(_ITEMS) :]
        items = []
        start = 0
        while (end := buffer.find(_BETWEEN, start)) >= 0:
            items.append(orjson.loads(buffer[start : end + 1]))
            start = end + 2
        self._buffer = buffer[start:]
        return items

    def finish(self) -> list[Any]:
        """The last item(s), once the response has ended; ValueError if it was not a list."""
        rest = self._buffer.rstrip()
        if self.metadata is None or not rest.endswith(b"]}"):
            raise ValueError("list response ended early or is not a list")
        self._buffer = b""
        last = rest[:-2]
        items: list[Any] = orjson.loads(b"[" + last + b"]")
        return items
