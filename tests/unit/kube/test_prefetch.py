"""The start-up prefetch: which credentials it uses, and what the informer gets from it (the
list's items, or a Failed that sends it to its own list). Served by a real TLS server here; the
real API server's answer is checked by tests/cluster/test_json_logs.py."""

from __future__ import annotations

import asyncio
import base64
import itertools
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from loadwise import cli
from loadwise.kube import prefetch
from loadwise.kube.transport import split
from loadwise.secure_serving import self_signed_certificate

CERT, KEY = self_signed_certificate(["localhost", "127.0.0.1"])


def kubeconfig(
    tmp_path: Path, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None
) -> Path:
    b64 = base64.b64encode
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "current-context": "here",
                "contexts": [
                    {"name": "other", "context": {"cluster": "x", "user": "x"}},
                    {"name": "here", "context": {"cluster": "c", "user": "u"}},
                ],
                "clusters": [
                    {
                        "name": "c",
                        "cluster": cluster
                        or {
                            "server": "https://127.0.0.1:6443/",
                            "certificate-authority-data": b64(CERT).decode(),
                        },
                    }
                ],
                "users": [{"name": "u", "user": user or {"token": "secret"}}],
            }
        )
    )
    return path


def test_a_token_kubeconfig_is_used_as_the_client_will(tmp_path: Path) -> None:
    found = prefetch.credentials({"KUBECONFIG": str(kubeconfig(tmp_path))})
    assert found is not None
    assert (found.server, found.authorization) == ("https://127.0.0.1:6443", "Bearer secret")


def test_a_client_certificate_from_data_or_a_file_relative_to_the_kubeconfig(
    tmp_path: Path,
) -> None:
    b64 = base64.b64encode
    (tmp_path / "client.crt").write_bytes(CERT)
    (tmp_path / "client.key").write_bytes(KEY)
    for user in (
        {"client-certificate-data": b64(CERT).decode(), "client-key-data": b64(KEY).decode()},
        {"client-certificate": "client.crt", "client-key": "client.key"},
    ):
        found = prefetch.credentials({"KUBECONFIG": str(kubeconfig(tmp_path, user=user))})
        assert found is not None and found.authorization is None
    assert not list(Path("/tmp").glob("loadwise-prefetch-*"))  # inline PEM files removed


@pytest.mark.parametrize(
    ("cluster", "user"),
    [
        (None, {"exec": {"command": "aws"}}),
        (None, {"auth-provider": {"name": "oidc"}}),
        (None, {"tokenFile": "/var/token"}),
        ({"server": "https://h:1", "proxy-url": "http://proxy:3128"}, None),
        ({"server": "https://h:1", "insecure-skip-tls-verify": True}, None),
        ({"server": "http://h:1"}, None),
    ],
)
def test_anything_but_plain_credentials_is_left_to_the_client(
    tmp_path: Path, cluster: dict[str, Any] | None, user: dict[str, Any] | None
) -> None:
    assert prefetch.credentials({"KUBECONFIG": str(kubeconfig(tmp_path, cluster, user))}) is None


def test_no_usable_kubeconfig_means_no_prefetch(tmp_path: Path) -> None:
    one = kubeconfig(tmp_path)
    assert prefetch.credentials({"KUBECONFIG": f"{one}:{one}"}) is None  # merged: the client's
    assert prefetch.credentials({"KUBECONFIG": str(tmp_path / "missing")}) is None
    (tmp_path / "junk").write_text("{not yaml")
    assert prefetch.credentials({"KUBECONFIG": str(tmp_path / "junk")}) is None


def test_the_service_account_in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_bytes(CERT)
    monkeypatch.setattr(prefetch, "SERVICE_ACCOUNT", tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    found = prefetch.credentials(env)
    assert found is not None
    assert (found.server, found.authorization) == ("https://[fd00::1]:443", "Bearer sa-token")


class OneAnswer:
    """A TLS server that answers one request with `response` and records the request."""

    def __init__(self, response: bytes) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        directory = Path(tempfile.mkdtemp())
        (directory / "c").write_bytes(CERT)
        (directory / "k").write_bytes(KEY)
        context.load_cert_chain(directory / "c", directory / "k")
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.request = b""
        self._context, self._response = context, response
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with self._context.wrap_socket(conn, server_side=True) as tls:
            while b"\r\n\r\n" not in self.request:
                self.request += tls.recv(4096)
            tls.sendall(self._response)

    def credentials(self) -> prefetch.Credentials:
        context = ssl.create_default_context(cadata=CERT.decode())
        return prefetch.Credentials(f"https://localhost:{self.port}", context, "Bearer t")

    def close(self) -> None:
        self._thread.join(10)
        self.listener.close()


@pytest.fixture
def answering() -> Iterator[list[OneAnswer]]:
    servers: list[OneAnswer] = []
    yield servers
    for server in servers:
        server.close()


def pod_list(count: int) -> bytes:
    items = [{"metadata": {"name": f"p{i}", "uid": str(i)}, "spec": {}} for i in range(count)]
    header = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}}
    return orjson.dumps({**header, "items": items})


