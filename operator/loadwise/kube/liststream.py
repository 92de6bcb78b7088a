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

`decode` leaves out metadata.managedFields, which nothing here reads and which is a third to a
half of a pod's JSON (and of the time to decode it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

_ITEMS = b'"items":['
_BETWEEN = b'},{"metadata":'
_MANAGED = b',"managedFields":['
_MANAGED_END = b']},"spec":'
_CLOSED = (b'],"', b']},"', b"]}}", b"]]")  # what can follow an array's end


def decode(raw: bytes) -> Any:
    """An object (or a watch event) as JSON, without its metadata.managedFields.

    The cut runs from `,"managedFields":[` to the first `]},"spec":` after it: in every kind
    listed here managedFields is the metadata's last field (Go's field order) and spec the next
    one. It is made only if no array closes in between: a managedFields entry holds none, and
    an array closed outside a string is followed by `,"`, `},"`, `}}` or `]` (which no string
    holds unescaped, or which are checked for, at worst refusing a cut that was right). So the
    cut never reaches past the array into other fields or objects; if it is not made, or does
    not decode, the whole is decoded."""
    start = raw.find(_MANAGED)
    if start >= 0:
        end = raw.find(_MANAGED_END, start)
        if end >= 0 and (
            raw.find(b"]", start, end) < 0  # the usual case: no `]` at all, not even in strings
            or not any(raw.find(closed, start, end) >= 0 for closed in _CLOSED)
        ):
            try:
                return orjson.loads(raw[:start] + raw[end + 1 :])
            except orjson.JSONDecodeError:
                pass
    return orjson.loads(raw)


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
            header = orjson.loads(buffer[:at] + b'"items":[]}')  # metadata; nothing to cut
            if not isinstance(header, dict) or not isinstance(header.get("metadata"), dict):
                raise ValueError("list response without metadata before its items")
            self.metadata = header["metadata"]
            buffer = buffer[at + len(_ITEMS) :]
        items = []
        start = 0
        while (end := buffer.find(_BETWEEN, start)) >= 0:
            items.append(decode(buffer[start : end + 1]))
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
        items: list[Any] = decode(b"[" + last + b"]")
        return items
