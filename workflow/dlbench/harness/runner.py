"""Runners: an external benchmark command (an official script) run as a framework of the study (stdlib only).

The supervisor (`python -m dlbench.harness`) runs a runner instead of our ranks when the run spec carries one.
Everything else stays as for our harness: the header, the time limit, signals, the attempts notes, and a
summary line that always ends the log. What the command measured is read later, in the core environment, by
the parser of the runner's log format (dlbench.logformats): the summary names that log (`external_log`).

A runner definition (the study's `runners:` entry, as JSON):
    command    the argv template: a list (or one string, split like a shell would, never run by one). Each
               item is formatted with the run's values ({batch_size}, {global_batch_size}, {devices},
               {devices_per_node}, {nodes}, {warmup_steps}, {measured_steps}, {steps}, {image_size},
               {seq_length}, {max_predictions}, {data_dir}, {seed}, {precision}, {model}, {repeat},
               {run_dir}, {python}, {workdir}); an item that is exactly {precision_args}, {compiler_args},
               {data_args}, {optimizer_args}, {grad_clip_args} or {device_args} becomes the list `flags` gives
               for the run's value (zero or more arguments).
    flags      {precision: {fp32: [...], amp: [...]}, compiler: {nocompile: [...], compile: [...]},
               data: {synthetic: [...], real: [...]}, device: {cuda: [...], cpu: [...]}, and for BERT
               optimizer: {adam: [...], lamb: [...]}, grad_clip: {noclip: [...], clip: [...]}}. A value the
               runner has no flags for is `unsupported` (an axis without flags supports only fp32 / nocompile /
               synthetic / adam / noclip; without device flags, any device). The run's device is the study's
               platform.device, `auto` read as cuda where nvidia-smi sees a GPU, else cpu.
    unsupported  {<axis>: {<value>: why}}: the reason an `unsupported` record gives for a value the runner has
               no flags for (e.g. {device: {cpu: "main.py hard-wires CUDA"}}).
    fixed_inputs {image_size: N} / {seq_length: N}: the model input a command without that placeholder always
               trains at. A run whose command (with its flag groups) has no {image_size} (ResNet models) or
               {seq_length} (BERT models) is `unsupported` unless its value is the fixed one: a record never
               carries a size the command did not use.
    models     the models the command trains (others are `unsupported`).
    launcher   none (the command starts its own processes), torchrun (several nodes: one torchrun per node,
               started by srun), mpirun or srun.
    format     the log format of what it writes (dlbench.logformats), read from `log`.
    log        stdout (its standard output and error, saved as <run_dir>/output.log) or a path template.
    workdir    the directory it runs in ({workdir}); default: the run's directory.
    oom_markers  extra text that marks an out-of-memory failure in its output.
Values are substituted into single arguments, never through a shell, so no configuration value is executed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..vocabulary.identity import compiler_part, takes_sequences
from . import lifeline, nospace, sysinfo
from .spec import RunSpec, Unsupported, is_bert

LAUNCHERS = ("none", "torchrun", "mpirun", "srun")
# Axes a runner expresses through flags, and the value a runner without flags for that axis stands for
# (None: every value, with no arguments).
AXIS_DEFAULTS: dict[str, str | None] = {
    "precision": "fp32",
    "compiler": "nocompile",
    "data": "synthetic",
    "optimizer": "adam",
    "grad_clip": "noclip",
    "device": None,
}
BERT_AXES = ("optimizer", "grad_clip")
# Text of the frameworks' and allocators' out-of-memory failures (CUDA, cuDNN, TensorFlow, MXNet, the host).
OOM_MARKERS = (
    "out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "ResourceExhaustedError",
    "OOM when allocating",
    "Cannot allocate memory",
    "std::bad_alloc",
    "MemoryError",
)
# A Python traceback's first line; the exception it ends with is the first line after it that is not indented.
TRACEBACK = "Traceback (most recent call last):"
# Exceptions a launcher raises about its workers: they say that a worker failed, not why.
LAUNCHER_EXCEPTIONS = ("ChildFailedError",)
# What a launcher prefixes to its workers' lines (torchrun's `[rank0]: `, `[default0]:`, mpirun's `[1,0]<stderr>:`).
LINE_PREFIX = re.compile(r"^\[[\w,.-]+\](?:<std(?:out|err)>)?: ?")
# A line that says what failed, when there is no traceback (argparse, TensorFlow's C++ log, a fatal signal).
FAILURE_LINE = re.compile(
    r"\berror: |\b\w*Error\b|\bERROR\b|\bF\d{4} |\bFATAL\b|Check failed|Segmentation fault|Aborted|\bfailed\b",
)
# Lines of a launcher's failure report that match FAILURE_LINE but name no cause (torchrun's footer, mpirun's).
LAUNCHER_NOISE = re.compile(
    r"^\s*(error_file|traceback)\s*:|FAILED$|^Root Cause|^Failures:|mpirun (detected|noticed)|^Primary job|"
    + "|".join(LAUNCHER_EXCEPTIONS)
)
OUTPUT_NAME = "output.log"
# Why a runner's run has no telemetry (its record's `telemetry`): telemetry is summarised over the measured
# window, which only dlbench's own ranks report; a runner's script times its steps inside itself.
NO_TELEMETRY = "a runner's script times its own measured steps; dlbench does not see its window to sample over"
PLACEHOLDERS = (
    "batch_size",
    "global_batch_size",
    "devices",
    "devices_per_node",
    "nodes",
    "warmup_steps",
    "measured_steps",
    "steps",
    "image_size",
    "seq_length",
    "max_predictions",
    "data_dir",
    "seed",
    "precision",
    "model",
    "repeat",
    "run_dir",
    "python",
    "workdir",
)
FLAG_GROUPS = tuple(f"{axis}_args" for axis in AXIS_DEFAULTS)


class CannotStart(Exception):
    """The command could not be started (no such file, not executable, no such working directory): the run's
    `error` record, its message naming the file, why, and the study key to fix."""


def placeholders(item: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(item) if field is not None}


def load(text: str) -> dict[str, Any]:
    definition = json.loads(text)
    command = definition["command"]
    definition["command"] = shlex.split(command) if isinstance(command, str) else list(command)
    return definition


def run_dir(log: Path) -> Path:
    """Where a runner's own files go: beside the run log, <log stem>.runner/."""
    return log.with_name(log.name.removesuffix(".jsonl") + ".runner")


