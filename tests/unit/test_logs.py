"""`--log-format json`: one object per line with the fixed keys and the structured fields, and
the per-pod decision lines at DEBUG carrying pod, node and policy."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator

import pytest

from loadwise import logs
from loadwise.config import Config
from loadwise_dev import manifests

from ..fakes import until
from .scheduler.test_scheduler import Api, raw_pod, running, scheduler

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    return logging.getLogger("loadwise.test").makeRecord(
        "loadwise.test", logging.INFO, __file__, 1, msg, args, None, extra=extra
    )


def test_a_json_line_has_the_fixed_keys_then_the_structured_fields() -> None:
    line = logs.JsonFormatter().format(
        record("bound %s to %s", "ns/web", "n1", pod="ns/web", node="n1", policy="batch")
    )
    assert "\n" not in line
    out = json.loads(line)
    assert list(out)[:4] == ["ts", "level", "logger", "msg"]
    assert TS.fullmatch(out["ts"])
    assert out["level"] == "INFO" and out["logger"] == "loadwise.test"
    assert out["msg"] == "bound ns/web to n1"
    assert (out["pod"], out["node"], out["policy"]) == ("ns/web", "n1", "batch")


def test_fields_never_overwrite_the_fixed_keys_and_odd_values_become_text() -> None:
    out = json.loads(logs.JsonFormatter().format(record("x", level="fake", obj={1, 2})))
    assert out["level"] == "INFO" and isinstance(out["obj"], str)


def test_an_exception_is_one_field_not_extra_lines() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.getLogger("t").makeRecord(
            "t", logging.ERROR, __file__, 1, "failed", (), exc_info=sys.exc_info()
        )
    line = logs.JsonFormatter().format(rec)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exc"]


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("kopf").setLevel(logging.NOTSET)


def test_setup_json_writes_json_lines_to_stderr(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.setup("debug", "json")
    logging.getLogger("loadwise.x").debug("hello %s", "there", extra={"pod": "a/b"})
    logging.getLogger("kopf.objects").info("kopf chatter")  # kept quiet
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["msg"] for line in lines] == ["hello there"]
    assert json.loads(lines[0])["pod"] == "a/b"
    logs.setup("INFO", "text")
    logging.getLogger("loadwise.x").info("plain")
    logging.getLogger("loadwise.x").debug("hidden")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(" INFO loadwise.x: plain")


def test_a_stop_during_start_up_is_one_info_line_not_kopfs_two_warnings(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured: SIGTERM while start-up retries an unreachable API server made kopf warn
    "Activity 'build_registry.<locals>.startup' is cancelled. Will escalate." and "Startup
    activity is only partially executed due to cancellation."."""
    logs.setup("INFO", "text")
    logging.getLogger("kopf.activities.startup").warning(
        "Activity %r is cancelled. Will escalate.", "build_registry.<locals>.startup"
    )
    logging.getLogger("kopf._core.reactor.running").warning(
        "Startup activity is only partially executed due to cancellation."
    )
    logging.getLogger("kopf.activities.startup").warning("Activity 'x' failed; will retry.")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == [
        "INFO kopf.activities.startup: stopped during start-up (SIGTERM or SIGINT)",
        "WARNING kopf.activities.startup: Activity 'x' failed; will retry.",
    ]


def test_the_setting_takes_text_or_json_only() -> None:
    assert Config.from_env({}).logging.format == "text"
    assert Config.from_env({"LOADWISE_LOG_FORMAT": "json"}).logging.format == "json"
    with pytest.raises(ValueError, match="LOADWISE_LOG_FORMAT"):
        Config.from_env({"LOADWISE_LOG_FORMAT": "xml"})


async def test_decisions_are_debug_lines_with_pod_node_and_policy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="loadwise.scheduler")
    api = Api()
    sched = scheduler(api)
    sched.policies.apply("batch", {})
    sched.on_node_event("ADDED", manifests.node("n1", cpu="1"))
    async with running(sched):
        sched.on_pod_event("ADDED", raw_pod("web"))
        sched.on_pod_event("ADDED", raw_pod("huge", cpu="4"))
        await until(lambda: len(api.events("Scheduled")) == 1)
        await until(lambda: len(api.events("FailedScheduling")) == 1)
    lines = [
        json.loads(logs.JsonFormatter().format(r))
        for r in caplog.records
        if r.name.startswith("loadwise.scheduler.") and r.levelno == logging.DEBUG
    ]
    bound = next(line for line in lines if line["msg"].startswith("bound "))
    assert (bound["pod"], bound["node"], bound["policy"]) == ("default/web", "n1", "batch")
    assert "score" in bound["msg"]
    refused = next(line for line in lines if "unschedulable" in line["msg"])
    assert (refused["pod"], refused["policy"]) == ("default/huge", "batch")
    assert "Insufficient cpu" in refused["msg"]
