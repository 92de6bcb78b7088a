"""A large answer decoded in slices gives exactly the elements one decode gives."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from loadwise.usage import sliced_json
from loadwise.usage.prometheus_answers import NodeAnswer, parse_response

TRICKY = ['},{"metric":{', "]}}", '\\"},{\\"metric\\":', "ü,{", '"', "\\"]


def answer(series: int, rng: random.Random, **extra: Any) -> dict[str, Any]:
    """`series` series, two per node (cpu and memory), label values full of JSON syntax."""
    result = [
        {
            "metric": {
                "node": f"node-{i // 2}",
                "loadwise_resource": ("cpu", "memory")[i % 2],
                "odd": rng.choice(TRICKY) * rng.randint(0, 3),
            },
            "value": [1700000000.5 + i, f"{rng.random():.4f}"],
        }
        for i in range(series)
    ]
    return {"status": "success", "data": {"resultType": "vector", "result": result}, **extra}


def decoded(body: bytes, size: int) -> tuple[dict[str, Any], list[Any]]:
    pieces = sliced_json.slices(body, "result", "metric", size)
    envelope = next(pieces)
    series = [item for piece in pieces for item in piece]
    return envelope, [*series, *envelope["data"]["result"]]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dump", ["orjson", "spaced"])
def test_the_slices_hold_every_series_once_whatever_the_label_values(seed: int, dump: str) -> None:
    rng = random.Random(seed)
    payload = answer(rng.randint(300, 3000), rng, warnings=["a warning, with ]} in it"])
    body = orjson.dumps(payload) if dump == "orjson" else json.dumps(payload, indent=1).encode()
    envelope, series = decoded(body, size=rng.choice([2000, 5000, 20000]))
    assert sorted(series, key=lambda s: s["value"][0]) == payload["data"]["result"]
    assert envelope["warnings"] == payload["warnings"]
    assert envelope["status"] == "success"


def test_a_large_answer_is_cut_into_several_slices() -> None:
    body = orjson.dumps(answer(5000, random.Random(1)))
    assert len(list(sliced_json.slices(body, "result", "metric", size=50_000))) > 5


def test_small_answers_and_errors_are_decoded_whole() -> None:
    error = orjson.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"})
    assert list(sliced_json.slices(error, "result", "metric")) == [orjson.loads(error)]
    small = orjson.dumps(answer(3, random.Random(2)))
    assert list(sliced_json.slices(small, "result", "metric")) == [orjson.loads(small)]


def test_a_truncated_answer_raises_as_one_decode_would() -> None:
    body = orjson.dumps(answer(3000, random.Random(3)))
    for cut in (len(body) // 2, len(body) - 3):
        with pytest.raises(orjson.JSONDecodeError):
            list(sliced_json.slices(body[:cut], "result", "metric", size=20_000))


def test_the_node_answer_fed_in_slices_is_the_answer_parsed_whole() -> None:
    rng = random.Random(4)
    payload = answer(4000, rng)
    body = orjson.dumps(payload)
    whole = parse_response(payload, "node", 5.0)
    sliced = NodeAnswer("node", 5.0)
    pieces = sliced_json.slices(body, "result", "metric", size=30_000)
    sliced.add(next(pieces)["data"]["result"])
    for piece in pieces:
        sliced.add(piece)
    for _ in sliced.finish():
        pass
    assert len(whole) == 2000
    assert sliced.samples == whole


def test_a_kubernetes_list_is_cut_at_its_items() -> None:
    items = [
        {"metadata": {"name": f"pod-{i}", "namespace": '},{"metadata":'}, "containers": []}
        for i in range(3000)
    ]
    payload = {"kind": "PodMetricsList", "apiVersion": "v1", "metadata": {}, "items": items}
    pieces = sliced_json.slices(orjson.dumps(payload), "items", "metadata", size=20_000)
    envelope = next(pieces)
    rest = [item for piece in pieces for item in piece]
    assert envelope["kind"] == "PodMetricsList"
    assert rest and rest + envelope["items"] == items
