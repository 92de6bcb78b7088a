"""The streamed list splitter: the same items as decoding the whole response, wherever the
chunks are cut, or a ValueError (never a wrong item) when an item holds the separator."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadwise.kube.liststream import ListSplitter, decode

TRICKY = ['},{"metadata":', '"items":[', "]}", '\\"', "{", "}", ",", "é"]
text = st.one_of(st.text(max_size=12), st.sampled_from(TRICKY))
plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "spec"]), inner)
    ),
    max_leaves=8,
)


def item(name: str, body: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"x": name}}, "spec": body}


def response(items: list[Any], meta: dict[str, Any] | None = None) -> bytes:
    meta = {"resourceVersion": "42"} if meta is None else meta
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items})


def feed_in_chunks(splitter: ListSplitter, body: bytes, cuts: list[int], out: list[Any]) -> None:
    start = 0
    for cut in [*sorted({min(c, len(body)) for c in cuts}), len(body)]:
        out += splitter.feed(body[start:cut])
        start = cut
    out += splitter.finish()


def split(body: bytes, cuts: list[int]) -> tuple[list[Any], Any]:
    splitter = ListSplitter()
    out: list[Any] = []
    feed_in_chunks(splitter, body, cuts, out)
    return out, splitter.metadata


@given(st.lists(plain, max_size=6), st.lists(st.integers(0, 4000), max_size=12))
def test_items_come_out_as_decoded_wherever_the_chunks_are_cut(
    bodies: list[Any], cuts: list[int]
) -> None:
    items = [item(f"p{i}", b) for i, b in enumerate(bodies)]
    got, meta = split(response(items), cuts)
    assert got == items
    assert meta == {"resourceVersion": "42"}


@given(st.lists(st.integers(0, 600), max_size=8))
def test_an_item_holding_the_separator_fails_the_split_never_yields_a_wrong_item(
    cuts: list[int],
) -> None:
    # A StatefulSet's volumeClaimTemplates: objects whose first field is metadata, in an array.
    templates = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
    items = [item("first", {}), item("sts", {"volumeClaimTemplates": templates}), item("z", {})]
    splitter = ListSplitter()
    body = response(items)
    got: list[Any] = []
    with pytest.raises(ValueError):
        feed_in_chunks(splitter, body, cuts, got)
    assert all(g in items for g in got)


def test_continue_token_and_an_empty_list() -> None:
    meta = {"resourceVersion": "7", "continue": "abc=="}
    assert split(response([], meta), [3, 50]) == ([], meta)


@pytest.mark.parametrize(
    "body",
    [
        b'{"kind":"Status","code":500}',  # not a list
        b'{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{}}',  # cut short
        b'{"kind":"PodList","items":[],"metadata":{}}',  # items before metadata
    ],
)
def test_what_is_not_a_whole_list_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        split(body, [])


# --- decode: managedFields left out, nothing else changed ------------------------------------
managed = st.lists(
    st.fixed_dictionaries(
        {
            "manager": text,
            "operation": st.sampled_from(["Update", "Apply"]),
            "fieldsV1": st.dictionaries(
                st.sampled_from(["f:metadata", "f:spec", 'k:{"name":"a"}', "."]),
                st.dictionaries(st.sampled_from(["f:x", "."]), st.just({}), max_size=2),
                max_size=3,
            ),
        }
    ),
    max_size=2,
)
meta = st.fixed_dictionaries(
    {"name": text}, optional={"finalizers": st.lists(text, max_size=2), "managedFields": managed}
)
obj = st.fixed_dictionaries(
    {"metadata": meta},
    optional={
        "spec": st.fixed_dictionaries(
            {}, optional={"template": st.fixed_dictionaries({"metadata": meta, "spec": plain})}
        ),
        "data": plain,
    },
)


def without_one_managed_fields(value: Any) -> list[Any]:
    """`value` with one managedFields key removed, for each place one is."""
    out = []
    if isinstance(value, dict):
        if "managedFields" in value:
            out.append({k: v for k, v in value.items() if k != "managedFields"})
        for key, inner in value.items():
            out += [{**value, key: changed} for changed in without_one_managed_fields(inner)]
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            out += [
                [*value[:i], changed, *value[i + 1 :]]
                for changed in without_one_managed_fields(inner)
            ]
    return out


@given(
    st.one_of(obj, st.lists(obj, max_size=3), st.fixed_dictionaries({"type": text, "object": obj}))
)
def test_decode_leaves_out_a_managed_fields_and_changes_nothing_else(value: Any) -> None:
    got = decode(orjson.dumps(value))
    assert got == value or got in without_one_managed_fields(value)


def test_decode_leaves_out_a_pods_managed_fields() -> None:
    pod = {
        "metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [{"manager": "m"}]},
        "spec": {"nodeName": "n"},
        "status": {},
    }
    assert decode(orjson.dumps(pod)) == {
        "metadata": {"name": "p", "labels": {"a": "b"}},
        "spec": {"nodeName": "n"},
        "status": {},
    }
    # An object without spec followed by one with it, in one array: never merged.
    first = {"metadata": {"name": "cm", "managedFields": [{"manager": "m"}]}, "data": {}}
    second = {"metadata": {"name": "p", "finalizers": ["f"]}, "spec": {}}
    assert decode(orjson.dumps([first, second])) == [first, second]
