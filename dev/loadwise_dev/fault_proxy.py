"""Real network faults on loopback: a TCP proxy in front of a real server (Prometheus, the
kube-apiserver) that a test or benchmark can cut, black-hole and restore, without stopping the
server for everyone else.

Modes:
- forward: new connections are piped to the target.
- refuse (`down()`): the listening socket is closed (new connections are refused) and every open
  connection is closed; what a dead process or a firewall REJECT looks like.
- black hole (`black_hole()`): every connection stays open and new ones are accepted, but nothing
  is forwarded in either direction and what the client sends is read and dropped; what a network
  partition or a firewall DROP looks like (a stall, never a refusal or a reset). After
  `restore()` new connections are forwarded again; connections that were stalled stay stalled,
  as a TCP connection does after a real partition (its peer state is gone).

TLS passes through untouched: the client talks to the server's certificate (for 127.0.0.1).
`TcpProxy` lives in the caller's event loop; `ThreadedTcpProxy` runs one in its own thread, so
a harness busy creating thousands of objects never delays the traffic it forwards.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

from .controlplane import free_port

Mode = Literal["forward", "refuse", "black_hole"]
T = TypeVar("T")


class _Conn:
    """One client connection: its two pipes, and whether it is stalled for good."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.client_writer = writer
        self.upstream_writer: asyncio.StreamWriter | None = None
        self.stalled = False
        self.tasks: list[asyncio.Task[None]] = []

    def close(self) -> None:
        for writer in (self.client_writer, self.upstream_writer):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.port = port or free_port()
        self.mode: Mode = "refuse"
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.accepted = 0  # connections accepted in total
        self.stalled_accepted = 0  # connections accepted while black-holed
        self.dropped_bytes = 0  # bytes read from stalled connections and thrown away

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    async def up(self) -> None:
        """Forward new connections (the listening socket is opened if it is not)."""
        self.mode = "forward"
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def restore(self) -> None:
        """Back to forwarding for new connections; stalled ones stay dead."""
        await self.up()

    async def down(self) -> None:
        """Refuse new connections and cut open ones."""
        self.mode = "refuse"
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self._conns):
            self._drop(conn)
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def black_hole(self) -> None:
        """Stall every open connection and every new one: accepted, nothing forwarded."""
        self.mode = "black_hole"
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        for conn in list(self._conns):
            self._stall(conn)

    async def close(self) -> None:
        await self.down()

    # --- internals ------------------------------------------------------------------------------
    def _stall(self, conn: _Conn) -> None:
        """Nothing goes through any more. The upstream side is closed (the server sees its peer
        vanish, as after a partition it eventually does); the client side is kept open and
        drained, so the client sees neither a reset nor a closed connection: only silence."""
        if conn.stalled:
            return
        conn.stalled = True
        if conn.upstream_writer is not None:
            with contextlib.suppress(Exception):
                conn.upstream_writer.transport.abort()

    def _drop(self, conn: _Conn) -> None:
        self._conns.discard(conn)
        for task in conn.tasks:
            task.cancel()
        for writer in (conn.client_writer, conn.upstream_writer):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.transport.abort()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        self.accepted += 1
        conn = _Conn(writer)
        if self.mode == "refuse":  # closed between accept and here
            self._drop(conn)
            return
        self._conns.add(conn)
        try:
            if self.mode == "black_hole":
                self.stalled_accepted += 1
                conn.stalled = True
                await self._discard(conn, reader)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                self._drop(conn)  # the target is down: the client sees its connection closed
                return
            conn.upstream_writer = up_writer
            if conn.stalled or self.mode != "forward":
                conn.stalled = True
                up_writer.transport.abort()
                await self._discard(conn, reader)
                return
            conn.tasks = [
                asyncio.create_task(self._pipe(conn, reader, up_writer, to_client=False)),
                asyncio.create_task(self._pipe(conn, up_reader, writer, to_client=True)),
            ]
            await asyncio.gather(*conn.tasks, return_exceptions=True)
        finally:
            if not conn.stalled:
                self._drop(conn)

    async def _discard(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        """Read the client's bytes and drop them until the client gives up."""
        try:
            while data := await reader.read(65536):
                self.dropped_bytes += len(data)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._conns.discard(conn)
            conn.close()

    async def _pipe(
        self,
        conn: _Conn,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        to_client: bool,
    ) -> None:
        try:
            while data := await reader.read(65536):
                if conn.stalled:
                    if not to_client:
                        self.dropped_bytes += len(data)
                        continue  # the client's bytes: read and dropped
                    return  # the server's side was aborted
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            if not conn.stalled:
                with contextlib.suppress(Exception):
                    writer.close()
            elif not to_client:  # the client hung up on a stalled connection
                self._conns.discard(conn)
                conn.close()
            else:  # keep draining the client until it gives up, forwarding nothing
                pass


class ThreadedTcpProxy:
    """A TcpProxy on its own event loop in a daemon thread; every method is synchronous."""

    def __init__(self, target_host: str, target_port: int, port: int = 0) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="loadwise-tcp-proxy", daemon=True
        )
        self._thread.start()
        self.proxy = self._call(self._make(target_host, target_port, port))

    @staticmethod
    async def _make(host: str, port: int, listen: int) -> TcpProxy:
        return TcpProxy(host, port, listen)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def mode(self) -> Mode:
        return self.proxy.mode

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def https_url(self) -> str:
        return self.proxy.https_url

    def up(self) -> None:
        self._call(self.proxy.up())

    def restore(self) -> None:
        self._call(self.proxy.restore())

    def down(self) -> None:
        self._call(self.proxy.down())

    def black_hole(self) -> None:
        self._call(self.proxy.black_hole())

    def stats(self) -> dict[str, int]:
        async def read() -> dict[str, int]:
            p = self.proxy
            return {
                "accepted": p.accepted,
                "stalled_accepted": p.stalled_accepted,
                "open": p.open_connections,
                "dropped_bytes": p.dropped_bytes,
            }

        return self._call(read())

    def close(self) -> None:
        if not self._loop.is_running():
            return
        with contextlib.suppress(Exception):
            self._call(self.proxy.down())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
