"""Spike client: drives dra-allocator from asyncio as loadwise would, and times it.

Usage: python spike_client.py /tmp/dra-allocator [--compact]
Prints round trips of filter calls (1, 100, 1000 nodes), fleet load cost, helper RSS.
Needs orjson (falls back to json).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

try:
    import orjson

    dumps = orjson.dumps
    loads = orjson.loads
except ImportError:  # pragma: no cover
    import json

    def dumps(o):  # type: ignore[no-untyped-def]
        return json.dumps(o, separators=(",", ":")).encode()

    loads = json.loads

DRIVER = "gpu.example.com"


def node_slice(node: str) -> dict:
    devices = []
    for i in range(8):
        devices.append(
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "model": {"string": "h100" if i < 2 else "a100"},
                    "index": {"int": i},
                    "driverVersion": {"version": "550.54.15"},
                },
                "capacity": {"memory": {"value": "80Gi"}},
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus", "uid": f"uid-{node}", "resourceVersion": "1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "a100"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": 'device.driver == "gpu.example.com" && '
                    'device.attributes["gpu.example.com"].model == "a100"'
                }
            }
        ]
    },
}


def claim(name: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "a100",
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        },
    }


class Helper:
    """One long-lived helper; requests are answered in order, one line each."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 0

    @classmethod
    async def start(cls, path: str) -> Helper:
        proc = await asyncio.create_subprocess_exec(
            path,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=256 << 20,  # a 5000-node answer is several MB on one line
        )
        return cls(proc)

    async def call(self, msg: dict) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.next_id += 1
        msg["id"] = self.next_id
        self.proc.stdin.write(dumps(msg) + b"\n")
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError("helper exited")
        resp = loads(line)
        assert resp["id"] == msg["id"], resp
        return resp

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return -1

    async def stop(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()  # EOF: the helper exits by itself
        await self.proc.wait()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def lat(xs: list[float]) -> str:
    return f"p50 {pct(xs, 50) * 1000:7.2f} ms  p99 {pct(xs, 99) * 1000:7.2f} ms"


def upsert(kind: str, obj: dict) -> dict:
    return {"op": "upsert", "kind": kind, "object": obj}


async def load(h: Helper, first: int, last: int, batch: int) -> float:
    t = time.perf_counter()
    for lo in range(first, last, batch):
        changes = [
            upsert("ResourceSlice", node_slice(f"node-{i:05d}"))
            for i in range(lo, min(last, lo + batch))
        ]
        r = await h.call({"op": "apply", "changes": changes})
        assert "error" not in r, r
    return time.perf_counter() - t


async def timed(h: Helper, msg: dict, reps: int) -> tuple[list[float], float, dict]:
    """Wall time per call, Python CPU per call (what loadwise's loop pays), last answer."""
    times, cpu, r = [], time.process_time(), {}
    for _ in range(reps):
        t = time.perf_counter()
        r = await h.call(dict(msg))
        times.append(time.perf_counter() - t)
    return times, (time.process_time() - cpu) / reps, r


async def main() -> None:
    path = sys.argv[1]
    compact = "--compact" in sys.argv
    h = await Helper.start(path)
    try:
        times, _, _ = await timed(h, {"op": "ping"}, 500)
        print(f"ping round trip: {lat(times)}; idle RSS {h.rss_kb() / 1024:.1f} MiB")
        await h.call({"op": "apply", "changes": [upsert("DeviceClass", CLASS)]})
        # Fleet load: one delta per line (as watch events arrive), then batched.
        t1 = await load(h, 0, 1000, 1)
        print(f"load 1000 nodes x 8 devices, 1 delta/line: {t1 * 1000:.0f} ms")
        await h.call({"op": "reset"})
        await h.call({"op": "apply", "changes": [upsert("DeviceClass", CLASS)]})
        t2 = await load(h, 0, 1000, 500)
        print(f"load 1000 nodes x 8 devices, 500 deltas/line: {t2 * 1000:.0f} ms")
        one = {"op": "apply", "changes": [upsert("ResourceSlice", node_slice("node-00007"))]}
        times, _, _ = await timed(h, one, 200)
        print(f"one slice update (a watch event) round trip: {lat(times)}")
        st = await h.call({"op": "stats"})
        print(f"1000 nodes: RSS {h.rss_kb() / 1024:.1f} MiB, stats {st['stats']}")

        nodes = [f"node-{i:05d}" for i in range(1000)]
        c = claim("pod-0-gpu")
        for n, reps in ((1, 300), (100, 200), (1000, 40)):
            msg = {"op": "filter", "claims": [c], "nodes": nodes[:n], "compact": compact}
            times, cpu, r = await timed(h, msg, reps)
            assert len(r["nodes"]) == n and "error" not in r, r
            print(
                f"filter {n:5d} nodes: {lat(times)}  mean {statistics.mean(times) * 1000:6.2f} ms"
                f"  python CPU {cpu * 1000:5.2f} ms/call (n={reps})"
            )
        scores = {
            f"{DRIVER}/node-{i:05d}/gpu-{d}": float((i * 7 + d * 13) % 100)
            for i in range(1000)
            for d in range(8)
        }
        msg = {"op": "filter", "claims": [c], "nodes": nodes, "deviceScores": scores}
        times, cpu, _ = await timed(h, msg | {"compact": compact}, 40)
        print(f"filter  1000 nodes + 8000 scores in the request: {lat(times)}")
        msg = {"op": "rank", "claims": [c], "node": nodes[3], "deviceScores": scores, "limit": 8}
        times, _, r = await timed(h, msg, 5)
        print(f"rank one node: {lat(times)} -> {[e['devices'][0][-5:] for e in r['rank']]}")

        # Scores sent once (as after a metrics scrape), not with each pod.
        times, _, _ = await timed(h, {"op": "scores", "deviceScores": scores}, 1)
        print(f"scores op, 8000 devices: {times[0] * 1000:.2f} ms")
        # A stream of pods of one template as loadwise would send them: a new
        # claim name per pod, the last 64 reservations in flight (binding is
        # async, up to 64 in flight), each pod placed on the first node that
        # fits after the previous pod's, its full allocation fetched.
        for memo in (False, True):
            times, inflight, cpu = [], [], time.process_time()
            for k in range(200):
                t = time.perf_counter()
                r = await h.call(
                    {
                        "op": "filter",
                        "claims": [claim(f"pod-{k}-gpu")],
                        "nodes": nodes,
                        "inflight": inflight[-64:],
                        "memo": memo,
                        "compact": True,
                    }
                )
                for j in range(1000):
                    n = nodes[(k + j) % 1000]
                    if "devices" in r["nodes"][n]:
                        q = {"op": "allocation", "filterId": r["id"], "node": n}
                        full = await h.call(q)
                        inflight.append(full["nodes"][n]["allocations"][0])
                        break
                times.append(time.perf_counter() - t)
            cpu = (time.process_time() - cpu) / 200
            print(
                f"pod stream, 1000 nodes, scored, 64 in flight, memo={memo}: {lat(times)}"
                f"  python CPU {cpu * 1000:5.2f} ms/pod (n=200)"
            )
        await h.call({"op": "scores", "deviceScores": {}})

        for cmp in (False, True):
            assert h.proc.stdin and h.proc.stdout
            msg = {"id": 0, "op": "filter", "claims": [c], "nodes": nodes, "compact": cmp}
            h.proc.stdin.write(dumps(msg) + b"\n")
            line = await h.proc.stdout.readline()
            t = time.process_time()
            for _ in range(20):
                loads(line)
            dec = (time.process_time() - t) / 20 * 1000
            print(
                f"1000-node answer compact={cmp}: {len(line) / 1024:.0f} KiB, decode {dec:.2f} ms"
            )

        t3 = await load(h, 1000, 5000, 500)
        st = await h.call({"op": "stats"})
        print(f"load 4000 more nodes, batched: {t3 * 1000:.0f} ms")
        print(f"5000 nodes: RSS {h.rss_kb() / 1024:.1f} MiB, stats {st['stats']}")
        nodes5 = [f"node-{i:05d}" for i in range(5000)]
        msg = {"op": "filter", "claims": [c], "nodes": nodes5, "compact": compact}
        times, cpu, _ = await timed(h, msg, 10)
        print(f"filter  5000 nodes: {lat(times)}  python CPU {cpu * 1000:5.2f} ms/call (n=10)")
        print(f"after filters at 5000 nodes: RSS {h.rss_kb() / 1024:.1f} MiB")
    finally:
        await h.stop()
        print(f"helper pid {h.proc.pid} exited with {h.proc.returncode}")


if __name__ == "__main__":
    asyncio.run(main())
