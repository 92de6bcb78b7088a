"""The start-up lists of pods and nodes, asked for before anything heavy is imported.

`loadwise run` spends about 0.7 s importing kopf, kubernetes-asyncio's generated client (kopf
imports all of it), aiohttp and pydantic before it can send a request, and with 50,000 pods the
API server then needs about a second to stream the 80 MB pod list. Asked for first thing, by a
forked child, the lists stream in while the imports run; the informers read them from memory.

Only plain credentials are used here: the pod's service account, or one kubeconfig whose current
context names an https server with a bearer token or a client certificate. Anything else (exec
plugins, auth providers, proxies, several kubeconfig files) is left to the informers' own lists,
and so is a prefetch for another server or identity than the client configuration's
(`Transport.get_list` checks both). The request is the informer's own first list
(`FROM_CACHE`), sent as HTTP/1.0 so that the body arrives unchunked and the child only copies
bytes. Whatever goes wrong with a prefetch (refused, cut short, never taken), the informer lists
by itself as it would have: a prefetch can cost a start-up nothing but the memory of a list read
twice.

Standard library only (and PyYAML for a kubeconfig): importing this must cost nothing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import signal
import socket
import ssl
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

log = logging.getLogger(__name__)

# The informers' first list: from the API server's watch cache, as client-go's reflector.
FROM_CACHE: Mapping[str, str] = {"limit": "500", "resourceVersion": "0"}
LISTS = ("/api/v1/pods", "/api/v1/nodes")  # the two that grow with the cluster
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CONNECT_TIMEOUT, READ_TIMEOUT = 5.0, 30.0
PIECE = 1 << 20  # bytes written to the file at a time
POLL = 0.005  # seconds between looks at a file that has not grown


class Failed(Exception):
    """A prefetched list that cannot be used: the informer lists by itself."""


@dataclass(frozen=True)
class Credentials:
    server: str  # https://host:port, as the client configuration names it
    context: ssl.SSLContext
    authorization: str | None  # the Authorization header, if a bearer token


def credentials(environ: Mapping[str, str] = os.environ) -> Credentials | None:
    """The plain credentials `components.api_client` will use, or None where they are not plain."""
    try:
        if environ.get("KUBERNETES_SERVICE_HOST"):
            return _service_account(environ)
        paths = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        if len(paths) > 1:
            return None
        return _kubeconfig(Path(paths[0]) if paths else Path.home() / ".kube" / "config")
    except Exception as exc:  # anything odd: the client's own loader will say what
        log.debug("no start-up prefetch: %s", exc)
        return None


def _service_account(environ: Mapping[str, str]) -> Credentials:
    host, port = environ["KUBERNETES_SERVICE_HOST"], environ["KUBERNETES_SERVICE_PORT"]
    server = f"https://[{host}]:{port}" if ":" in host or "%" in host else f"https://{host}:{port}"
    token = (SERVICE_ACCOUNT / "token").read_text().strip()
    context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    return Credentials(server, context, f"Bearer {token}")


def _kubeconfig(path: Path) -> Credentials | None:
    import yaml  # only when there is a kubeconfig

    document = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    context = _named(document, "contexts", document.get("current-context"))
    cluster = _named(document, "clusters", context.get("cluster"))
    user = _named(document, "users", context.get("user"))
    if set(cluster) - {"server", "certificate-authority", "certificate-authority-data"}:
        return None  # proxies, TLS server names, skipped verification...
    if set(user) - {
        "token",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
    }:
        return None  # exec plugins, auth providers, token files, passwords...
    server = str(cluster.get("server", "")).rstrip("/")
    if not server.startswith("https://"):
        return None
    tls = ssl.create_default_context(
        cafile=_relative(path, cluster.get("certificate-authority")),
        cadata=_decoded(cluster.get("certificate-authority-data")),
    )
    cert = _material(path, user, "client-certificate")
    key = _material(path, user, "client-key")
    if cert is not None:
        with _files(cert, key) as (cert_file, key_file):
            tls.load_cert_chain(cert_file, key_file)
    token = user.get("token")
    return Credentials(server, tls, f"Bearer {token}" if token else None)


def _named(document: Mapping[str, Any], section: str, name: object) -> Mapping[str, Any]:
    for entry in document.get(section) or ():
        if entry.get("name") == name:
            found = entry.get(section[:-1])  # clusters -> cluster
            if isinstance(found, dict):
                return found
    raise ValueError(f"no {section[:-1]} named {name!r}")


def _relative(config: Path, file: object) -> str | None:
    return None if not file else str(config.parent / str(file))  # absolute paths stay so


def _decoded(data: object) -> str | None:
    return None if not data else base64.b64decode(str(data)).decode()


def _material(config: Path, user: Mapping[str, Any], field: str) -> str | bytes | None:
    """A file's path, or the decoded `-data` field's PEM."""
    if user.get(f"{field}-data"):
        return base64.b64decode(str(user[f"{field}-data"]))
    return _relative(config, user.get(field))


@contextlib.contextmanager
def _files(*materials: str | bytes | None) -> Any:
    """Paths for `load_cert_chain`: inline PEM is written to a private file, removed after."""
    with tempfile.TemporaryDirectory(prefix="loadwise-prefetch-") as directory:
        paths: list[str | None] = []
        for i, material in enumerate(materials):
            if isinstance(material, bytes):
                file = Path(directory) / str(i)
                file.write_bytes(material)
                material = str(file)
            paths.append(material)
        yield paths


class Prefetch:
    """One list, read by a forked child into an anonymous file as it arrives.

    A child process, not a thread: TLS hands over a few kilobytes per read, and a thread
    needs the GIL back after each one, which the importing main thread holds for up to the
    5 ms switch interval at a time. Measured here, a reader thread made the imports slower
    (1.7-2.1 s instead of 1.0) and still had not read the list when they were done."""

    def __init__(self, credentials: Credentials, path: str) -> None:
        self.server = credentials.server
        self.authorization = credentials.authorization
        self.path = path
        self._credentials = credentials
        self._fd = _anonymous_file(path)
        self._pid: int | None = None
        self._status: int | None = None  # the child's exit status, once reaped

    def start(self) -> Prefetch:
        pid = os.fork()
        if pid == 0:  # the child: fetch, then leave without running any of the parent's exits
            code = 1
            try:
                self._fetch()
                code = 0
            finally:
                os._exit(code)
        self._pid = pid
        return self

    def abandon(self) -> None:
        """Stop the child if it still reads; what was read is dropped."""
        if self._pid is not None and self._status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            self._reap(block=True)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _reap(self, block: bool) -> bool:
        """Whether the child has ended (then its status is kept)."""
        if self._status is None and self._pid is not None:
            try:
                pid, status = os.waitpid(self._pid, 0 if block else os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: its outcome is unknown
                self._status = -1
                return True
            if pid:
                self._status = os.waitstatus_to_exitcode(status)
        return self._status is not None

    def _request(self, host: str) -> bytes:
        lines = [
            f"GET {self.path}?{urlencode(dict(FROM_CACHE))} HTTP/1.0",
            f"Host: {host}",
            "Accept: application/json",
            "Accept-Encoding: identity",
            "User-Agent: loadwise (start-up prefetch)",
        ]
        if self.authorization:
            lines.append(f"Authorization: {self.authorization}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def _fetch(self) -> None:
        """The whole response, headers and body, appended to the file as it arrives."""
        url = urlsplit(self.server)
        assert url.hostname is not None and url.port is not None
        with (
            socket.create_connection((url.hostname, url.port), timeout=CONNECT_TIMEOUT) as raw,
            self._credentials.context.wrap_socket(raw, server_hostname=url.hostname) as tls,
        ):
            tls.settimeout(READ_TIMEOUT)
            tls.sendall(self._request(url.netloc))
            buffer = bytearray(PIECE)
            view = memoryview(buffer)
            filled = 0
            while count := tls.recv_into(view[filled:]):
                filled += count
                if PIECE - filled < PIECE // 16:
                    _write_all(self._fd, view[:filled])
                    filled = 0
            _write_all(self._fd, view[:filled])

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as the child writes it; Failed if the request failed, whenever it did."""
        try:
            async for chunk in self._body():
                yield chunk
        finally:
            self.abandon()

    async def _body(self) -> AsyncIterator[bytes]:
        offset = 0
        head: bytes | None = None
        pending = b""
        while True:
            data = os.pread(self._fd, 4 * PIECE, offset)
            if not data:
                if not self._reap(block=False):
                    await asyncio.sleep(POLL)
                    continue
                if os.pread(self._fd, 1, offset):
                    continue  # written before it ended: read it first
                if self._status != 0:
                    raise Failed(f"the prefetch ended with status {self._status}")
                if head is None:
                    raise Failed("the connection closed before the response's headers")
                return
            offset += len(data)
            if head is not None:
                yield data
                # Give the loop a turn between pieces: read from memory, a 150,000-pod list
                # would otherwise be fed in one stretch of seconds, and the other start-up
                # requests' connections time out meanwhile (15,000 nodes: the namespaces
                # list's 5 s connect, in 3 of 6 start-ups).
                await asyncio.sleep(0)
                continue
            pending += data
            end = pending.find(b"\r\n\r\n")
            if end < 0:
                continue
            head, body = pending[:end], pending[end + 4 :]
            status_line = head.split(b"\r\n", 1)[0]
            status = status_line.split(b" ", 2)
            if len(status) < 2 or status[1] != b"200":
                raise Failed(f"the API server answered {status_line.decode(errors='replace')}")
            if body:
                yield body
                await asyncio.sleep(0)  # as above