async def test_the_list_arrives_through_the_child_and_splits_into_items(
    answering: list[OneAnswer],
) -> None:
    body = pod_list(45000)  # more than two of the child's writes
    assert len(body) > 2 * prefetch.PIECE
    server = OneAnswer(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)
    answering.append(server)
    fetched = prefetch.Prefetch(server.credentials(), "/api/v1/pods").start()
    items: list[Any] = []
    metadata = await split(fetched.chunks(), items.append)
    assert metadata == {"resourceVersion": "7"}
    assert [item["metadata"]["name"] for item in items] == [f"p{i}" for i in range(45000)]
    first_line, *headers = server.request.decode().split("\r\n")
    assert first_line == "GET /api/v1/pods?limit=500&resourceVersion=0 HTTP/1.0"
    assert "Authorization: Bearer t" in headers and "Accept-Encoding: identity" in headers


async def test_a_list_already_read_gives_the_loop_a_turn_between_pieces(
    answering: list[OneAnswer],
) -> None:
    """Read from memory, pieces are there at once: without a turn of the loop between them a
    large list would be fed in one stretch while other requests' timeouts run out."""
    body = b"x" * (10 * prefetch.PIECE)  # three reads of the file, read whole
    server = OneAnswer(b"HTTP/1.0 200 OK\r\n\r\n" + body)
    answering.append(server)
    fetched = prefetch.Prefetch(server.credentials(), "/api/v1/pods").start()
    await asyncio.to_thread(fetched._reap, True)  # the child has written it all
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)
    seen: list[int] = []
    size = 0
    async for chunk in fetched.chunks():
        seen.append(turns)
        size += len(chunk)
    counter.cancel()
    assert size == len(body) and len(seen) >= 3
    assert all(later > earlier for earlier, later in itertools.pairwise(seen))


async def test_a_refusal_is_a_failure_the_informer_recovers_from(
    answering: list[OneAnswer],
) -> None:
    server = OneAnswer(b"HTTP/1.0 403 Forbidden\r\n\r\n{}")
    answering.append(server)
    fetched = prefetch.Prefetch(server.credentials(), "/api/v1/pods").start()
    with pytest.raises(prefetch.Failed, match="403 Forbidden"):
        await split(fetched.chunks(), lambda _: None)


async def test_a_server_that_cannot_be_reached_is_a_failure() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    context = ssl.create_default_context(cadata=CERT.decode())
    credentials = prefetch.Credentials(f"https://localhost:{port}", context, None)
    fetched = prefetch.Prefetch(credentials, "/api/v1/nodes").start()
    with pytest.raises(prefetch.Failed, match="status 1"):
        await split(fetched.chunks(), lambda _: None)


async def test_a_body_cut_short_does_not_split(answering: list[OneAnswer]) -> None:
    """The child sees an end of stream; the splitter refuses the last piece (ValueError): the
    informer then lists by itself, whole."""
    server = OneAnswer(b"HTTP/1.0 200 OK\r\n\r\n" + pod_list(50)[:-300])
    answering.append(server)
    fetched = prefetch.Prefetch(server.credentials(), "/api/v1/pods").start()
    with pytest.raises(ValueError):
        await split(fetched.chunks(), lambda _: None)


def test_take_matches_the_request_once_and_only_for_its_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    abandoned: list[str] = []

    class Started:
        def __init__(self, path: str) -> None:
            self.server, self.path = "https://h:1", path

        def abandon(self) -> None:
            abandoned.append(self.path)

    started: dict[str, Any] = {"/api/v1/pods": Started("/api/v1/pods")}
    started["/api/v1/nodes"] = Started("/api/v1/nodes")
    monkeypatch.setattr(prefetch, "_started", started)
    cached = dict(prefetch.FROM_CACHE)
    assert prefetch.take("https://h:1/", "/api/v1/pods", {"limit": "500"}) is None  # paged
    assert prefetch.take("https://h:1/", "/api/v1/pods", cached) is not None
    assert prefetch.take("https://h:1/", "/api/v1/pods", cached) is None  # once
    assert prefetch.take("https://other:1", "/api/v1/nodes", cached) is None
    assert abandoned == ["/api/v1/nodes"]


def test_run_asks_for_the_lists_first_and_help_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """And whatever ends the command, children still reading are stopped (not orphaned)."""
    calls: list[str] = []
    monkeypatch.setattr(prefetch, "start", lambda: calls.append("start"))
    monkeypatch.setattr(prefetch, "abandon_all", lambda: calls.append("abandon"))
    monkeypatch.setattr(cli, "run", lambda _: 0)
    assert cli.main(["run"]) == 0
    assert calls == ["start", "abandon"]
    monkeypatch.setenv("LOADWISE_PROMETHEUS_ULR", "x")  # a typo: run never starts
    assert cli.main(["run"]) == 2
    assert calls == ["start", "abandon"] * 2
    calls.clear()
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert cli.main(["crd"]) == 0
    assert "start" not in calls
