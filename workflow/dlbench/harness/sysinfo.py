"""Facts about the machine and the checkout, recorded in every run log (standard library only)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path


def hostname() -> str:
    return socket.gethostname()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> list[int]:
    """The CPU ids this process may run on (honours cgroups/taskset/SLURM binding)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_commit() -> str | None:
    """The workflow's commit, with '-dirty' when the checkout has local changes."""
    here = Path(__file__).resolve().parent
    commit = _run(["git", "rev-parse", "HEAD"], cwd=here)
    if commit is None:
        return None
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here)
    return commit + ("-dirty" if dirty else "")


def nvidia_driver() -> str | None:
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def slurm_info() -> dict[str, str] | None:
    """SLURM job facts when running inside an allocation."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    keys = {
        "job_id": "SLURM_JOB_ID", "nodelist": "SLURM_JOB_NODELIST", "partition": "SLURM_JOB_PARTITION",
        "nnodes": "SLURM_JOB_NUM_NODES", "ntasks": "SLURM_NTASKS", "cpus_per_task": "SLURM_CPUS_PER_TASK",
    }
    return {name: os.environ[var] for name, var in keys.items() if var in os.environ}


def python_version() -> str:
    return platform.python_version()
