"""The dlbench run log (harness/runlog.py writes it): one file, one run, one record.

Rules: JSON lines; the `header` line must be present (else the file is not a dlbench log); `summary` is the
run's outcome, missing when the run was interrupted (record status `error`). Throughput is the summary's,
samples of the measured steps / their wall time, and is re-derived from the `step` lines of the measured
phase: a summary that disagrees with its own steps by more than CONSISTENCY_TOLERANCE (relative) is an
`error` record. A log that cannot be read at all still gives a record from what its path says
(dlbench.identity), status `error`, naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import identity
from ..records import LogError, complete, model_inputs
from ..stats import steady_state

NAME = "dlbench"
# A summary whose throughput disagrees with its own step records by more than this is flagged.
CONSISTENCY_TOLERANCE = 1e-6
THROUGHPUT_DEFINITION = "samples of the measured steps / their wall time (dlbench)"


def _read_lines(path: Path) -> dict[str, Any]:
    header, environment, summary, measured = None, {}, None, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError as exc:
                raise LogError(f"{path}:{number}: not JSON ({exc})") from None
            kind = entry.get("type")
            if kind == "header":
                header = entry
            elif kind == "environment":
                environment = entry
            elif kind == "summary":
                summary = entry
            elif kind == "step" and entry.get("phase") == "measure":
                measured.append(entry["seconds"])
    if header is None:
        raise LogError(f"{path}: no header line (is this a dlbench run log?)")
    return {"header": header, "environment": environment, "summary": summary, "measured": measured}


def _warmup_and_steady(cfg: dict[str, Any], summary: dict[str, Any], measured: list[float],
                       ok: bool) -> dict[str, Any]:
    """Warm-up as run (the harness's choice with warmup_steps auto) and the steady-state check of the measured
    step times (dlbench.stats.steady_state), for the record."""
    warmup = summary.get("warmup") or {}
    auto = warmup.get("mode") == "auto" or cfg.get("warmup_steps") == "auto"
    steps = warmup.get("steps", cfg.get("warmup_steps"))
    fields = {"warmup_steps": steps if isinstance(steps, int) else None, "warmup_auto": auto,
              "warmup_stable": warmup.get("stable") if auto else None,
              "steady": None, "steady_statistic": None, "steady_p": None, "steady_drift": None,
              "warmup_like_steps": None}
    if ok and measured:
        check = steady_state(measured)
        fields |= {"steady": check.steady, "steady_statistic": check.statistic, "steady_p": check.p_value,
                   "steady_drift": check.drift, "warmup_like_steps": check.warmup_like_steps}
    return fields


def _config_from_path(path: Path, problem: Exception) -> dict[str, Any]:
    """What the path says when the log itself is unreadable (dlbench.identity.parse_run_log)."""
    try:
        cfg = identity.parse_run_log(path)
    except identity.IdentityError as error:
        raise LogError(f"{problem}; and {error}") from None
    return {**cfg, **model_inputs(cfg)}


def parse(path: str | Path, labels: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run log -> one validated record (labels: unused, a dlbench log says everything itself)."""
    path = Path(path)
    try:
        parts = _read_lines(path)
    except (OSError, LogError) as exc:
        cfg = _config_from_path(path, exc)
        record = {**cfg,
                  "devices": cfg["nodes"] * cfg["devices_per_node"], "status": "error",
                  "error": f"unreadable log: {exc}", "hosts": "", "source": "dlbench", "log_path": str(path)}
        return complete(record)
    header, env, summary = parts["header"], parts["environment"], parts["summary"]
    cfg = header["config"]
    if summary is None:
        summary = {"status": "error", "error": f"{path}: the log has no summary line (run interrupted?)"}
    devices = cfg["nodes"] * cfg["devices_per_node"]
    ok = summary.get("status") == "ok"
    error = summary.get("error", "")
    if ok and parts["measured"]:
        from_steps = summary["samples"] / sum(parts["measured"])
        if abs(from_steps - summary["throughput"]) > CONSISTENCY_TOLERANCE * from_steps:
            ok, error = False, (f"{path}: summary throughput {summary['throughput']:.6g} disagrees with "
                                f"its step records ({from_steps:.6g})")
    record = {
        "run_id": header["run_id"], "config_id": header["config_id"],
        "framework": cfg["framework"], "model": cfg["model"], "topology": cfg["topology"],
        "nodes": cfg["nodes"], "devices_per_node": cfg["devices_per_node"], "devices": devices,
        "batch_size": cfg["batch_size"], "global_batch_size": cfg["batch_size"] * devices,
        "precision": cfg["precision"], "compiler": cfg["compiler"], "data": cfg["data"],
        **model_inputs(cfg),
        "measured_steps": cfg.get("measured_steps"), **_warmup_and_steady(cfg, summary, parts["measured"], ok),
        "repeat": cfg["repeat"],
        "status": summary["status"] if summary["status"] != "ok" or ok else "error",
        "error": error,
        "throughput": summary.get("throughput") if ok else None,
        "unit": summary.get("unit"),
        "elapsed_s": summary.get("elapsed_s"), "samples": summary.get("samples"),
        "step_time_median_s": (summary.get("step_time_s") or {}).get("median"),
        "loss_final": summary.get("loss_final"), "world_size": summary.get("world_size"),
        "train_flops_per_sample": summary.get("train_flops_per_sample"),
        "achieved_tflops": summary.get("achieved_tflops") if ok else None,
        "hosts": ";".join(summary.get("hosts") or [header.get("hostname", "")]),
        "framework_version": env.get("framework_version"), "device_name": env.get("device_name"),
        "cpu_model": header.get("cpu_model"), "threads_per_rank": header.get("threads_per_rank"),
        "peak_memory_bytes": max((r.get("peak_memory_bytes") or 0 for r in summary.get("ranks", [])),
                                 default=None) or None,
        "git_commit": header.get("git_commit"),
        "slurm_job_id": (header.get("slurm") or {}).get("job_id"),
        "slurm_nodelist": (header.get("slurm") or {}).get("nodelist"),
        "slurm_partition": (header.get("slurm") or {}).get("partition"),
        "slurm_state": summary.get("slurm_state") or next(
            (s for s in reversed(summary.get("slurm_states") or []) if s), None),
        "attempts": summary.get("attempts") or header.get("attempt"),
        "started_at": header.get("started_at"), "finished_at": summary.get("finished_at"),
        "source": "dlbench", "log_path": str(path),
    }
    return complete(record)


def read_header(path: str | Path) -> dict[str, Any] | None:
    """The header and environment lines of a log (for the report's environment section)."""
    try:
        parts = _read_lines(Path(path))
    except (OSError, LogError):
        return None
    return {**parts["header"], "environment": parts["environment"]}
