"""Offline framework environments: the package list of `envs/<name>.yaml` built as a uv virtualenv.

On clusters the same YAML file is a conda environment (`snakemake --sdm conda`). Where no conda
channel can be reached, the workflow builds it here instead, under `<venv_dir>/<name>-<spec hash>/`:
a changed spec gets a new directory, so the rules that use it run again.

Runs in the core environment (not inside a framework environment).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

# Bump when the way environments are built changes, so every environment is rebuilt.
BUILDER_VERSION = "2"
MARKER = "dlbench-env.json"  # the build rule's output: the environment is complete
COMPLETE = ".dlbench-env-complete.json"  # the same facts, which no rule names (Snakemake never removes it)


class EnvSpecError(ValueError):
    """An environment file that cannot be built offline."""


def spec_hash(spec_path: Path) -> str:
    """Content hash of an environment file: the environment's identity."""
    status = os.stat(spec_path)
    return _content_hash(str(spec_path), status.st_mtime_ns, status.st_size)


@functools.lru_cache(maxsize=64)
def _content_hash(spec_path: str, mtime_ns: int, size: int) -> str:
    """Keyed by the file's modification time and size too, so an edited file is hashed again: a study asks
    once per run job, thousands of times in one Snakemake start."""
    digest = hashlib.sha256(BUILDER_VERSION.encode() + b"\0" + Path(spec_path).read_bytes())
    return digest.hexdigest()[:12]


def env_prefix(venv_dir: Path, spec_path: Path) -> Path:
    return Path(venv_dir) / f"{Path(spec_path).stem}-{spec_hash(spec_path)}"


def read_spec(spec_path: Path) -> tuple[str, list[str]]:
    """(python version, pip requirements) of a conda environment file, for an offline build.

    An optional top-level `dlbench_offline: {replace: {requirement: offline requirement}}` swaps a
    cluster package for its offline equivalent (e.g. a CUDA build for the CPU build); conda ignores
    the key (with a warning).
    """
    spec = yaml.safe_load(Path(spec_path).read_text())
    replace = (spec.get("dlbench_offline") or {}).get("replace") or {}
    python: str | None = None
    requirements: list[str] = []
    for dep in spec.get("dependencies", []):
        if isinstance(dep, dict) and "pip" in dep:
            requirements.extend(str(r) for r in dep["pip"])
        elif isinstance(dep, str) and dep.split("=")[0].strip() == "python":
            python = dep.split("=", 1)[1].lstrip("=").strip()
        elif isinstance(dep, str) and dep.strip() == "pip":
            continue
        else:
            raise EnvSpecError(
                f"{spec_path}: conda package {dep!r} has no offline equivalent; "
                "list framework packages under 'pip:' so the same file builds with uv"
            )
    if python is None:
        raise EnvSpecError(f"{spec_path}: no 'python=X.Y' dependency")
    if not requirements:
        raise EnvSpecError(f"{spec_path}: no packages under 'pip:'")
    unknown = sorted(set(replace) - set(requirements))
    if unknown:
        raise EnvSpecError(f"{spec_path}: dlbench_offline.replace names {unknown}, not in the pip list")
    return python, [replace.get(r, r) for r in requirements]


