"""The operator's HTTP endpoints, served like kube-scheduler's secure port.

/metrics is served over HTTPS to callers the API server vouches for: the bearer token is checked
with a TokenReview, then a SubjectAccessReview asks whether that user may `get` the non-resource
URL /metrics (what `system:monitoring` or a metrics-reader ClusterRole grants). /healthz and
/readyz stay open, as kube-scheduler's always-allowed paths, so kubelet probes need no token.
Both answers are cached for 10 s (kube-scheduler's delegating authenticator and authorizer do the
same), so a scraper costs the API server two requests per 10 s, not two per scrape. Without a
certificate a self-signed one is made at start-up, as kube-scheduler does.

Plain, unauthenticated HTTP (every path open) exists for local development only and is off
unless a port is set for it (LOADWISE_HTTP_PORT).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import aiohttp
import orjson
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .kube.transport import Http

log = logging.getLogger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
CACHE_TTL = 10.0  # seconds, kube-scheduler's authentication and authorization cache TTLs
CACHE_SIZE = 1024  # entries; beyond it the oldest go
REVIEW_TIMEOUT = aiohttp.ClientTimeout(total=5, connect=2)  # a scrape must not wait 30 s

Check = Callable[[], tuple[bool, str]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
V = TypeVar("V")


@dataclass(frozen=True)
class User:
    """Who a TokenReview says a token belongs to; a SubjectAccessReview asks about this user."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False)


class ReviewUnavailable(Exception):
    """The API server did not answer a review (down, or the operator may not create reviews)."""


class _TtlCache(Generic[V]):
    """Answers kept for a fixed time; bounded, the oldest entries go first."""

    def __init__(self, ttl: float, size: int, clock: Callable[[], float]) -> None:
        self._ttl, self._size, self._clock = ttl, size, clock
        self._entries: dict[str, tuple[float, V]] = {}

    def get(self, key: str) -> tuple[bool, V | None]:
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self._clock():
            self._entries.pop(key, None)
            return False, None
        return True, entry[1]

    def put(self, key: str, value: V) -> None:
        self._entries.pop(key, None)
        while len(self._entries) >= self._size:
            del self._entries[next(iter(self._entries))]  # dicts keep insertion order
        self._entries[key] = (self._clock() + self._ttl, value)


