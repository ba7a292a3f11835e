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


def python_312() -> str | None:
    """A Python 3.12 here: pyenv's, the system's, or one on PATH (pyenv's shims name versions they do not run)."""
    candidates = [*map(str, sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12")))]
    candidates += ["/usr/bin/python3.12", "/usr/local/bin/python3.12", shutil.which("python3.12") or ""]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True)
        if probe.returncode == 0 and probe.stdout.strip() == b"(3, 12)":
            return candidate
    return None


def test_the_gpu_nodes_wheelhouse_fits_and_installs_over_its_python(tmp_path):
    """The wheelhouse for the lent GPU node (gpu_acceptance.sh --fill: Python 3.12, the node's list with the
    versions not known here) within the carried budget, without the node's large packages; installed offline over a
    Python 3.12 standing in for the node's (its own pandas, scipy, matplotlib ..., jinja2 older than the pin), which
    .venv takes; then that Python with a pygments older than dlbench's range, which is named."""
    uv = REPO / ".venv" / "bin" / "uv"
    python312 = python_312()
    if python312 is None:
        pytest.skip("needs a Python 3.12 interpreter here")
    house = tmp_path / "house"
    filled = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_acceptance.sh"), "--fill", str(house)],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert filled.returncode == 0, filled.stdout[-3000:] + filled.stderr[-3000:]
    carried = re.search(r"= ([\d.]+) MiB, within the 56 MiB budget", filled.stdout)
    assert carried and float(carried[1]) <= 56, filled.stdout[-2000:]
    names = {wheel.name.split("-")[0].lower() for wheel in house.glob("*.whl")}
    assert {"snakemake", "pulp", "jinja2"} <= names, names  # jinja2: a small fallback, version not known
    assert {"pandas", "scipy", "matplotlib", "pyarrow", "uv", "numpy", "torch"}.isdisjoint(names), names

    node = tmp_path / "node"
    subprocess.run([uv, "venv", "--quiet", "--python", python312, node], check=True)
    packages = ["numpy", "pandas", "scipy", "matplotlib", "seaborn", "pygments", "jinja2==3.1.5", "pyyaml", "psutil"]
    install = [uv, "pip", "install", "--quiet", "--python", node / "bin" / "python"]
    subprocess.run([*install, *packages, "nvidia-ml-py", "tabulate"], check=True, timeout=900)
    repo = copy_repo(tmp_path / "repo")
    result = bootstrap(repo, str(node / "bin" / "python"), "--system-site-packages", "--wheelhouse", str(house))
    assert result.returncode == 0, result.stderr[-5000:]
    assert "jinja2 3.1.5 (pinned ==3.1.6)" in result.stderr, result.stderr[-3000:]
    taken = (repo / ".venv" / "taken-from-the-interpreter.txt").read_text().split()
    assert {"pandas", "scipy", "matplotlib", "jinja2"} <= {line.split("==")[0] for line in taken}, taken
    check = offline(
        ".venv/bin/snakemake --version && PYTHONPATH=workflow .venv/bin/python -c 'from pathlib import Path; "
        "import yaml, jinja2; from dlbench.plan import study; s = study.load_study(yaml.safe_load(open("
        '"workflow/studies/gpu-check.yaml")), Path("workflow/schemas/config.schema.yaml"), Path("envs")); '
        "print(len(s.configurations), jinja2.__version__)'",
        repo,
    )
    assert check.returncode == 0 and check.stdout.split() == [pins()["snakemake"], "5", "3.1.5"], check.stderr

    subprocess.run([*install, "pygments==2.17.2"], check=True, timeout=600)
    shutil.rmtree(repo / ".venv")
    refused = bootstrap(repo, str(node / "bin" / "python"), "--system-site-packages", "--wheelhouse", str(house))
    assert refused.returncode == 1
    assert "the interpreter has pygments 2.17.2 (dlbench's range >=2.18" in refused.stderr, refused.stderr[-3000:]


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
