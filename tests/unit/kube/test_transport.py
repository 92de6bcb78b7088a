"""The real Transport against a raw local HTTP server that cuts a success's body short: the
Binding landed, so the status must stand (it used to raise, and the bind counted as failed:
the reservation was released while the pod sat on the node)."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client

from loadwise.kube.transport import Transport
from loadwise.scheduler.binder import Binder, BindResult

from ...helpers import pod_info


async def cut_short(status: str) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f'HTTP/1.1 {status}\r\nContent-Length: 100\r\n\r\n{{"kind"'.encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def transport(port: int) -> Transport:
    config = client.Configuration(host=f"http://127.0.0.1:{port}")
    return Transport(client.ApiClient(config))


async def test_a_success_whose_body_is_cut_short_keeps_its_status_and_the_bind_counts() -> None:
    server, port = await cut_short("201 Created")
    http = await transport(port)
    try:
        assert await http.request("POST", "/x", {}) == (201, b"")
        result = await Binder(http, "loadwise-scheduler").bind(pod_info("p"), "n1")
        assert result is BindResult.BOUND
    finally:
        await http.close()
        await http.api.close()
        server.close()


async def test_a_failure_whose_body_is_cut_short_still_raises() -> None:
    server, port = await cut_short("500 Internal Server Error")
    http = await transport(port)
    try:
        result = await Binder(http, "loadwise-scheduler").bind(pod_info("p"), "n1")
        assert result is BindResult.ERROR
    finally:
        await http.close()
        await http.api.close()
        server.close()
