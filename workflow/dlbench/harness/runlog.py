"""The dlbench run log: JSON lines written by the harness (standard library only).

One line per JSON object, each with a `type`:
  header       written by the supervisor before any rank starts: schema_version, run_id, config_id, config
               (the RunSpec's fields + topology, world_size), started_at, hostname, python, cpu_model, machine
               (logical CPUs, memory bytes, OS: the report's hardware line), cpus,
               cpu_shares, threads_per_rank, launcher, attempt, slurm (job id, node list, partition), git_commit,
               dlbench_version (the tool's version, dlbench.__version__)
  environment  rank 0 after setup: framework, framework_version, device names, threads, CUDA/cuDNN/NCCL, ...
  step         rank 0: phase (warmup | measure), step, seconds (a measured step: the gap between consecutive
               step ends, so they add up to the measured wall time), loss (warm-up steps)
  window       rank 0 after the measured steps: wall-clock (time.time()) warmup_start, warmup_end,
               measure_start, measure_end, so telemetry samples split into warm-up and measured windows
  eval         rank 0, time to quality only (harness/quality.py), one per evaluation: step, samples, epoch,
               accuracy (correct / count on the held-out split), loss, lr, time (wall clock at its end), elapsed_s
               (since run_start), train_seconds (the steps since the last evaluation), eval_seconds
  telemetry    the supervisor, from the sampler (dlbench.telemetry.sampler) once the ranks are done: kind start
               (host, interval, what is readable and why not, provenance), sample (counters and readings at t),
               end (the sampler's own CPU time); only with --telemetry-ms > 0
  summary      the last line, always: status (ok | oom | unsupported | error | timeout | failed), and for ok
               samples, elapsed_s, throughput, unit, world_size, step_time_s, loss_final, FLOPs, ranks, hosts;
               for a failure its error message (and SLURM state / attempts where the supervisor knows them); time to
               quality: `quality` (settings, converged, stopped_by, steps, samples_to_converge, time_to_train_s,
               train/eval seconds, init_start/stop and run_start/stop wall clock) and no step lines or window

Parsed back by dlbench.logformats.runlogs (core environment). Lines are appended and flushed one at a time,
so a crash later loses nothing already written.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

LOG_SCHEMA_VERSION = 1
LINE_TYPES = ("header", "environment", "step", "window", "eval", "telemetry", "summary")


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def partial_path(log: str | Path) -> Path:
    """Where a run's log is written until the run is complete (then renamed to `log`)."""
    return Path(log).with_name(Path(log).name + ".partial")


def append_line(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON line and flush it to disk (a crash later loses nothing written)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, separators=(",", ":")) + "\n")
        f.flush()


def failure_summary(status: str, message: str, **extra: object) -> dict[str, Any]:
    """The summary line of a run that did not complete."""
    return {"type": "summary", "status": status, "error": message, "finished_at": utc_now(), **extra}


TAIL_BLOCK = 1 << 16  # bytes read at a time from a log's end to find its last line


def last_line(path: str | Path) -> str | None:
    """The log's last line, read from its end (a log is read whole only to parse it), or None when it has none
    or cannot be read. Every Snakemake start asks this of every run log (dlbench.plan.problems)."""
    try:
        with open(path, "rb") as f:
            position = f.seek(0, os.SEEK_END)
            tail = b""
            # Until the tail holds a line break before its last line (or is the whole file).
            while position > 0 and b"\n" not in tail.rstrip(b"\n"):
                step = min(TAIL_BLOCK, position)
                position -= step
                f.seek(position)
                tail = f.read(step) + tail
    except OSError:
        return None
    stripped = tail.rstrip(b"\r\n")  # only the last line is decoded: the tail may hold a long run of telemetry
    line = stripped[stripped.rfind(b"\n") + 1 :].rstrip(b"\r")
    return line.decode("utf-8", errors="replace") if stripped else None


def last_line_type(path: str | Path) -> str | None:
    """`type` of the log's last line, or None (no line, or not a JSON object: cut or damaged)."""
    line = last_line(path)
    try:
        entry = json.loads(line) if line is not None else None
    except ValueError:
        return None
    return entry.get("type") if isinstance(entry, dict) else None


MEASURED_STEP = b'"phase":"measure"'  # a measured step's line, as append_line spells it
WINDOW = b'{"type":"window"'  # the line rank 0 writes right after its measured steps, before any telemetry


def _head(path: str | Path) -> bytes:
    """The log up to its window line (its header, environment and steps; the whole log where it has none): what
    a completeness check reads, never the telemetry lines after it (the bulk of a long run's log)."""
    head = b""
    with open(path, "rb") as f:
        while chunk := f.read(TAIL_BLOCK):
            head += chunk
            if (at := head.find(WINDOW)) >= 0:
                return head[:at]
    return head


def incomplete(path: str | Path) -> str | None:
    """Why a finished run log is not whole, or None: it opens with its header, ends with its summary, and an ok
    summary of the harness's own ranks follows as many measured steps as its header's config asks for (a
    runner's run and a time-to-quality run log no step lines): a summary alone, valid JSON, is not a run. Every
    Snakemake start asks this of every run log: it reads the log's head up to its window line and its last line."""
    try:
        head = _head(path)
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    last = _object((last_line(path) or "").encode())
    if last.get("type") != "summary":
        return "its last line is not a readable summary"
    first = _object(head.split(b"\n", 1)[0])
    if first.get("type") != "header":
        return "its first line is not its header"
    config = first["config"] if isinstance(first.get("config"), dict) else {}
    if last.get("status") == "ok" and not config.get("runner") and not config.get("quality"):
        steps, expected = head.count(MEASURED_STEP), config.get("measured_steps")
        if steps != expected:
            return f"its ok summary follows {steps} measured step lines where its header asks for {expected}"
    return None


def _object(line: bytes) -> dict[str, Any]:
    """A log line's JSON object ({} for anything else)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}
