"""The HTTPS endpoint over the FakeTransport's API server: who gets /metrics (a TokenReview, then
a SubjectAccessReview for `get` on /metrics), what is cached and for how long, the probes open
to all, the self-signed certificate (a client that trusts it verifies the host), the settings."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest

from loadwise import cli, shadow_report
from loadwise import observability as obs
from loadwise import preflight as access
from loadwise import secure_serving as serving
from loadwise.config import Config
from loadwise_dev.controlplane import free_port

from ..fakes import FakeTransport, Reply

USERS = {"good": "prometheus", "nosy": "someone"}  # token -> user; prometheus may read


def api(method: str, path: str, body: Mapping[str, Any] | None, _: Any) -> Reply:
    assert method == "POST" and body is not None
    spec = body["spec"]
    if path == serving.TOKEN_REVIEWS:
        user = USERS.get(spec["token"])
        if user is None:
            return 201, {"status": {"authenticated": False, "error": "invalid bearer token"}}
        return 201, {
            "status": {
                "authenticated": True,
                "user": {"username": user, "uid": f"uid-{user}", "groups": ["g1"]},
            }
        }
    assert path == serving.ACCESS_REVIEWS
    allowed = spec["user"] == "prometheus" and spec["nonResourceAttributes"] == {
        "path": "/metrics",
        "verb": "get",
    }
    return 201, {"status": {"allowed": allowed, "reason": "" if allowed else "no RBAC rule"}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def server(
    fake: FakeTransport, clock: Clock | None = None, healthy: bool = True
) -> AsyncIterator[str]:
    port = free_port()
    auth = serving.DelegatedAuth(fake, clock=clock or Clock())
    runner = await serving.serve(
        "127.0.0.1",
        port,
        lambda: (healthy, "ok" if healthy else "watch of /api/v1/pods silent for 200s"),
        lambda: (True, "leader me"),
        auth=auth,
        tls=serving.server_tls(),
    )
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def get(url: str, token: str | None = None) -> tuple[int, str, Mapping[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=False) as response,
    ):
        return response.status, await response.text(), response.headers


async def test_metrics_need_a_token_the_api_server_accepts_with_get_on_metrics() -> None:
    fake = FakeTransport(handler=api)
    async with server(fake) as base:
        status, text, headers = await get(f"{base}/metrics")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert not fake.calls  # no token, nothing to ask
        assert (await get(f"{base}/metrics", "forged"))[0] == 401
        status, text, _ = await get(f"{base}/metrics", "nosy")
        assert status == 403
        assert 'user "someone" cannot get path "/metrics": no RBAC rule' in text
        status, text, _ = await get(f"{base}/metrics", "good")
        assert status == 200
        assert obs.LEADER._name in text  # the registry's metrics, as Prometheus reads them
    reviews = fake.requests("POST", serving.ACCESS_REVIEWS)
    (review,) = [c for c in reviews if c.body and c.body["spec"]["user"] == "prometheus"]
    assert review.body == {
        "spec": {
            "user": "prometheus",
            "uid": "uid-prometheus",
            "groups": ["g1"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        }
    }


async def test_the_probes_are_open_and_say_why() -> None:
    fake = FakeTransport(handler=api)
    async with server(fake, healthy=False) as base:
        status, text, _ = await get(f"{base}/readyz")
        assert (status, text) == (200, "leader me\n")
        status, text, _ = await get(f"{base}/healthz")
        assert (status, text) == (503, "watch of /api/v1/pods silent for 200s\n")
    assert not fake.calls


async def test_answers_are_cached_ten_seconds() -> None:
    fake = FakeTransport(handler=api)
    clock = Clock()
    async with server(fake, clock) as base:
        for _ in range(3):
            assert (await get(f"{base}/metrics", "good"))[0] == 200
            assert (await get(f"{base}/metrics", "nosy"))[0] == 403
            assert (await get(f"{base}/metrics", "forged"))[0] == 401
        assert len(fake.requests("POST", serving.TOKEN_REVIEWS)) == 3  # one per token
        assert len(fake.requests("POST", serving.ACCESS_REVIEWS)) == 2  # one per user
        clock.now = serving.CACHE_TTL + 0.1
        assert (await get(f"{base}/metrics", "good"))[0] == 200
        assert len(fake.requests("POST", serving.TOKEN_REVIEWS)) == 4
        assert len(fake.requests("POST", serving.ACCESS_REVIEWS)) == 3


async def test_a_review_the_api_server_refuses_or_misses_is_503_and_not_cached() -> None:
    answers: list[Reply | BaseException] = [
        (403, {"kind": "Status", "reason": "Forbidden"}),
        aiohttp.ClientConnectionError("refused"),
    ]

    def flaky(method: str, path: str, body: Mapping[str, Any] | None, params: Any) -> Reply:
        if answers:
            answer = answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        return api(method, path, body, params)

    fake = FakeTransport(handler=flaky)
    async with server(fake) as base:
        status, text, _ = await get(f"{base}/metrics", "good")
        assert status == 503 and "system:auth-delegator" in text
        status, text, _ = await get(f"{base}/metrics", "good")
        assert status == 503 and "refused" in text
        assert (await get(f"{base}/metrics", "good"))[0] == 200


@pytest.mark.parametrize("body", [b"", b"<html>502</html>", b"[]", b'{"status": "yes"}'])
async def test_a_review_answered_without_a_json_status_is_503(body: bytes) -> None:
    """A proxy's empty or HTML answer with a 2xx code: 503 like any review that did not
    answer, not an unhandled exception (a 500 with a traceback in the log)."""
    fake = FakeTransport(handler=lambda *_: (201, body))
    async with server(fake) as base:
        status, text, _ = await get(f"{base}/metrics", "good")
        assert status == 503
        assert (
            text
            == "cannot check the request: tokenreviews answered HTTP 201 without a review status\n"
        )


async def test_the_self_signed_certificate_names_localhost(tmp_path: Path) -> None:
    cert, key = serving.self_signed_certificate(["localhost", "127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    port = free_port()
    runner = await serving.serve(
        "127.0.0.1",
        port,
        lambda: (True, "ok"),
        lambda: (True, "ok"),
        auth=serving.DelegatedAuth(FakeTransport(handler=api)),
        tls=serving.server_tls(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")),
    )
    try:
        trusting = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
        async with aiohttp.ClientSession() as session:
            for host in ("localhost", "127.0.0.1"):
                async with session.get(f"https://{host}:{port}/healthz", ssl=trusting) as r:
                    assert r.status == 200
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with session.get(f"https://127.0.0.1:{port}/healthz", ssl=True):
                    pass  # not trusted by the system's CAs
    finally:
        await runner.cleanup()


def test_settings() -> None:
    config = Config()
    assert (config.serving.secure_port, config.serving.http_port) == (
        10259,
        0,
    )  # HTTPS only, by default
    with pytest.raises(ValueError, match="go together"):
        Config.from_env({"LOADWISE_TLS_CERT_FILE": "/tls.crt"})
    with pytest.raises(ValueError, match="must differ"):
        Config.from_env({"LOADWISE_HTTP_PORT": "10259"})


def test_unusable_certificate_files_stop_run_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before kopf starts: in Runtime.start the same error was retried every 5 s for
    ever. Nothing else runs (no preflight, no kopf)."""

    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("must not be reached")

    monkeypatch.setattr(access, "preflight", never)
    monkeypatch.setattr(kopf, "operator", never)
    cert, key = serving.self_signed_certificate(["localhost"])
    _, other_key = serving.self_signed_certificate(["localhost"])
    files = {"cert": cert, "key": key, "other": other_key, "junk": b"not PEM"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    for cert_file, key_file, why in (
        ("junk", "key", "SSLError"),
        ("cert", "junk", "SSLError"),
        ("cert", "other", "KEY_VALUES_MISMATCH"),
        ("missing", "key", "FileNotFoundError"),
    ):
        config = Config.of(
            tls_cert_file=str(tmp_path / cert_file), tls_private_key_file=str(tmp_path / key_file)
        )
        assert cli.run(config) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert err.startswith(
            f"loadwise: cannot serve HTTPS with {tmp_path / cert_file} and {tmp_path / key_file}: "
        )
        assert why in err


async def test_the_shadow_report_is_behind_the_same_check_and_the_cli_reads_it(
    tmp_path: Path,
) -> None:
    """/shadow: a token allowed to get /shadow reads the trial's report; `loadwise shadow
    report` prints it (its totals, then a row per pod)."""

    def allows_shadow(method: str, path: str, body: Any, params: Any) -> Reply:
        if path == serving.ACCESS_REVIEWS:
            allowed = body["spec"]["nonResourceAttributes"]["path"] == "/shadow"
            return 201, {"status": {"allowed": allowed, "reason": "" if allowed else "no"}}
        return api(method, path, body, params)

    report = {
        "scheduler": "default-scheduler", "since": 0.0, "pods": 2, "placed_hot": 1,
        "would_hot": 0, "same": 1, "refused": 0, "cpu_stddev_now": 0.2,
        "cpu_stddev_loadwise": 0.1, "cpu_max_now": 0.97, "cpu_max_loadwise": 0.8,
        "rows": [{"pod": "ns/a", "placed": "hot-1", "placed_load": 0.97, "placed_hot": True,
                  "would": "cool-2", "would_load": 0.4, "would_hot": False, "why": ""}],
    }  # fmt: skip
    port = free_port()
    auth = serving.DelegatedAuth(FakeTransport(handler=allows_shadow), clock=Clock())
    runner = await serving.serve(
        "127.0.0.1", port, lambda: (True, "ok"), lambda: (True, "shadow"),
        auth=auth, tls=serving.server_tls(), shadow=lambda: report,
    )  # fmt: skip
    try:
        url = f"https://127.0.0.1:{port}/shadow"
        assert (await get(url))[0] == 401
        assert (await get(f"https://127.0.0.1:{port}/metrics", "good"))[0] == 403
        fetched = await shadow_report.fetch(url, "good", verify=False)
        assert fetched == report
        text = shadow_report.render(fetched, now=600.0)
        assert text.splitlines()[:2] == [
            "shadow trial of default-scheduler for 10 min: 2 pods judged",
            "  placed on a node hot for them: 1 by default-scheduler, 0 by loadwise",
        ]
        assert "stddev 20%, hottest 97%; had loadwise placed them (estimated): stddev 10%" in text
        assert text.splitlines()[-1].split() == ["ns/a", "hot-1", "97%", "yes", "cool-2", "40%"]
    finally:
        await runner.cleanup()
