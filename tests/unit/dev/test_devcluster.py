"""`loadwise-dev up|down` without a cluster: `down` kills what the supervisor's process group
still holds (processes started before their PIDs were recorded), and a second `up` while one
holds the lock is one line. The whole cluster runs in tests/cluster/test_devcluster.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from loadwise_dev import devcluster
from loadwise_dev.devcluster import STATE_VARIABLE, alive, down, start_time


def wait_gone(pid: int, started: str | None, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid, started)


def test_down_kills_the_supervisors_unrecorded_children(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir()
    # A supervisor killed right after starting a child it had no time to record.
    supervisor = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $! >child.pid; wait"],
        cwd=directory,
        start_new_session=True,
        env=dict(os.environ, **{STATE_VARIABLE: str(directory)}),
    )
    pid_file = directory / "child.pid"
    deadline = time.monotonic() + 5
    while not (pid_file.exists() and pid_file.read_text().endswith("\n")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pid_file.read_text())
    child_started = start_time(child)
    (directory / "supervisor.pid").write_text(f"{supervisor.pid} {start_time(supervisor.pid)}")
    try:
        supervisor.kill()
        supervisor.wait()
        assert alive(child, child_started)  # orphaned, in the supervisor's group
        assert down(directory) == 0
        assert wait_gone(child, child_started)
        assert not directory.exists()
    finally:
        if alive(child, child_started):
            os.kill(child, signal.SIGKILL)


def test_a_group_without_this_clusters_marker_is_not_killed(tmp_path: Path) -> None:
    """A group ID reused by someone else's processes is left alone."""
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert devcluster.kill_group(other.pid, tmp_path / "state") is False
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_second_up_while_one_holds_the_lock_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_supervisor(*_: Any, **__: Any) -> Any:
        raise AssertionError("a second supervisor was started")

    monkeypatch.setattr(devcluster.subprocess, "Popen", no_supervisor)
    directory = tmp_path / "state"
    held = devcluster._lock(directory)
    assert held is not None
    try:
        assert devcluster.up(directory, detach=True) == 1
    finally:
        held.close()
    out = capsys.readouterr().out
    assert out.startswith("another `loadwise-dev up` is starting or running a dev cluster")
    assert len(out.strip().splitlines()) == 1
    assert not directory.exists()
