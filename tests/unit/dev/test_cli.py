"""`loadwise-dev`, the harness's own command (the product's `loadwise` has no demo or dev
cluster): its entry point, its subcommands, and what they do without a cluster."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from loadwise_dev import cli, demo
from loadwise_dev.devcluster import STATE_VARIABLE

ROOT = Path(__file__).resolve().parents[3]


def test_the_harness_package_declares_the_command() -> None:
    project = tomllib.loads((ROOT / "dev" / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["loadwise-dev"] == "loadwise_dev.cli:main"
    product = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(product["project"]["scripts"]) == {"loadwise"}


def test_help_names_the_demo_and_the_dev_cluster_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: loadwise-dev ") and "{demo,up,down,status,load}" in out
    # `python -m loadwise_dev` is the same command.
    module = subprocess.run(
        [sys.executable, "-m", "loadwise_dev", "--help"], capture_output=True, text=True
    )
    assert module.returncode == 0 and "{demo,up,down,status,load}" in module.stdout


def test_demo_runs_the_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[bool] = []
    monkeypatch.setattr(demo, "main", lambda keep=False: kept.append(keep) or 0)
    assert cli.main(["demo", "--keep"]) == 0
    assert cli.main(["demo"]) == 0
    assert kept == [True, False]


def test_without_a_cluster_status_and_load_say_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(STATE_VARIABLE, str(tmp_path / "state"))
    assert cli.main(["status"]) == 1
    assert cli.main(["load", "node-1", "50"]) == 1
    said = f"no dev cluster running ({tmp_path / 'state'}); start one with `loadwise-dev up`"
    assert capsys.readouterr().out.splitlines() == [said, said]
    with pytest.raises(SystemExit) as exited:
        cli.main(["up", "--real-nodes", "-1"])
    assert exited.value.code == 2
    assert "--real-nodes must be 0 or more" in capsys.readouterr().err
