"""Facts about the machine and the checkout, recorded in every run log (standard library only)."""

from __future__ import annotations

import functools
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


@functools.cache  # a job's facts do not change; scontrol is asked once per process
def slurm_info() -> dict[str, str] | None:
    """SLURM job facts when running inside an allocation. Snakemake's job step clears most SLURM_*
    variables, so the job's own record (scontrol) is the source; the environment fills gaps."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    info = {"job_id": job_id}
    fields = dict(f.split("=", 1) for f in (_run(["scontrol", "-o", "show", "job", job_id]) or "").split() if "=" in f)
    for name, key in (("nodelist", "NodeList"), ("partition", "Partition"), ("nnodes", "NumNodes"),
                      ("ntasks", "NumTasks"), ("cpus_per_task", "CPUs/Task"), ("time_limit", "TimeLimit"),
                      ("account", "Account"), ("job_name", "JobName")):
        if fields.get(key) and fields[key] != "(null)":
            info[name] = fields[key]
    for name, var in (("nodelist", "SLURM_JOB_NODELIST"), ("partition", "SLURM_JOB_PARTITION"),
                      ("cpus_per_task", "SLURM_CPUS_PER_TASK")):
        if name not in info and var in os.environ:
            info[name] = os.environ[var]
    return info


def slurm_final_state(job_id: str) -> str | None:
    """A finished job's state from accounting (e.g. CANCELLED, TIMEOUT, NODE_FAIL); None without sacct."""
    out = _run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"])
    return out.split()[0] if out else None


def slurm_hostnames(nodelist: str) -> list[str]:
    """The host names of a SLURM node list (e.g. node[01-04])."""
    out = _run(["scontrol", "show", "hostnames", nodelist]) if nodelist else None
    return out.split() if out else [hostname()]


def python_version() -> str:
    return platform.python_version()
