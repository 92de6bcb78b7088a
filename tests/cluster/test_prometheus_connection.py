"""A Prometheus behind TLS and basic auth, as managed and shared ones are: loadwise reaches the
real Prometheus (its web configuration doing both) with the CA, user and password files of its
settings, and says why when one is wrong."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from loadwise.usage.cache import SourceError
from loadwise.usage.prometheus import Connection, PrometheusSource
from loadwise.usage.prometheus_settings import PrometheusSettings
from loadwise_dev.controlplane import make_pki
from loadwise_dev.prometheus_server import Prometheus

pytestmark = pytest.mark.cluster

# A node-labelled answer without any scrape: the connection is what is tested here.
QUERY = 'label_replace(vector(0.25), "node", "n1", "", "")'
PASSWORD = "s3cret-but-not-really"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Path]]:
    pki = tmp_path_factory.mktemp("pki")
    make_pki(pki)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = {
        "tls_server_config": {
            "cert_file": str(pki / "apiserver.crt"),
            "key_file": str(pki / "apiserver.key"),
        },
        "basic_auth_users": {"loadwise": hashed},
    }
    prometheus = Prometheus(
        [], web_config=web, ca_file=pki / "ca.crt", auth=("loadwise", PASSWORD)
    ).start()
    try:
        yield prometheus, pki
    finally:
        prometheus.stop()


def source(prometheus: Prometheus, connection: Connection) -> PrometheusSource:
    settings = PrometheusSettings(
        url=prometheus.url,
        cpu_query=QUERY,
        memory_query=QUERY,
        ca_file=connection.ca_file,
        username=connection.username,
        password_file=connection.password_file,
    )
    return PrometheusSource(settings)


def secret(tmp_path: Path, text: str) -> str:
    path = tmp_path / "password"
    path.write_text(text + "\n")  # as a Secret mounted from `kubectl create secret` often is
    return str(path)


async def test_https_with_basic_auth_reads_the_nodes(
    secured: tuple[Prometheus, Path], tmp_path: Path
) -> None:
    prometheus, pki = secured
    assert prometheus.url.startswith("https://")
    good = Connection(str(pki / "ca.crt"), "", "loadwise", secret(tmp_path, PASSWORD))
    metrics = source(prometheus, good)
    try:
        samples = await metrics.fetch()
    finally:
        await metrics.close()
    assert set(samples) == {"n1"} and samples["n1"].cpu == pytest.approx(0.25)


async def test_a_wrong_password_or_ca_is_an_error_saying_so(
    secured: tuple[Prometheus, Path], tmp_path: Path
) -> None:
    prometheus, pki = secured
    wrong = Connection(str(pki / "ca.crt"), "", "loadwise", secret(tmp_path, "guess"))
    metrics = source(prometheus, wrong)
    try:
        with pytest.raises(SourceError, match="HTTP 401"):
            await metrics.fetch()
    finally:
        await metrics.close()
    untrusted = source(prometheus, Connection("", "", "loadwise", secret(tmp_path, PASSWORD)))
    try:
        with pytest.raises(Exception, match="certificate verify failed"):
            await untrusted.fetch()
    finally:
        await untrusted.close()