def device(spec: RunSpec) -> str:
    """The device the run trains on: the study's, `auto` read as cuda where nvidia-smi sees a GPU, else cpu."""
    if spec.device != "auto":
        return spec.device
    return "cuda" if sysinfo.gpus_hidden() is None and sysinfo.nvidia_driver() else "cpu"


def axis_values(spec: RunSpec) -> dict[str, str]:
    """The run's value of every axis a runner expresses by flags (BERT's optimizer and clipping for BERT only)."""
    values = {
        "precision": spec.precision,
        "compiler": compiler_part(spec.compiler_mode or spec.compiler),
        "data": spec.data,
        "device": device(spec),
    }
    if is_bert(spec.model):
        values |= {"optimizer": spec.optimizer_name, "grad_clip": "clip" if spec.grad_clip else "noclip"}
    return values


def values(spec: RunSpec, definition: dict[str, Any], directory: Path) -> dict[str, str]:
    """The placeholders of a command template for this run."""
    if not isinstance(spec.warmup_steps, int):  # {steps} and the runner's own step count need a number
        raise Unsupported(
            f"runner {spec.framework} runs a fixed number of warm-up steps: warmup_steps {spec.warmup_steps} "
            "(until the step times settle) is for dlbench's own harness"
        )
    world = spec.world_size
    found = {
        k: str(v)
        for k, v in {
            "batch_size": spec.batch_size,
            "global_batch_size": spec.batch_size * world,
            "devices": world,
            "devices_per_node": spec.devices_per_node,
            "nodes": spec.nodes,
            "warmup_steps": spec.warmup_steps,
            "measured_steps": spec.measured_steps,
            "steps": spec.warmup_steps + spec.measured_steps,
            "image_size": spec.image_size,
            "seq_length": spec.seq_length,
            "max_predictions": spec.predictions,
            "data_dir": os.path.abspath(spec.data_dir) if spec.data_dir else "",
            "seed": spec.seed,
            "precision": spec.precision,
            "model": spec.model,
            "repeat": spec.repeat,
            "run_dir": directory.resolve(),
            "python": sys.executable,
            "workdir": definition.get("workdir") or directory.resolve(),
        }.items()
    }
    assert tuple(found) == PLACEHOLDERS, "PLACEHOLDERS documents every value"
    return found


