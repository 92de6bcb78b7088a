"""The wheel (what the image installs) holds the operator and nothing of the dev harness."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from loadwise.config import Config

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_contains_the_operator_and_no_dev_harness(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-w", str(tmp_path), str(ROOT)], check=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("loadwise-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "loadwise/runtime.py" in names and "loadwise/framework/plugins/node_ports.py" in names
    assert not [n for n in names if "devcluster" in n or "loadwise_dev" in n], names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "dev/"))], names


def test_the_image_exposes_the_https_port() -> None:
    """EXPOSE documents the port the image serves: the default secure_port, the chart's."""
    exposed = [
        line.split()[1:]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("EXPOSE ")
    ]
    values = yaml.safe_load((ROOT / "charts" / "loadwise" / "values.yaml").read_text())
    assert exposed == [[str(Config().serving.secure_port)]]
    assert values["serving"]["securePort"] == Config().serving.secure_port


def test_the_image_lock_pins_every_dependency_within_pyproject_with_hashes() -> None:
    """requirements.lock (make lock) is what the image installs, hash-checked: every dependency
    and build requirement of pyproject.toml is pinned there inside its declared range."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [
        Requirement(line)
        for line in project["project"]["dependencies"] + project["build-system"]["requires"]
    ]
    text = (ROOT / "requirements.lock").read_text()
    pins = dict(
        line.split(" ", 1)[0].split("==")
        for line in text.splitlines()
        if "==" in line and not line.startswith("#")
    )
    normal = {name.lower().replace("_", "-"): version for name, version in pins.items()}
    for requirement in wanted:
        version = normal.get(requirement.name.lower().replace("_", "-"))
        assert version is not None, f"{requirement.name} is not in requirements.lock"
        assert requirement.specifier.contains(version), (requirement, version)
    blocks = text.split("==")[1:]
    assert all("--hash=sha256:" in block for block in blocks)
    assert (
        "--find-links" not in text and "COPY requirements.lock" in (ROOT / "Dockerfile").read_text()
    )
