"""The harness waits for a (re)started KWOK to serve its Metrics' paths, touching the Metrics
while it does not (kwok.py `_wait_metric_paths`), against a stand-in that answers 404 as a
KWOK whose paths were never registered does."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from loadwise import secure_serving as serving
from loadwise_dev.controlplane import ControlPlane
from loadwise_dev.httpserve import ThreadedServer
from loadwise_dev.kwok import Kwok


class FakeKwok:
    """HTTPS, 404 on every path until `registered`, then 200 and no series."""

    def __init__(self, tmp_path: Path) -> None:
        cert, key = serving.self_signed_certificate(["127.0.0.1"])
        (tmp_path / "tls.crt").write_bytes(cert)
        (tmp_path / "tls.key").write_bytes(key)
        tls = serving.server_tls(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
        self.registered = False
        self.paths: list[str] = []
        self.server = ThreadedServer(self._respond, tls=tls)

    def _respond(self, path: str) -> tuple[int, str, bytes]:
        self.paths.append(path)
        return (200 if self.registered else 404), "text/plain", b""


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeKwok]:
    server = FakeKwok(tmp_path)
    server.server.start()
    yield server
    server.server.stop()


KwokOn = Callable[[list[tuple[str, ...]], bool], Kwok]


@pytest.fixture
def kwok_on(fake: FakeKwok) -> Iterator[KwokOn]:
    """`kwok_on(touches, registers)`: a Kwok aimed at the stand-in whose kubectl records its
    arguments in `touches` and, with `registers`, has the stand-in serve from then on."""
    made: list[Kwok] = []

    def make(touches: list[tuple[str, ...]], registers: bool) -> Kwok:
        kwok = Kwok(cast(ControlPlane, None), metrics=True)
        kwok.port = fake.server.port

        def kubectl(*args: str, stdin: str | None = None) -> None:
            touches.append(args)
            fake.registered = registers

        kwok._kubectl = kubectl  # type: ignore[method-assign]
        made.append(kwok)
        return kwok

    yield make
    for kwok in made:
        kwok.stop()  # its temporary directory


def test_paths_never_registered_are_touched_until_served(fake: FakeKwok, kwok_on: KwokOn) -> None:
    touches: list[tuple[str, ...]] = []
    with pytest.warns(RuntimeWarning, match="served no Metric paths"):
        kwok_on(touches, True)._wait_metric_paths(timeout=10, patience=0.3)
    assert len(touches) == 1, touches
    verb, *rest = touches[0]
    assert verb == "annotate" and "metrics.kwok.x-k8s.io" in rest and "--all" in rest
    assert any(arg.startswith("loadwise.io/touched=") for arg in rest), rest
    asked = set(fake.paths)
    assert "/metrics/nodes/loadwise-probe/metrics/cadvisor" in asked, asked
    assert "/metrics/nodes/loadwise-probe/metrics/resource" in asked, asked


def test_served_paths_are_not_touched(fake: FakeKwok, kwok_on: KwokOn) -> None:
    fake.registered = True
    touches: list[tuple[str, ...]] = []
    kwok_on(touches, True)._wait_metric_paths(timeout=10, patience=0.3)
    assert touches == []


def test_paths_that_stay_missing_fail_the_start_saying_so(kwok_on: KwokOn) -> None:
    touches: list[tuple[str, ...]] = []
    with (
        pytest.raises(TimeoutError, match="does not serve its Metrics' paths") as caught,
        pytest.warns(RuntimeWarning),
    ):
        kwok_on(touches, False)._wait_metric_paths(timeout=1.5, patience=0.3)
    assert "'cadvisor': 404" in str(caught.value), caught.value
    assert len(touches) >= 2, touches