class DelegatedAuth:
    """Authentication and authorization delegated to the API server (TokenReview, then
    SubjectAccessReview), with the operator's own credentials: the chart binds its
    ServiceAccount to `system:auth-delegator`, which allows creating both reviews."""

    def __init__(
        self,
        http: Http,
        ttl: float = CACHE_TTL,
        size: int = CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = http
        self._tokens: _TtlCache[User | None] = _TtlCache(ttl, size, clock)
        self._decisions: _TtlCache[tuple[bool, str]] = _TtlCache(ttl, size, clock)

    async def _review(self, path: str, spec: dict[str, Any]) -> dict[str, Any]:
        kind = path.rsplit("/", 1)[-1]
        try:
            status, body = await self._http.request(
                "POST", path, {"spec": spec}, timeout=REVIEW_TIMEOUT
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ReviewUnavailable(f"{kind}: {exc or type(exc).__name__}") from None
        if status != 201:
            hint = " (is the ServiceAccount bound to system:auth-delegator?)"
            raise ReviewUnavailable(f"{kind} answered HTTP {status}{hint if status == 403 else ''}")
        try:
            decoded = orjson.loads(body)
        except ValueError:  # an empty or cut body: the review did not answer
            decoded = None
        answer = decoded.get("status") or {} if isinstance(decoded, dict) else None
        if not isinstance(answer, dict):
            raise ReviewUnavailable(f"{kind} answered HTTP {status} without a review status")
        return answer

    async def authenticate(self, token: str) -> User | None:
        """The token's user, or None when the API server does not accept the token."""
        key = hashlib.sha256(token.encode()).hexdigest()  # no token kept in memory
        hit, user = self._tokens.get(key)
        if hit:
            return user
        status = await self._review(TOKEN_REVIEWS, {"token": token})
        user = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            user = User(
                name=str(info.get("username", "")),
                uid=str(info.get("uid", "")),
                groups=tuple(info.get("groups") or ()),
                extra=dict(info.get("extra") or {}),
            )
        self._tokens.put(key, user)
        return user

    async def authorize(self, user: User, verb: str, path: str) -> tuple[bool, str]:
        """(allowed, the API server's reason) for `verb` on the non-resource URL `path`."""
        key = orjson.dumps([user.name, user.uid, user.groups, user.extra, verb, path]).decode()
        hit, decision = self._decisions.get(key)
        if hit and decision is not None:
            return decision
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        status = await self._review(ACCESS_REVIEWS, spec)
        decision = (bool(status.get("allowed")), str(status.get("reason", "")))
        self._decisions.put(key, decision)
        return decision

    def guard(self, handler: Handler) -> Handler:
        """The handler behind a bearer token allowed to `get` the request's path: 401 without
        a valid token, 403 without the permission, 503 when the API server cannot say."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            token = token.strip()
            try:
                bearer = scheme.lower() == "bearer" and token
                user = await self.authenticate(token) if bearer else None
                if user is None:
                    return web.Response(
                        status=401,
                        text="Unauthorized: a bearer token the API server accepts is needed\n",
                        headers={"WWW-Authenticate": 'Bearer realm="loadwise"'},
                    )
                verb = "get" if request.method in ("GET", "HEAD") else request.method.lower()
                allowed, reason = await self.authorize(user, verb, request.path)
            except ReviewUnavailable as exc:
                log.warning("cannot check a request to %s: %s", request.path, exc)
                return web.Response(status=503, text=f"cannot check the request: {exc}\n")
            if not allowed:
                why = f": {reason}" if reason else ""
                denied = f'user "{user.name}" cannot {verb} path "{request.path}"{why}'
                return web.Response(status=403, text=f"Forbidden: {denied}\n")
            return await handler(request)

        return guarded


def self_signed_certificate(hosts: list[str]) -> tuple[bytes, bytes]:
    """(certificate, key) in PEM: an ECDSA P-256 server certificate valid one year, naming
    each host (DNS name or IP address), like kube-scheduler's when it is given none."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"loadwise@{int(now.timestamp())}")])
    alt_names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))  # clock skew
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def server_tls(cert_file: str = "", key_file: str = "") -> ssl.SSLContext:
    """TLS 1.2+ with the given certificate and key files, or a self-signed pair made now. The
    generated key touches the disk only for the moment `load_cert_chain` reads it, in a private
    temporary directory (the chart mounts an emptyDir on /tmp: the root filesystem is
    read-only)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
        return context
    hosts = ["localhost", socket.gethostname(), "127.0.0.1", "::1"]
    cert_pem, key_pem = self_signed_certificate(hosts)
    with tempfile.TemporaryDirectory(prefix="loadwise-tls-") as directory:
        cert_path, key_path = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert_path.write_bytes(cert_pem)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key_pem)
        context.load_cert_chain(cert_path, key_path)
    log.info("serving HTTPS with a self-signed certificate for %s", ", ".join(hosts))
    return context


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _probe(check: Check) -> Handler:
    async def handle(_: web.Request) -> web.Response:
        ok, why = check()
        return web.Response(status=200 if ok else 503, text=why + "\n")

    return handle


async def serve(
    host: str,
    port: int,
    health: Check,
    readiness: Check,
    *,
    auth: DelegatedAuth | None = None,
    tls: ssl.SSLContext | None = None,
    shadow: Callable[[], dict[str, Any]] | None = None,
) -> web.AppRunner:
    """/metrics (behind `auth` when given); /healthz fails when a part that should run has died
    or stalled (a restart helps); /readyz is true for the leader and for a synced standby. Both
    probes say why and are always open. /shadow: the shadow trial's report as JSON, behind
    `auth` as /metrics (given `shadow`). The port is bound before this returns, so a port
    already taken fails start-up."""
    app = web.Application()
    app.router.add_get("/metrics", auth.guard(_metrics) if auth is not None else _metrics)
    if shadow is not None:

        async def _shadow(_: web.Request) -> web.Response:
            return web.json_response(shadow())

        app.router.add_get("/shadow", auth.guard(_shadow) if auth is not None else _shadow)
    app.router.add_get("/healthz", _probe(health))
    app.router.add_get("/readyz", _probe(readiness))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=tls).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
