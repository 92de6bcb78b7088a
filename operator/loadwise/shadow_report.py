"""`loadwise shadow report`: the shadow trial's report, read from a running replica's /shadow
(behind the same token check as /metrics) and printed as a table.

A shadow trial writes nothing to the cluster, so its report lives in the replica: reach it as
Prometheus reaches /metrics, e.g. `kubectl -n loadwise port-forward deploy/loadwise 10259` and
a token allowed to get /shadow (the chart's metrics-reader ClusterRole grants it).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

DEFAULT_URL = "https://127.0.0.1:10259/shadow"


async def fetch(url: str, token: str, verify: bool) -> dict[str, Any]:
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, headers=headers, ssl=context if url.startswith("https") else True) as r,
    ):
        if r.status != 200:
            raise RuntimeError(f"{url}: HTTP {r.status}: {(await r.text()).strip()[:200]}")
        body: dict[str, Any] = await r.json()
        return body


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def render(report: dict[str, Any], now: float | None = None) -> str:
    """The totals, the spread either way, then one row per pod, newest last."""
    now = time.time() if now is None else now
    pods = int(report.get("pods") or 0)
    since = report.get("since")
    minutes = max(0.0, now - float(now if since is None else since)) / 60
    lines = [
        f"shadow trial of {report.get('scheduler')} for {minutes:.0f} min: {pods} pods judged",
        f"  placed on a node hot for them: {report.get('placed_hot', 0)} by "
        f"{report.get('scheduler')}, {report.get('would_hot', 0)} by loadwise",
        f"  same node as loadwise's choice: {report.get('same', 0)}; "
        f"loadwise would not have placed: {report.get('refused', 0)}",
        f"  node CPU now: stddev {_share(report.get('cpu_stddev_now'))}, hottest "
        f"{_share(report.get('cpu_max_now'))}; had loadwise placed them (estimated): stddev "
        f"{_share(report.get('cpu_stddev_loadwise'))}, hottest "
        f"{_share(report.get('cpu_max_loadwise'))}",
    ]
    rows = report.get("rows") or []
    if rows:
        header = ("POD", "PLACED ON", "LOAD", "HOT", "LOADWISE", "LOAD", "HOT")
        table = [header] + [
            (
                r["pod"], r["placed"], _share(r["placed_load"]), "yes" if r["placed_hot"] else "",
                r["would"] or f"(none: {r['why']})", _share(r["would_load"]) if r["would"] else "",
                "yes" if r["would_hot"] else "",
            )
            for r in rows
        ]  # fmt: skip
        widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
        lines.append("")
        lines.extend(
            "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in table
        )
    return "\n".join(lines)


def main(url: str, token_file: str, verify: bool, as_json: bool) -> int:
    try:
        token = Path(token_file).read_text().strip() if token_file else ""
        report = asyncio.run(fetch(url, token, verify))
    except Exception as exc:
        print(f"loadwise shadow report: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=1) if as_json else render(report))
    return 0
