"""envs/core.yaml's pip list as wheelhouse.sh and bootstrap.sh take it, without a network: optional packages
(`# optional`) are left out of a lean wheelhouse (--lean), and bootstrap.sh leaves out those that its wheelhouse
lacks."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "workflow" / "scripts"


def core_requirements(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPTS / "wheelhouse.py"), "--core-requirements", str(REPO / "envs/core.yaml")]
    return subprocess.run([*command, *args], capture_output=True, text=True, check=True)


def names(listing: str) -> set[str]:
    return {line.split("==")[0] for line in listing.splitlines() if line}


def test_pyarrow_and_uv_are_optional():
    full = names(core_requirements().stdout)
    assert {"snakemake", "pandas", "pyarrow", "matplotlib", "uv"} <= full
    assert names(core_requirements("--lean").stdout) == full - {"pyarrow", "uv"}


def test_bootstrap_leaves_out_what_a_lean_wheelhouse_lacks(tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    (house / "snakemake-9.27.1-py3-none-any.whl").touch()
    lacking = core_requirements("--wheelhouse", str(house))
    assert "pyarrow" not in names(lacking.stdout) and "snakemake" in names(lacking.stdout)
    assert f"optional pyarrow==26.0.1 is not in the wheelhouse {house}: left out" in lacking.stderr
    (house / "pyarrow-26.0.1-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    (house / "uv-0.13.9-py3-none-manylinux_2_17_x86_64.whl").touch()
    holding = core_requirements("--wheelhouse", str(house))
    assert {"pyarrow", "uv"} <= names(holding.stdout) and not holding.stderr


def test_wheelhouse_sh_lean_passes_no_optional_package(tmp_path):
    """wheelhouse.sh --lean hands wheelhouse.py a requirement list without pyarrow (a stand-in Python prints the
    lists instead of downloading)."""
    python = tmp_path / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        f'if [[ "$2" == --core-requirements ]]; then exec {sys.executable} "$@"; fi\n'
        'while [[ $# -gt 0 && "$1" != --requirements ]]; do shift; done; shift; cat "$@"\n'
    )
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PYTHON=str(python))
    run = [str(SCRIPTS / "wheelhouse.sh"), str(tmp_path / "house")]
    lean = subprocess.run(["bash", *run, "--lean"], env=env, capture_output=True, text=True, check=True)
    full = subprocess.run(["bash", *run], env=env, capture_output=True, text=True, check=True)
    assert "pyarrow" in names(full.stdout) and "snakemake" in names(full.stdout)
    assert names(lean.stdout) == names(full.stdout) - {"pyarrow", "uv"}
