"""The offline setup: wheelhouse.sh fills a wheelhouse on a connected machine, and bootstrap.sh --wheelhouse
installs the core environment from it in a network namespace without routes (only a loopback, down), into a copy
of the repository. The wheelhouses are filled from PyPI through pip's cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_repo

REPO = Path(__file__).resolve().parents[1]
WHEELHOUSE_SH = REPO / "workflow" / "scripts" / "wheelhouse.sh"


def _netns_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not _netns_works(), reason="needs root, unshare --net (a network namespace) and ip"),
]


def pins() -> dict[str, str]:
    """envs/core.yaml's pip list, as bootstrap.sh reads it."""
    text = (REPO / "envs" / "core.yaml").read_text()
    return dict(
        pin.lower().split("==") for pin in re.findall(r"^ *- ([A-Za-z0-9_.-]*==[^\s#]*) *(?:#.*)?$", text, re.MULTILINE)
    )


def fill(house: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["bash", str(WHEELHOUSE_SH), str(house), *args],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "MiB, for Python" in result.stdout
    return result


def offline(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """bash -c script in a new network namespace: no interface but a loopback that is down."""
    check = "ip -o link | grep -v '^1: lo: .* state DOWN' && { echo 'a network interface is up' >&2; exit 99; }; "
    result = subprocess.run(
        ["unshare", "--net", "bash", "-c", check + script], cwd=cwd, capture_output=True, text=True, timeout=1200
    )
    assert result.returncode != 99, result.stderr
    return result


def bootstrap(repo: Path, python: str, *args: str) -> subprocess.CompletedProcess:
    return offline(f"PYTHON={python} bash workflow/scripts/bootstrap.sh {' '.join(args)}", repo)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """A full wheelhouse of the core environment for this Python and machine."""
    house = tmp_path_factory.mktemp("wheelhouse")
    fill(house)
    return house


def assert_core_works(repo: Path) -> None:
    """Snakemake, the packages dlbench imports, and a study loaded by dlbench (jsonschema, yaml), offline."""
    check = offline(
        ".venv/bin/snakemake --version && .venv/bin/python -c 'import jsonschema, snakemake, mlperf_logging, "
        "pandas, pyarrow, scipy, seaborn' && PYTHONPATH=workflow .venv/bin/python -c 'from pathlib import Path; "
        'import yaml; from dlbench.plan import study; s = study.load_study(yaml.safe_load(open("config.yaml")), '
        'Path("workflow/schemas/config.schema.yaml"), Path("envs")); print(len(s.configurations), "runs")\'',
        repo,
    )
    assert check.returncode == 0, check.stderr[-5000:]
    assert check.stdout.split()[0] == pins()["snakemake"]
    assert check.stdout.strip().endswith("runs")


def test_offline_bootstrap_from_a_wheelhouse(wheelhouse, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    result = bootstrap(repo, sys.executable, "--wheelhouse", str(wheelhouse))
    assert result.returncode == 0, result.stderr[-5000:]
    assert_core_works(repo)
    freeze = subprocess.run(
        [repo / ".venv/bin/python", "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout.lower()
    for name, version in pins().items():
        assert f"{name}=={version}" in freeze, name
    again = bootstrap(repo, sys.executable, "--wheelhouse", str(wheelhouse))
    assert again.returncode == 0 and "installing" not in again.stderr, again.stderr


def test_system_site_packages_take_the_interpreters_versions(tmp_path):
    """A base interpreter with jinja2 and pygments at other versions than the pins: the wheelhouse filled with
    --have of its packages lacks them, and .venv takes them from the base."""
    base = tmp_path / "base"
    # The base sees its interpreter's site-packages too, so that its pip list is all that .venv will see.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", base], check=True)
    subprocess.run(
        [base / "bin/python", "-m", "pip", "install", "--quiet", "jinja2==3.1.5", "pygments==2.19.2"],
        check=True,
        timeout=600,
    )
    have = tmp_path / "have.txt"
    have.write_text(
        subprocess.run(
            [base / "bin/python", "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
        ).stdout
    )
    house = tmp_path / "wheelhouse"
    filled = fill(house, "--have", str(have))
    names = {wheel.name.split("-")[0].lower() for wheel in house.glob("*.whl")}
    assert {"jinja2", "pygments", "markupsafe"}.isdisjoint(names), filled.stdout
    assert {"snakemake", "pandas"} <= names, filled.stdout

    repo = copy_repo(tmp_path / "repo")
    result = bootstrap(repo, str(base / "bin/python"), "--system-site-packages", "--wheelhouse", str(house))
    assert result.returncode == 0, result.stderr[-5000:]
    assert "taken from the interpreter's site-packages: " in result.stderr
    assert "jinja2 3.1.5 (pinned ==3.1.6)" in result.stderr
    versions = offline(
        ".venv/bin/python -c 'import jinja2, pygments; print(jinja2.__version__, pygments.__version__)'", repo
    )
    assert versions.stdout.split() == ["3.1.5", "2.19.2"], versions.stderr
    assert_core_works(repo)


def test_system_site_packages_over_the_core_environment(tmp_path):
    """The real core environment's interpreter as the base: the wheelhouse is (nearly) empty and suffices."""
    base = REPO / ".venv" / "bin" / "python"
    have = tmp_path / "have.txt"
    have.write_text(
        subprocess.run(
            [base, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
        ).stdout
    )
    house = tmp_path / "wheelhouse"
    fill(house, "--have", str(have))
    assert {wheel.name.split("-")[0] for wheel in house.glob("*.whl")} <= {"pip"}
    repo = copy_repo(tmp_path / "repo")
    result = bootstrap(repo, str(base), "--system-site-packages", "--wheelhouse", str(house))
    assert result.returncode == 0, result.stderr[-5000:]
    assert_core_works(repo)  # .venv/bin/snakemake: a console script over the base's package
    uv = offline(".venv/bin/uv --version", repo)
    assert uv.returncode == 0 and uv.stdout.split()[1] == pins()["uv"], uv.stderr


def test_a_missing_wheelhouse_is_named(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    result = bootstrap(repo, sys.executable, "--wheelhouse", str(tmp_path / "nowhere"))
    assert result.returncode == 1
    assert f"wheelhouse {tmp_path / 'nowhere'}: no such directory" in result.stderr
    assert not (repo / ".venv").exists()


def test_a_missing_wheel_is_named(wheelhouse, tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for wheel in wheelhouse.glob("*.whl"):
        if not wheel.name.startswith("attrs-"):
            os.link(wheel, house / wheel.name)
    repo = copy_repo(tmp_path / "repo")
    result = bootstrap(repo, sys.executable, "--wheelhouse", str(house))
    assert result.returncode == 1
    assert "No matching distribution found for attrs" in result.stderr  # pip's own message
    assert f"bootstrap: the wheelhouse {house} has no wheel for attrs" in result.stderr, result.stderr[-3000:]
