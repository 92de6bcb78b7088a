"""The wheel (what the image installs) holds the operator and nothing of the dev harness, and
works where the harness cannot be imported."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from loadwise.config import Config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of what the wheel is made of: setuptools' build/ in the work tree
    keeps modules since moved or deleted, and would put them in the wheel."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "operator" / "loadwise",
        source / "operator" / "loadwise",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-w", str(out), str(source)], check=True, cwd=out)
    (built,) = out.glob("loadwise-*.whl")
    return built


def test_the_wheel_contains_the_operator_and_no_dev_harness(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "loadwise/runtime.py" in names and "loadwise/framework/plugins/node_ports.py" in names
    assert not [n for n in names if "devcluster" in n or "loadwise_dev" in n], names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "dev/"))], names


# Everything the test venv's site-packages holds that is loadwise's or the harness's: the
# editable installs (their .pth files and finder) and their metadata.
OURS = ("loadwise", "__editable__", "__editable___")


def test_the_installed_wheel_runs_where_the_harness_cannot_be_imported(
    wheel: Path, tmp_path: Path
) -> None:
    """The wheel installed alone into a fresh venv whose only other packages are the
    dependencies (this venv's site-packages, without loadwise's and loadwise_dev's editable
    installs): `loadwise_dev` is not importable there, yet every module of the package imports
    and the `loadwise` command answers --help and crd. The import-linter contract in
    pyproject.toml forbids the import statically; this proves the wheel stands alone."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    subprocess.run([*install, "--no-deps", "--no-index", str(wheel)], check=True)
    # The dependencies: a directory of links to this venv's site-packages entries, ours left
    # out, named by a .pth file (a plain path: the .pth files inside it are not run).
    deps = tmp_path / "deps"
    deps.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not entry.name.startswith(OURS) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    target = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    (target / "dependencies.pth").write_text(f"{deps}\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        # cwd: not the repository, whose operator/ and dev/ must not be found by accident.
        return subprocess.run(
            argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )

    probe = run(
        str(python), "-I", "-c",
        "import importlib.util, sys; import loadwise, kopf;"
        "print(loadwise.__file__); print(importlib.util.find_spec('loadwise_dev'));"
        "print([p for p in sys.path if p.endswith(('operator', 'dev'))])",
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    where, harness, repository = probe.stdout.splitlines()
    assert where.startswith(str(target)), where  # the wheel's copy, not the source tree
    assert harness == "None"  # the test is not vacuous: the harness really is absent
    assert repository == "[]"
    modules = sorted(
        n.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for n in zipfile.ZipFile(wheel).namelist()
        if n.startswith("loadwise/") and n.endswith(".py") and not n.endswith("__main__.py")
    )
    assert {"loadwise.cli", "loadwise.runtime"} <= set(modules)
    imported = run(str(python), "-I", "-c", f"import {', '.join(modules)}")
    assert imported.returncode == 0, imported.stderr
    helped = run("loadwise", "--help")
    assert helped.returncode == 0, helped.stderr
    assert all(c in helped.stdout for c in ("run", "explain", "crd")), helped.stdout
    assert "demo" not in helped.stdout and "{run,crd,untaint,shadow,explain}" in helped.stdout
    crd = run("loadwise", "crd")
    assert crd.returncode == 0 and "schedulingpolicies.loadwise.io" in crd.stdout, crd.stderr
    # The commands that moved to the harness say where they went.
    moved = run("loadwise", "demo")
    assert moved.returncode == 2 and "loadwise-dev demo" in moved.stderr, moved.stderr


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
