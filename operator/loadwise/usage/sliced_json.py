"""A large JSON answer holding one long list (a Prometheus vector's `result`, a Kubernetes
list's `items`) decoded in slices, so that it never holds the event loop for long: with 150,000
pods the per-pod answer is tens of MB, and decoding it in one call would pause scheduling for a
tenth of a second or more.

The list's elements are cut apart where one object ends and the next begins: `}`, a comma, `{`
and the key every element starts with (`"metric":`, `"metadata":`). That sequence cannot occur
inside a JSON string, where every quote is escaped, nor elsewhere in these answers, so each
slice between two cuts is a list of whole elements; the envelope is decoded with the last slice
in its place, so its other fields (status, warnings, kind) are read as the server sent them. An
answer that does not look so (other key order, an error) is decoded whole, as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import orjson

SLICE_BYTES = 1 << 16  # about 500 pods' series: 1-2 ms to decode and read


@cache
def _patterns(list_key: str, first_key: str) -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    head = re.compile(rb'"' + re.escape(list_key.encode()) + rb'"\s*:\s*\[\s*')
    between = re.compile(rb'\}\s*,\s*(?=\{\s*"' + re.escape(first_key.encode()) + rb'"\s*:)')
    return head, between


def slices(
    body: bytes | bytearray, list_key: str, first_key: str, size: int = SLICE_BYTES
) -> Iterator[Any]:
    """The answer decoded piece by piece: first the envelope (whose list holds the last
    slice's elements only), then each other slice's elements as a list, each about `size`
    bytes of the answer. `list_key` names the list (its first occurrence is taken), and
    `first_key` is the key every element begins with. A caller may await between items.
    Raises orjson.JSONDecodeError as `orjson.loads(body)` would."""
    head_pattern, between = _patterns(list_key, first_key)
    head = head_pattern.search(body)
    if head is None or len(body) <= 2 * size:
        yield orjson.loads(body)
        return
    cuts = []  # (where a slice ends, where the next begins)
    position = head.end() + size
    while position < len(body):
        match = between.search(body, position)
        if match is None:
            break
        cuts.append((match.start() + 1, match.end()))
        position = match.end() + size
    if not cuts:
        yield orjson.loads(body)
        return
    try:
        envelope = orjson.loads(body[: head.end()] + body[cuts[-1][1] :])
    except orjson.JSONDecodeError:
        yield orjson.loads(body)  # not what the cuts assumed: the whole answer, or its error
        return
    yield envelope
    start = head.end()
    for end, following in cuts:
        yield orjson.loads(b"[" + body[start:end] + b"]")
        start = following