def _anonymous_file(name: str) -> int:
    """A file in memory that nobody else can open (memfd), else an unlinked temporary file."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create(f"loadwise-prefetch{name.replace('/', '-')}")
    fd, path = tempfile.mkstemp(prefix="loadwise-prefetch-")
    os.unlink(path)
    return fd


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]


_started: dict[str, Prefetch] = {}  # by path; used from the main thread only


def start(environ: Mapping[str, str] = os.environ) -> None:
    """Start every start-up list, if the credentials are plain. Forks: call it before any
    thread is started (a child of a threaded process may inherit a lock held forever)."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return
    found = credentials(environ)
    if found is None:
        return
    for path in LISTS:
        if path not in _started:
            _started[path] = Prefetch(found, path).start()


def take(server: str, path: str, params: Mapping[str, str]) -> Prefetch | None:
    """The prefetched list for this request, once; None if there is none to use."""
    if dict(params) != dict(FROM_CACHE):
        return None
    prefetch = _started.pop(path, None)
    if prefetch is not None and prefetch.server != server.rstrip("/"):
        log.debug("prefetched list of %s not used: it went to %s", path, prefetch.server)
        prefetch.abandon()
        return None
    return prefetch


def abandon_all() -> None:
    """Drop every prefetch not taken (start-up is over, or `run` ends before it: nothing will
    read them); their children are stopped and reaped."""
    left = list(_started.values())
    _started.clear()
    for prefetch in left:
        prefetch.abandon()
