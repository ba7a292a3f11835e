"""The core environment over a GPU node's own Python: a plain interpreter (not a virtual environment) whose own
site-packages hold what the node has (an NGC-style image's python3), and one whose ensurepip is missing (Debian
without python3-venv). Such interpreters are made here from this machine's base Python in seconds: a copy of its
small executable over a standard library of symbolic links, with a site-packages of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORE_SITE = REPO / ".venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def plain_interpreter(dest: Path, site_paths: list[Path], without: tuple[str, ...] = ()) -> Path:
    """A Python at `dest` that is no virtual environment: its prefix is `dest` (the standard library linked
    from the base Python, less the modules named in `without`) and its own site-packages adds `site_paths` (a
    .pth of plain path lines: those directories' own .pth files are not run)."""
    base = Path(sys.base_prefix)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    stdlib = Path(sysconfig.get_paths(vars={"installed_base": sys.base_prefix, "base": sys.base_prefix})["stdlib"])
    lib = dest / "lib" / version
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name != "site-packages" and entry.name.removesuffix(".py") not in without:
            (lib / entry.name).symlink_to(entry)
    (lib / "site-packages").mkdir()
    (lib / "site-packages" / "node.pth").write_text("".join(f"{path}\n" for path in site_paths))
    (dest / "bin").mkdir()
    python = dest / "bin" / version
    # A copy, not a link: Python finds its prefix from where its executable really is.
    python.write_bytes((base / "bin" / version).read_bytes())
    python.chmod(0o755)
    (dest / "bin" / "python3").symlink_to(version)
    assert subprocess.run([python, "-c", "import sys; assert sys.prefix == sys.base_prefix"]).returncode == 0
    return python


@pytest.fixture(scope="module")
def node_python(tmp_path_factory) -> Path:
    """A plain interpreter whose own site-packages hold the core environment's packages (pyyaml, jsonschema,
    Snakemake), as an NGC image's python3 holds its own."""
    if not (Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}").is_file():
        pytest.skip("the base Python has no bin/pythonX.Y to copy")
    return plain_interpreter(tmp_path_factory.mktemp("node"), [CORE_SITE])


def test_preflight_runs_when_yaml_is_in_the_interpreters_own_site_packages(node_python, tmp_path):
    """.venv made with --system-site-packages runs its .pth files before the interpreter's site-packages are
    added: the startup line must not need pyyaml before Snakemake is imported."""
    venv = tmp_path / "venv"
    subprocess.run([node_python, "-m", "venv", "--without-pip", "--system-site-packages", venv], check=True)
    purelib = subprocess.run(
        [venv / "bin/python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    line = subprocess.run(
        [venv / "bin/python", REPO / "workflow/dlbench/preflight.py", REPO / "workflow"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (Path(purelib) / "_dlbench_preflight.pth").write_text(line)
    study = tmp_path / "study.yaml"
    study.write_text("matrix:\n\tframework: [pytorch]\n")
    result = subprocess.run(
        [venv / "bin/python", "-m", "snakemake", "-n", "--configfile", study],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Error processing line" not in result.stderr, result.stderr
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("dlbench: invalid configuration:\n"), result.stderr
    assert str(study) in result.stderr and "tab" in result.stderr, result.stderr


def bootstrap_copy(tmp_path: Path, python: Path, *args: str) -> subprocess.CompletedProcess:
    """bootstrap.sh in a copy of what it reads (envs/, workflow/scripts, the preflight module), with PATH's
    apt-get replaced by one that only records that it was called (we may be root here)."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "envs", repo / "envs")
    shutil.copytree(REPO / "workflow" / "scripts", repo / "workflow" / "scripts")
    (repo / "workflow" / "dlbench").mkdir()
    shutil.copy(REPO / "workflow" / "dlbench" / "preflight.py", repo / "workflow" / "dlbench")
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    (fake_bin / "apt-get").write_text(f"#!/bin/sh\ntouch {tmp_path / 'apt-get-called'}\nexit 1\n")
    (fake_bin / "apt-get").chmod(0o755)
    return subprocess.run(
        ["bash", repo / "workflow/scripts/bootstrap.sh", *args],
        env=dict(os.environ, PYTHON=str(python), PATH=f"{fake_bin}:{os.environ['PATH']}"),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def node_python_without_ensurepip(tmp_path_factory) -> Path:
    """The node's interpreter of `node_python`, on Debian without python3.X-venv: no ensurepip."""
    if not (Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}").is_file():
        pytest.skip("the base Python has no bin/pythonX.Y to copy")
    python = plain_interpreter(tmp_path_factory.mktemp("node"), [CORE_SITE], without=("ensurepip",))
    assert subprocess.run([python, "-m", "venv", tmp_path_factory.mktemp("venv") / "v"]).returncode != 0
    return python


@pytest.mark.slow  # 27 s on 2 cores: bootstrap's pip resolves the whole core list (all found installed)
def test_without_ensurepip_pip_comes_from_the_wheelhouse(node_python_without_ensurepip, tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    bundled = Path(sysconfig.get_paths()["stdlib"]) / "ensurepip" / "_bundled"
    for wheel in bundled.glob("pip-*.whl"):
        shutil.copy(wheel, house)
    result = bootstrap_copy(
        tmp_path, node_python_without_ensurepip, "--system-site-packages", "--wheelhouse", str(house)
    )
    assert not (tmp_path / "apt-get-called").exists(), result.stderr
    assert result.returncode == 0, result.stderr[-3000:]
    assert "has no ensurepip: .venv without it, pip from" in result.stderr
    venv_python = tmp_path / "repo" / ".venv" / "bin" / "python"
    assert subprocess.run([venv_python, "-m", "pip", "--version"], capture_output=True).returncode == 0


def test_without_ensurepip_or_a_pip_wheel_the_command_is_named(node_python_without_ensurepip, tmp_path):
    result = bootstrap_copy(tmp_path, node_python_without_ensurepip)
    assert not (tmp_path / "apt-get-called").exists(), result.stderr
    assert result.returncode == 1, result.stderr
    xy = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert "has no ensurepip, so 'python -m venv' cannot put pip into .venv" in result.stderr, result.stderr
    assert "--wheelhouse DIR" in result.stderr and f"apt-get install python{xy}-venv" in result.stderr
    assert not (tmp_path / "repo" / ".venv").exists()
