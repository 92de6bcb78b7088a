"""The real Transport against a raw local HTTP server that cuts a success's body short: the
Binding landed, so the status must stand (it used to raise, and the bind counted as failed:
the reservation was released while the pod sat on the node). And against one that holds
streams open: they do not take the requests' pool."""

from __future__ import annotations

import asyncio
import contextlib

from kubernetes_asyncio import client

from loadwise.kube.transport import Transport
from loadwise.scheduler.binding.binder import Binder, BindResult

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


async def test_open_streams_do_not_take_the_requests_pool() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"GET /watch"):  # a watch: headers, then nothing for a long time
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(30)
        else:
            writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    config = client.Configuration(host=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    http = Transport(client.ApiClient(config), pool_size=1)
    try:
        async with contextlib.AsyncExitStack() as watches:
            for _ in range(3):
                await watches.enter_async_context(http.stream("/watch", {}, 30.0))
            status = await asyncio.wait_for(http.request("POST", "/bind", {}), 2.0)
            assert status == (201, b"{}")
    finally:
        await http.close()
        await http.api.close()
        server.close()