def _format(item: str, known: dict[str, str], name: str) -> str:
    unknown = sorted(placeholders(item) - set(known))
    if unknown:
        raise Unsupported(
            f"runner {name}: unknown placeholder {{{unknown[0]}}} in {item!r} (known: {', '.join(sorted(known))})"
        )
    return item.format_map(known)


def _why(definition: dict[str, Any], axis: str, value: str) -> str:
    reason = definition.get("unsupported", {}).get(axis, {}).get(value)
    return f": {reason}" if reason else ""


def input_axis(spec: RunSpec) -> tuple[str, int]:
    """The model input a runner must honour: (image_size, its value) for ResNet models, seq_length for BERT and
    Llama."""
    return ("seq_length", spec.seq_length) if takes_sequences(spec.model) else ("image_size", spec.image_size)


def render(spec: RunSpec, definition: dict[str, Any], directory: Path) -> list[str]:
    """The command's argv for this run; Unsupported when the runner cannot express the run."""
    name = spec.framework
    if spec.model not in definition.get("models", []):
        raise Unsupported(
            f"runner {name} does not train {spec.model} (it trains: "
            f"{', '.join(definition.get('models', [])) or 'nothing declared'})"
        )
    flags = definition.get("flags", {})
    expanded: dict[str, list[str]] = {}
    for axis, value in axis_values(spec).items():
        choices = flags.get(axis)
        if choices is None:
            if AXIS_DEFAULTS[axis] is not None and value != AXIS_DEFAULTS[axis]:
                raise Unsupported(
                    f"runner {name} has no flags for {axis} {value} (only {AXIS_DEFAULTS[axis]})"
                    + _why(definition, axis, value)
                )
            expanded[f"{axis}_args"] = []
        elif value not in choices:
            raise Unsupported(
                f"runner {name} cannot express {axis} {value} (it has: {', '.join(choices)})"
                + _why(definition, axis, value)
            )
        else:
            expanded[f"{axis}_args"] = list(choices[value])
    for axis in BERT_AXES:
        expanded.setdefault(f"{axis}_args", [])
    items: list[str] = []
    for item in definition["command"]:
        group = item.strip("{}") if item.startswith("{") and item.endswith("}") else None
        items += expanded[group] if group in expanded else [item]
    size_axis, size = input_axis(spec)
    if not any(size_axis in placeholders(item) for item in items):
        fixed = definition.get("fixed_inputs", {}).get(size_axis)
        if fixed is None:
            raise Unsupported(
                f"runner {name} cannot honour {size_axis} {size}: its command has no {{{size_axis}}} for this run "
                f"and the definition does not say which {size_axis} the script trains at "
                f"(fixed_inputs: {{{size_axis}: N}})"
            )
        if fixed != size:
            raise Unsupported(
                f"runner {name} trains at {size_axis} {fixed} only (its command has no flag for {size_axis}); "
                f"this run asks for {size}"
            )
    known = values(spec, definition, directory)
    return [_format(item, known, name) for item in items]


def launch(spec: RunSpec, definition: dict[str, Any], argv: list[str], in_slurm: bool) -> list[str]:
    """The argv with the runner's launcher in front (one process per device, or the command's own)."""
    launcher = definition.get("launcher", "none")
    if spec.nodes > 1 and not in_slurm:
        raise Unsupported(
            f"topology {spec.topology} spans {spec.nodes} nodes: multi-node runs need a SLURM "
            "allocation (snakemake --profile slurm)"
        )
    if launcher == "none":
        return argv
    if launcher == "torchrun":
        torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={spec.devices_per_node}"]
        if spec.nodes == 1:
            return [*torchrun, "--standalone", *argv]
        # One torchrun per node (srun starts them), meeting at the allocation's first node.
        endpoint = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '29400')}"
        return [
            "srun",
            f"--nodes={spec.nodes}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
            *torchrun,
            f"--nnodes={spec.nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            *argv,
        ]
    if launcher == "mpirun":
        return ["mpirun", "-np", str(spec.world_size), *argv]
    if launcher == "srun":
        if not in_slurm:
            raise Unsupported("runner launcher srun needs a SLURM allocation (snakemake --profile slurm)")
        return [
            "srun",
            f"--nodes={spec.nodes}",
            f"--ntasks={spec.world_size}",
            f"--ntasks-per-node={spec.devices_per_node}",
            "--kill-on-bad-exit=1",
            *argv,
        ]
    raise Unsupported(f"runner launcher {launcher!r} is not one of {', '.join(LAUNCHERS)}")


