"""What the API server spends serving the start-up pod list, as JSON (what loadwise asks for)
and as protobuf (what kube-scheduler's client asks for): wall time to the last byte and the
kube-apiserver process's CPU time, from its watch cache (resourceVersion=0), for K bound pods.

    bench/list_cost [--pods 50000] [--nodes 5000] [--rounds 5]

Issue 13's start-up target (first bind no later than kube-scheduler's) depends on it: on two
cores, the API server's encoding shares the machine with the scheduler's own start-up."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import ssl
import statistics
import time
from urllib.parse import urlsplit

from loadwise_dev import manifests
from loadwise_dev.controlplane import ControlPlane
from loadwise_dev.kube import Kube, KubeError

ENCODINGS = ("application/json", "application/vnd.kubernetes.protobuf")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def list_once(cp: ControlPlane, accept: str) -> tuple[float, float, int]:
    """(wall s, API server CPU s, bytes) for one list, read as fast as it comes."""
    url = urlsplit(cp.server)
    assert url.hostname is not None and url.port is not None
    context = ssl.create_default_context(cafile=str(cp.ca_file))
    pid = cp.processes["kube-apiserver"].pid
    cpu, began = cpu_seconds(pid), time.perf_counter()
    with (
        socket.create_connection((url.hostname, url.port)) as raw,
        context.wrap_socket(raw, server_hostname=url.hostname) as tls,
    ):
        tls.sendall(
            (
                "GET /api/v1/pods?limit=500&resourceVersion=0 HTTP/1.0\r\n"
                f"Host: {url.netloc}\r\nAuthorization: Bearer {cp.token}\r\n"
                f"Accept: {accept}\r\nAccept-Encoding: identity\r\n\r\n"
            ).encode()
        )
        received, buffer = 0, bytearray(1 << 20)
        while count := tls.recv_into(buffer):
            received += count
    return time.perf_counter() - began, cpu_seconds(pid) - cpu, received


async def fill(cp: ControlPlane, pods: int, nodes: int) -> None:
    async with Kube(cp.server, cp.token, cp.ca_file, 128) as kube:
        while True:  # the API server makes the default namespace shortly after it is ready
            try:
                await kube.get("/api/v1/namespaces/default")
                break
            except KubeError:
                await asyncio.sleep(0.2)
        # Its service account, which the controller manager (not started: it would share the
        # cores) would make.
        sa = {"metadata": {"name": "default"}}
        with contextlib.suppress(KubeError):
            await kube.create("/api/v1/namespaces/default/serviceaccounts", sa)
        sem = asyncio.Semaphore(64)

        async def bound(i: int) -> None:
            body = manifests.pod(f"existing-{i:06d}", namespace="default", scheduler_name="none")
            body["spec"]["nodeName"] = f"node-{i % nodes:05d}"  # no Node object needed
            async with sem:
                await kube.create("/api/v1/namespaces/default/pods", body)

        await asyncio.gather(*(bound(i) for i in range(pods)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cp = ControlPlane().start(controller_manager=False)
    try:
        asyncio.run(fill(cp, args.pods, args.nodes))
        time.sleep(5)  # let the API server settle after the creates
        rows: dict[str, list[tuple[float, float, int]]] = {e: [] for e in ENCODINGS}
        for _ in range(args.rounds):  # in turn, so a drift hits both alike
            for accept in ENCODINGS:
                rows[accept].append(list_once(cp, accept))
    finally:
        cp.stop()
    print(f"{args.pods} pods, {args.rounds} rounds, medians (every round)\n")
    print("| encoding | MB | wall s | API server CPU s |")
    print("| --- | --- | --- | --- |")
    for accept, results in rows.items():
        walls = [w for w, _, _ in results]
        cpus = [c for _, c, _ in results]
        print(
            f"| {accept} | {results[0][2] / 1e6:.1f} "
            f"| {statistics.median(walls):.2f} ({', '.join(f'{w:.2f}' for w in walls)}) "
            f"| {statistics.median(cpus):.2f} ({', '.join(f'{c:.2f}' for c in cpus)}) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
