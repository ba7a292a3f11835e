"""Interpreters a study brings for its frameworks (software.python): checked before any job (core environment).

Each interpreter a study's frameworks use is asked what it is (dlbench.harness.probe, run with that interpreter):
it must import dlbench's backend of its framework, and with `platform.device: cuda` see a GPU. What it reports
about its build (Python, framework, CUDA, cuDNN, NCCL versions) is its identity: the rules put it into the runs'
command lines, so a changed module or site build reruns exactly the runs that used it, and a moved interpreter of
the same build as well (its path is in the command line too). Which GPUs it sees is not part of it: a login node
without GPUs and a GPU node run the same build.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .study import ConfigError

PROBE_TIMEOUT_S = 300  # importing a framework from a cold network file system can take minutes
IDENTITY_KEYS = ("python_version", "framework_version", "cuda", "cudnn", "nccl")


@dataclass(frozen=True)
class Interpreter:
    framework: str
    python: str
    facts: dict[str, Any]

    @property
    def identity(self) -> str:
        """The build as one line: what makes two interpreters' runs the same runs (its path aside)."""
        return ";".join(f"{key}={self.facts.get(key)}" for key in IDENTITY_KEYS)


PYTHON_KEY = "software.python.{framework}"  # where a study names a framework's interpreter (a build's: its own key)


def probe(
    framework: str,
    python: str,
    package_dir: str | Path,
    timeout_s: float = PROBE_TIMEOUT_S,
    key: str = PYTHON_KEY,
) -> dict[str, Any]:
    """The probe's facts of `python` for `framework`; ConfigError (keyed `key`, software.python.<framework>)
    otherwise."""
    command = [python, "-m", "dlbench.harness.probe", "--framework", framework]
    return ask(key.format(framework=framework), python, framework, command, package_dir, timeout_s)


def probe_image(
    framework: str, image: str, package_dir: str | Path, apptainer_args: str = "", timeout_s: float = PROBE_TIMEOUT_S
) -> dict[str, Any]:
    """The probe's facts of an image's `python` (software.container), run as the runs are (`apptainer exec` with
    the workflow's apptainer arguments, the package directory bound); ConfigError otherwise."""
    words = f"PYTHONPATH={shlex.quote(str(package_dir))} python -m dlbench.harness.probe --framework {framework}"
    binds = ["--bind", str(package_dir)]
    command = ["apptainer", "exec", *shlex.split(apptainer_args), *binds, image, "sh", "-c", words]
    return ask(f"software.container.{framework}", f"{image}'s python", framework, command, package_dir, timeout_s)


def ask(
    where: str, python: str, framework: str, command: list[str], package_dir: str | Path, timeout_s: float
) -> dict[str, Any]:
    """Run a probe command and read its facts; ConfigError keyed `where` naming `python` otherwise."""
    env = dict(os.environ, PYTHONPATH=str(package_dir))
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{where}: {python} did not answer within {timeout_s:g} s (importing {framework})") from None
    except OSError as error:
        raise ConfigError(f"{where}: {command[0]} cannot be run: {error.strerror}") from None
    lines = result.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        found = {}
    if "error" in found:
        raise ConfigError(f"{where}: {python}: {found['error']}")
    if result.returncode != 0 or "framework_version" not in found:
        output = (result.stderr.strip().splitlines() or lines or ["no output"])[-1]
        raise ConfigError(
            f"{where}: {python} is not a Python that can run dlbench's harness (exit {result.returncode}: {output})"
        )
    return found


def check(
    software_python: dict[str, str],
    frameworks: list[str],
    device: str,
    package_dir: str | Path,
    key: str = PYTHON_KEY,
) -> tuple[dict[str, Interpreter], list[str]]:
    """The study's interpreters for the frameworks it runs, probed (ConfigError for any that cannot run the
    harness), and with device cuda what each that sees no GPU here says: an error when the runs are on this
    machine, a warning when they run on other nodes (SLURM), which only the caller knows. `key`: where the study
    names them (a build's interpreters: software.builds.<build>.{framework}.python)."""
    found, problems, no_gpu = {}, [], []
    for framework in sorted(set(frameworks) & set(software_python)):
        python = resolved_python(software_python[framework])
        try:
            facts = probe(framework, python, package_dir, key=key)
        except ConfigError as error:
            problems.append(str(error))
            continue
        found[framework] = Interpreter(framework, python, facts)
        if device == "cuda" and not facts["gpus"]:
            cuda = facts["cuda"] or "none, a CPU build"
            no_gpu.append(
                f"{key.format(framework=framework)}: platform.device is cuda but {python}'s {framework} "
                f"{facts['framework_version']} sees no GPU here (its CUDA: {cuda})"
            )
    if problems:
        raise ConfigError("\n".join(problems))
    return found, no_gpu


def resolved_python(python: str) -> str:
    """An interpreter a study names: a path as given, a command name as the one on PATH now (a loaded module's),
    by its full path, so that every job runs the interpreter the planning checked."""
    return python if "/" in python else shutil.which(python) or python


def no_gpu_here() -> str | None:
    """Why this machine certainly has no GPU a run could use, or None when it has one or may have one.

    Asked of NVML (the NVIDIA driver, through the telemetry sampler's nvidia-ml-py in the core environment):
    the node's GPUs without importing a framework, in the time of a library call. Where NVML is missing a GPU
    may still be there (a driver's device file, ROCm's): None then, the runs find out themselves."""
    from ..harness.sysinfo import GPU_DEVICE_FILES, gpus_hidden
    from ..telemetry.sampler import Nvml

    if (hidden := gpus_hidden()) is not None:
        return f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU"
    nvml = Nvml()
    if nvml.handles:
        return None
    if nvml.reason.startswith("NVML sees"):  # NVML works and CUDA_VISIBLE_DEVICES names none of its GPUs
        return nvml.reason
    if any(Path(device).exists() for device in GPU_DEVICE_FILES):
        return None
    return f"{nvml.reason}; no {' or '.join(GPU_DEVICE_FILES)}"


# What torch.compile needs of the machine beyond PyTorch: inductor's Triton kernels (GPU) are built with a C
# compiler (the CC variable, else gcc, else clang, as Triton looks for one) against the interpreter's Python.h.
TOOLCHAIN_PROBE = """
import json, os, shutil, sysconfig
cc = os.environ.get("CC")
found = shutil.which(cc) if cc else shutil.which("gcc") or shutil.which("clang")
header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
print(json.dumps({"cc": cc, "compiler": found, "header": header, "has_header": os.path.isfile(header)}))
"""
TOOLCHAIN_HELP = (
    "install them (Debian/Ubuntu: apt-get install gcc python3.X-dev; RHEL: dnf install gcc python3.X-devel; or "
    "load a compiler module), set CC to a C compiler, or leave compiler off for pytorch in the study"
)


def missing_toolchain(python: str, timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    """What `python`'s torch.compile lacks here, asked of that interpreter with this PATH: a C compiler, the Python
    headers; [] when it has both or cannot be asked (the probe of the framework reports that)."""
    try:
        result = subprocess.run(
            [python, "-c", TOOLCHAIN_PROBE], capture_output=True, text=True, timeout=timeout_s, check=True
        )
        found = json.loads(result.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return []
    missing = []
    if not found["compiler"]:
        what = f"CC={found['cc']}" if found["cc"] else "gcc or clang"
        missing.append(f"no C compiler ({what} not found on PATH)")
    if not found["has_header"]:
        missing.append(f"no Python headers ({found['header']} does not exist)")
    return missing
