"""A benchmark's results file, `benchmarks/results/<script-stem>[-<variant>].json` (standard library only: the
scripts run inside framework environments). `figures.py` renders every such file into the docs.

Keys: script, command (the exact command line to reproduce it), date (UTC ISO), machine (CPU model, cores, memory,
GPU or none), load (1-min load average [before, after]), tables ([{"title", "columns", "rows"}]), notes ([str]).

    record = Recorder("frameworks.py")        # first thing in main(): the load before
    ... measure ...
    record.write([table(...)], notes=[...], variant="pytorch")
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = Path(os.environ.get("DLBENCH_BENCH_RESULTS") or HERE / "results")  # elsewhere: tests only
if str(REPO / "workflow") not in sys.path:
    sys.path.append(str(REPO / "workflow"))
from dlbench.harness import sysinfo  # noqa: E402 - the CPU as every run log names it (standard library only)


def load1() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def slug(text: str) -> str:
    """A file-name part for free text (a CPU model): lower case, runs of other characters as one `-`."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _proc(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def gpus() -> list[str]:
    """The GPUs nvidia-smi lists (empty without one)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def machine() -> dict:
    """What the figures were measured on: CPU (model, family, vector instructions), cores usable, memory, GPU (or
    none)."""
    memory = _proc("/proc/meminfo", "MemTotal")
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    found = gpus()
    return {
        "cpu": sysinfo.cpu_model(),
        "cores": cores,
        "memory_gib": round(int(memory.split()[0]) / 2**20, 1) if memory else None,
        "gpu": ", ".join(found) if found else "none",
    }


def _portable(path: str) -> str:
    """An interpreter path as a reader types it: relative to the checkout, any environment hash as a glob."""
    try:
        rel = Path(path).relative_to(REPO).as_posix()
    except ValueError:
        return path
    return re.sub(r"^\.venvs/([A-Za-z0-9_]+)-[0-9a-f]+/", r".venvs/\1-*/", rel)


def command() -> str:
    """This process's command line, to be run from the repository root (PYTHONPATH=workflow where it was set)."""
    script = Path(sys.argv[0]).resolve()
    try:
        script_text = script.relative_to(REPO).as_posix()
    except ValueError:
        script_text = sys.argv[0]
    prefix = "PYTHONPATH=workflow " if "workflow" in os.environ.get("PYTHONPATH", "") else ""
    # sys.executable is the environment's own link; .venv's resolves to a system python otherwise
    exe = _portable(os.path.abspath(sys.executable))
    return f"{prefix}{exe} {shlex.join([script_text, *sys.argv[1:]])}"  # the glob unquoted: the shell expands it


def table(title: str, columns: list[str], rows: list[list]) -> dict:
    return {"title": title, "columns": list(columns), "rows": [list(r) for r in rows]}


class Recorder:
    """Notes the load when made; write() adds everything else and writes the file."""

    def __init__(self, script: str) -> None:
        self.script = Path(script).name
        self.load_before = load1()

    def path(self, variant: str | None = None) -> Path:
        stem = Path(self.script).stem + (f"-{variant}" if variant else "")
        return RESULTS / f"{stem}.json"

    def write(self, tables: list[dict], notes: list[str] = (), variant: str | None = None) -> Path:
        result = {
            "script": self.script,
            "command": command(),
            "date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
            "machine": machine(),
            "load": [self.load_before, load1()],
            "tables": tables,
            "notes": list(notes),
        }
        path = self.path(variant)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"results: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
        return path
