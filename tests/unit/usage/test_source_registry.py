"""A metrics source added as docs/architecture.md says ("Adding a metrics source"): its module
and one line in usage/sources.py, on a copy of the package, work end to end with nothing else
changed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "architecture.md"

# Run in a child process against the copy (this process has the real package imported).
CHECK = r"""
import asyncio, json, random, sys
from loadwise.cli import add_setting_flags
from loadwise.components import new_scheduler
from loadwise.config import Config
from loadwise.explain import settings_line
from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, schedule_one
from loadwise.policies.crd_schema import build_crd as crd
from loadwise.preflight import needed
from loadwise.reporting.policy_status import metrics_report
from loadwise.settings_help import settings
from loadwise.usage.sources import NAMES
from loadwise_dev import manifests
from tests.fakes import FakeTransport
from tests.helpers import pod_info, state_with

config = Config.from_env()  # LOADWISE_METRICS_SOURCES=file, LOADWISE_FILE_PATH=...
assert NAMES == ("prometheus", "metrics-server", "file"), NAMES
assert config.metrics.enabled == ("file",)
assert "LOADWISE_FILE_PATH" in {s.variable for s in settings()}
assert needed(config) == needed(Config.of(metrics_sources=()))  # it asks for no permission
schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
source_enum = schema["properties"]["spec"]["properties"]["metrics"]["properties"]["source"]
assert "file" in source_enum["enum"], source_enum

scheduler = new_scheduler(config, FakeTransport(), dry_run=True)
cache = scheduler.usage.caches["file"]
asyncio.run(cache.refresh())
assert cache.last_error is None, cache.last_error
gpu = {"name": "gpu", "weight": 1, "hotThreshold": 80}
policy = scheduler.policies.apply("by-file", {"metrics": {"source": "file"}, "dimensions": [gpu]})
state = state_with(manifests.node("busy"), manifests.node("calm"))
now = cache.samples["calm"].timestamp
decisions = {
    seed: schedule_one(pod_info(), state, scheduler.usage.basis(policy, now, random.Random(seed)))
    for seed in range(10)
}
assert all(isinstance(d, Decision) and d.node == "calm" for d in decisions.values()), decisions
report = metrics_report(policy, cache, ["busy", "calm"], now)
assert report.available and report.fresh_nodes == 2, report
disk = {"metrics": {"source": "file"}, "dimensions": [{"name": "disk"}]}
report = metrics_report(scheduler.policies.apply("disk", disk), cache, ["busy", "calm"], now)
assert "disk not declared by the operator's file source (it declares gpu;" in report.message
assert "metrics sources file" in settings_line(config)
print("ok")
"""


def _blocks() -> tuple[str, list[str]]:
    """The module and the registry lines, as the docs show them."""
    text = DOCS.read_text()
    section = text[text.index("### Adding a metrics source") :]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    module = next(b for b in blocks if b.startswith("# operator/loadwise/usage/file_source.py"))
    registry = next(b for b in blocks if b.startswith("# operator/loadwise/usage/sources.py"))
    return module, registry.splitlines()[1:]


def test_a_source_added_as_the_docs_say_works_end_to_end(tmp_path: Path) -> None:
    module, (import_line, field_line) = _blocks()
    package = tmp_path / "loadwise"
    shutil.copytree(
        ROOT / "operator" / "loadwise", package, ignore=shutil.ignore_patterns("__pycache__")
    )
    (package / "usage" / "file_source.py").write_text(module)
    sources = package / "usage" / "sources.py"
    text = sources.read_text()
    anchor = "from .prometheus_settings import PrometheusSettings\n"
    text = text.replace(anchor, anchor + import_line + "\n")
    last = (
        "    metrics_server: MetricsServerSettings = Field(default_factory=MetricsServerSettings)\n"
    )
    assert last in text
    sources.write_text(text.replace(last, last + field_line + "\n"))
    figures = {
        "busy": {"cpu": 0.2, "memory": 0.2, "gpu": 0.95},  # hot on its GPU alone
        "calm": {"cpu": 0.3, "memory": 0.3, "gpu": 0.1},
    }
    (tmp_path / "nodes.json").write_text(json.dumps(figures))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LOADWISE_") or k == "LOADWISE_CACHE"
    }
    env |= {
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "dev"), str(ROOT)]),
        "LOADWISE_METRICS_SOURCES": "file",
        "LOADWISE_FILE_PATH": str(tmp_path / "nodes.json"),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