def start(spec: RunSpec, definition: dict[str, Any], directory: Path, threads: int) -> subprocess.Popen:
    """Start the command in its own process group, its output to <run_dir>/output.log; CannotStart when it cannot."""
    command = render(spec, definition, directory)
    argv = launch(spec, definition, command, "SLURM_JOB_ID" in os.environ)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "command.json").write_text(json.dumps(argv) + "\n")
    print("[dlbench] runner: " + shlex.join(argv), file=sys.stderr)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    output = open(directory / OUTPUT_NAME, "wb")  # noqa: SIM115 - the child writes it; closed by our exit
    cwd = str(definition.get("workdir") or directory)
    try:
        # Dies with the supervisor (SIGTERM: a launcher such as torchrun or mpirun stops its workers first).
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lifeline.die_with_parent(signal.SIGTERM),
        )
    except OSError as error:
        output.close()
        if nospace.is_no_space(error):
            raise
        what = str(error.filename or argv[0])  # the program, or the working directory
        launcher = argv[0] if len(argv) > len(command) else None  # the launcher's program, in front of the command
        reason = error.strerror or str(error)
        raise CannotStart(cannot_start(spec.framework, definition, what, reason, cwd, launcher)) from None


def cannot_start(name: str, definition: dict[str, Any], what: str, reason: str, cwd: str, launcher: str | None) -> str:
    """The record's words when `what` (a program or the working directory) could not be started in, and what to
    change: the working directory, the launcher or the command."""
    why = f"runner {name} cannot start {what}: {reason}"
    if what == cwd:
        return f"{why}; runners.{name}.workdir must be an existing directory on the node that runs it"
    if what == launcher:
        return f"{why}; runners.{name}.launcher {definition['launcher']} needs {launcher} on PATH where the run starts"
    return (
        f"{why}; runners.{name}.command must start with an executable file (a path, or a name on PATH): for a "
        "script without its executable bit or a #! line, put {python} (or another interpreter) first"
    )


def external_log(spec: RunSpec, definition: dict[str, Any], directory: Path) -> Path:
    where = definition.get("log", "stdout")
    if where == "stdout":
        return directory / OUTPUT_NAME
    path = Path(_format(where, values(spec, definition, directory), spec.framework))
    return path if path.is_absolute() else Path(definition.get("workdir") or directory, path)


def outcome(spec: RunSpec, definition: dict[str, Any], directory: Path, returncode: int) -> dict[str, Any]:
    """The summary fields of a finished command: ok with the log to parse, or oom/error with its reason."""
    text = (directory / OUTPUT_NAME).read_text(encoding="utf-8", errors="replace")
    log = external_log(spec, definition, directory)
    if returncode == 0:
        if not log.exists():
            return {"status": "error", "error": f"runner {spec.framework} exited 0 but wrote no log at {log}"}
        return {
            "status": "ok",
            "external_log": str(log),
            "external_format": definition["format"],
            "runner": spec.framework,
        }
    markers = (*OOM_MARKERS, *definition.get("oom_markers", []))
    found = next((m for m in markers if m.lower() in text.lower()), None)
    how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with code {returncode}"
    lines = [LINE_PREFIX.sub("", line).rstrip() for line in text.splitlines()]
    tail = " | ".join(line.strip() for line in lines[-3:] if line.strip())[-300:]
    if found:
        said = next(line.strip() for line in lines if found.lower() in line.lower())[:500]
        return {"status": "oom", "error": f"runner {spec.framework} {how}; its output says {found!r}: {said}"}
    cause = failure_cause(lines)
    if cause is None or cause in tail:
        return {"status": "error", "error": f"runner {spec.framework} {how}: {tail}"}
    return {"status": "error", "error": f"runner {spec.framework} {how}: {cause} (last lines: {tail})"}


def failure_cause(lines: list[str]) -> str | None:
    """The line of a failed command's output that says what failed: the exception ending its first traceback
    that is not a launcher's report about its workers; without one, the first line that reads as a failure and
    is not part of a launcher's report; None when no line does."""
    for i, line in enumerate(lines):
        if line.strip() != TRACEBACK:
            continue
        raised = next((later for later in lines[i + 1 :] if later.strip() and not later[0].isspace()), None)
        if raised and raised != TRACEBACK and not any(name in raised for name in LAUNCHER_EXCEPTIONS):
            return raised.strip()[:500]
    found = next((line for line in lines if FAILURE_LINE.search(line) and not LAUNCHER_NOISE.search(line)), None)
    return found.strip()[:500] if found else None
