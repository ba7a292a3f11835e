"""Facts about the machine and the checkout, recorded in every run log (standard library only)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
import subprocess
import time
from pathlib import Path


def hostname() -> str:
    return socket.gethostname()


def installed_packages() -> dict[str, str]:
    """Every distribution this interpreter can import, by normalised name (as pip names it: lower case, '-'),
    with its version: what a build is, beyond its framework's version."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(name.lower().replace("_", "-").replace(".", "-"), dist.version)
    return dict(sorted(found.items()))


# the widest vector instruction set a CPU has, widest first: (the /proc/cpuinfo flags it needs, its name)
_VECTOR_ISAS = (
    (("amx_bf16", "amx_tile"), "AMX"),
    (("avx512f", "avx512_bf16"), "AVX-512 BF16"),
    (("avx512f",), "AVX-512"),
    (("avx2", "fma"), "AVX2"),
    (("sve", "bf16"), "SVE BF16"),
    (("sve",), "SVE"),
    (("asimd", "bf16"), "NEON BF16"),
    (("asimd",), "NEON"),
)


# The instruction sets that multiply bfloat16 natively: x86's AVX-512 BF16 and AMX, Arm's BF16 (ARMv8.6). Elsewhere a
# framework's bf16 autocast converts to fp32 and back around fp32 arithmetic: 7-17x slower than fp32 (PyTorch and
# TensorFlow on a Zen 3, AVX2), and no peak worth holding a run to.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
NATIVE_BF16_ISAS = ("AMX", "AVX-512 BF16", "SVE BF16", "NEON BF16")  # cpu_model's names of the CPUs with one
EMULATED_BF16 = "no native bf16 on this CPU (no AVX-512 BF16, AMX or Arm BF16 instructions): bfloat16 runs emulated"


GPU_DEVICE_FILES = ("/dev/nvidia0", "/dev/kfd")  # an NVIDIA driver's first GPU; ROCm's compute interface


def emulates_bf16(device: str) -> bool:
    """Whether an AMP run on `device` (cpu, cuda, auto) runs bf16 emulated here: a CPU run (auto is one where this
    machine has no GPU device file) on a CPU without native bf16."""
    if device == "cuda" or (device == "auto" and any(Path(f).exists() for f in GPU_DEVICE_FILES)):
        return False
    return native_bf16() is False


def emulated_bf16_skipped(precision: str, device: str, policy: str) -> str | None:
    """Why an AMP run is not run (platform.emulated_bf16: skip, emulated here), or None to run it."""
    if precision != "amp" or policy != "skip" or not emulates_bf16(device):
        return None
    return (
        f"{EMULATED_BF16}, 7-17x slower than fp32 (PyTorch and TensorFlow on an AVX2 CPU): not run, as "
        "platform.emulated_bf16: skip says (run: measure it emulated)"
    )


def _first_cpu() -> dict[str, str]:
    """The first CPU's block of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_flags(fields: dict[str, str] | None = None) -> set[str]:
    """The CPU's instruction-set flags as /proc/cpuinfo lists them (x86 `flags`, Arm `Features`), of its first
    CPU's `fields` where they are read already."""
    fields = _first_cpu() if fields is None else fields
    return set((fields.get("flags") or fields.get("Features") or "").split())


def native_bf16(flags: set[str] | None = None) -> bool | None:
    """Whether this CPU (or one with `flags`) multiplies bfloat16 natively; None where /proc/cpuinfo says nothing."""
    flags = cpu_flags() if flags is None else flags
    return bool(flags & set(NATIVE_BF16_FLAGS)) if flags else None


def model_native_bf16(model: str) -> bool | None:
    """Whether the CPU a record names (cpu_model's words) multiplies bfloat16 natively; None where its words do
    not say (another tool's log, a CPU without a recognised vector instruction set)."""
    isa = model[model.rfind("(") + 1 : -1].split(", ")[-1] if model.endswith(")") else ""
    if isa in NATIVE_BF16_ISAS:
        return True
    return False if isa in {name for _, name in _VECTOR_ISAS} else None


def cpu_model() -> str:
    """The CPU as /proc/cpuinfo names it, with its family and model numbers and its widest vector instruction set:
    a VM often shows only a generic name ("AMD EPYC") for generations whose fp32 peaks differ by 2x or more (AVX2
    against AVX-512), so figures measured on either would otherwise read as the same machine's."""
    fields = _first_cpu()
    name = fields.get("model name") or platform.processor() or platform.machine()
    flags = cpu_flags(fields)
    details: list[str] = []
    if "cpu family" in fields and "model" in fields:
        details.append(f"family {fields['cpu family']} model {fields['model']}")
    details += [isa for needed, isa in _VECTOR_ISAS if flags.issuperset(needed)][:1]
    return f"{name} ({', '.join(details)})" if details else name


def usable_cpus() -> list[int]:
    """The CPU ids this process may run on (honours cgroups/taskset/SLURM binding)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def busy_fraction(seconds: float = 2.0) -> float | None:
    """The share of the machine's CPU time spent busy over the next `seconds` (Linux's /proc/stat; None
    elsewhere): before a measurement, what other processes are taking from it."""

    def times() -> list[int] | None:
        try:
            return [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        except (OSError, ValueError, IndexError):
            return None

    before = times()
    time.sleep(seconds)
    after = times()
    if before is None or after is None:
        return None
    delta = [b - a for a, b in zip(before, after, strict=False)]
    idle = delta[3] + (delta[4] if len(delta) > 4 else 0)  # idle and iowait
    return 1 - idle / sum(delta) if sum(delta) else None


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


def gpus_hidden() -> str | None:
    """CUDA_VISIBLE_DEVICES's value where it hides every GPU ("" or -1), else None."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible if visible is not None and visible.strip() in ("", "-1") else None


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
    for name, key in (
        ("nodelist", "NodeList"),
        ("partition", "Partition"),
        ("nnodes", "NumNodes"),
        ("ntasks", "NumTasks"),
        ("cpus_per_task", "CPUs/Task"),
        ("time_limit", "TimeLimit"),
        ("account", "Account"),
        ("job_name", "JobName"),
    ):
        if fields.get(key) and fields[key] != "(null)":
            info[name] = fields[key]
    for name, var in (
        ("nodelist", "SLURM_JOB_NODELIST"),
        ("partition", "SLURM_JOB_PARTITION"),
        ("cpus_per_task", "SLURM_CPUS_PER_TASK"),
    ):
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


def machine() -> dict[str, object]:
    """The node in the report's hardware line: logical CPUs, memory (/proc/meminfo's MemTotal) and the OS."""
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024  # kB
                break
    except (OSError, ValueError, IndexError):
        pass
    try:
        name = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        name = None
    return {
        "cpu_count": os.cpu_count(),
        "memory_bytes": memory,
        "os": f"{name or platform.system()} ({platform.release()})",
    }