def pip_find_links() -> list[str]:
    """The find-links locations of pip's own configuration (files and PIP_FIND_LINKS)."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    links: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.split(".")[-1] == "find-links":
            for link in value.strip().strip("'\"").split():
                if link not in links:
                    links.append(link)
    return links


def resolve_find_links(setting: str | list[str] | None) -> list[str]:
    """config `software.find_links`: "pip" (pip's configuration), a list of locations, or none."""
    if setting == "pip":
        return pip_find_links()
    if not setting:
        return []
    return [setting] if isinstance(setting, str) else list(setting)


NO_UV = (
    "uv is not installed (a core environment set up from a lean wheelhouse leaves it out: envs/core.yaml marks it "
    "optional), so the workflow cannot build its own framework environments: give the study's interpreter for each "
    "framework (software.python) or install uv into the core environment (bootstrap.sh with a wheelhouse that holds "
    "it, or online)"
)


def uv_command() -> str:
    """uv: the one on PATH, else the core environment's."""
    return shutil.which("uv") or str(Path(sys.executable).parent / "uv")


def have_uv() -> bool:
    return Path(uv_command()).is_file()


def base_python(spec_path: Path, venv_dir: Path) -> str | None:
    """The Python the runs of `spec_path`'s environment use: the built environment's, else the interpreter uv
    would build it from (its `python` version, no download); None when there is none here."""
    built = env_prefix(venv_dir, spec_path) / "bin" / "python"
    if built.exists():
        return str(built)
    version, _ = read_spec(spec_path)
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")
    try:
        found = subprocess.run(
            [uv_command(), "python", "find", version], capture_output=True, text=True, env=env, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return shutil.which(f"python{version}")
    if found.returncode != 0 or not found.stdout.strip():
        return shutil.which(f"python{version}")
    return found.stdout.strip()


def build(spec_path: Path, prefix: Path, find_links: list[str]) -> dict:
    """Build the environment into `prefix` (atomically: a half-built env is never used)."""
    python, requirements = read_spec(spec_path)
    if not have_uv():
        raise SystemExit(f"dlbench.venvs: cannot build {prefix.name}: {NO_UV}")
    uv = uv_command()
    tmp = prefix.with_name(prefix.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    # Offline: use an installed interpreter. Byte-compile at install: where PYTHONDONTWRITEBYTECODE is set
    # (CI images, some clusters) every run would otherwise recompile torch/TensorFlow (import 4.5 s -> 2.3 s).
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", UV_COMPILE_BYTECODE="1")
    started = time.time()
    subprocess.run([uv, "venv", "--quiet", "--python", python, str(tmp)], check=True, env=env)
    cmd = [uv, "pip", "install", "--python", str(tmp / "bin" / "python"), *requirements]
    for link in find_links:
        cmd += ["--find-links", link]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)
    freeze = subprocess.run(
        [uv, "pip", "freeze", "--python", str(tmp / "bin" / "python")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.split()
    marker = {
        "spec": str(spec_path),
        "spec_hash": spec_hash(spec_path),
        "python": python,
        "requirements": requirements,
        "find_links": find_links,
        "packages": freeze,
        "build_seconds": round(time.time() - started, 1),
    }
    (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    shutil.copyfile(tmp / MARKER, tmp / COMPLETE)
    # Relocating a venv breaks its scripts' shebangs but not `bin/python -m ...`, which is all we use.
    shutil.rmtree(prefix, ignore_errors=True)
    os.rename(tmp, prefix)
    return marker


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dlbench.venvs", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the environment of a spec file")
    b.add_argument("--spec", type=Path, required=True)
    b.add_argument("--venv-dir", type=Path, required=True)
    b.add_argument("--find-links", default="pip", help="'pip', 'none' or comma-separated locations")
    args = parser.parse_args(argv)
    prefix = env_prefix(args.venv_dir, args.spec)
    setting = None if args.find_links == "none" else ("pip" if args.find_links == "pip" else args.find_links.split(","))
    with build_lock(prefix):
        if (prefix / COMPLETE).exists() and not (prefix / MARKER).exists():
            # Snakemake removes a job's output before running it: another study sharing this venv_dir may have
            # removed the marker of an environment whose runs are under way. Complete is complete: keep it.
            shutil.copyfile(prefix / COMPLETE, prefix / MARKER)
        if (prefix / MARKER).exists():
            print(f"{prefix} is up to date")
            return
        marker = build(args.spec, prefix, resolve_find_links(setting))
    print(f"built {prefix} in {marker['build_seconds']} s ({len(marker['packages'])} packages)")


@contextlib.contextmanager
def build_lock(prefix: Path) -> Iterator[None]:
    """Hold `<venv_dir>/.<env>.lock` exclusively: studies (and test workers) sharing a venv_dir build an
    environment once. Without it a second builder removes the first one's half-built directory, or the
    environment under runs that already use it, when it renames its own copy into place."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.with_name(f".{prefix.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when this process is killed
        yield


if __name__ == "__main__":
    main()
