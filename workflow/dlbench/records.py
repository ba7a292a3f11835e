"""Parse a run log into one validated record (core environment).

A log that cannot be read still gives a record (status `error`, the message names the file and the
line): failures are data and never silently dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from . import identity
from .harness.spec import default_max_predictions
from .identity import is_bert

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "record.schema.yaml"
FIELDS: list[str] = list(yaml.safe_load(SCHEMA_PATH.read_text())["properties"])
_VALIDATOR = jsonschema.Draft202012Validator(yaml.safe_load(SCHEMA_PATH.read_text()))
# A summary whose throughput disagrees with its own step records by more than this is flagged.
CONSISTENCY_TOLERANCE = 1e-6


class LogError(ValueError):
    """A log that does not follow the dlbench log format."""


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


def model_inputs(cfg: dict[str, Any]) -> dict[str, Any]:
    """The input shape and training settings that identify a configuration besides its axes: image size for
    ResNet-50; sequence length, masked positions, optimizer and clipping for BERT (None where n/a)."""
    if not is_bert(cfg["model"]):
        return {"image_size": cfg.get("image_size"), "seq_length": None, "max_predictions": None,
                "optimizer": None, "grad_clip": None}
    seq_length = cfg.get("seq_length") or 128
    optimizer = cfg.get("optimizer") or "adam"
    return {"image_size": None, "seq_length": seq_length,
            "max_predictions": cfg.get("max_predictions") or default_max_predictions(seq_length),
            "optimizer": "adam" if optimizer == "auto" else optimizer, "grad_clip": bool(cfg.get("grad_clip"))}


def _config_from_path(path: Path) -> dict[str, Any]:
    """What the path says when the log itself is unreadable (dlbench.identity.parse_run_log)."""
    cfg = identity.parse_run_log(path)
    return {**cfg, **model_inputs(cfg)}


def parse_run_log(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        parts = _read_lines(path)
    except (OSError, LogError) as exc:
        cfg = _config_from_path(path)
        record = {**cfg,
                  "devices": cfg["nodes"] * cfg["devices_per_node"], "status": "error",
                  "error": f"unreadable log: {exc}", "hosts": "", "source": "dlbench", "log_path": str(path)}
        return _complete(record)
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
        "warmup_steps": cfg.get("warmup_steps"), "measured_steps": cfg.get("measured_steps"),
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
    return _complete(record)


def _complete(record: dict[str, Any]) -> dict[str, Any]:
    """Every field present (None when unknown), validated against the record schema."""
    record = {name: record.get(name) for name in FIELDS}
    record["error"] = record["error"] or ""
    record["hosts"] = record["hosts"] or ""
    errors = sorted(_VALIDATOR.iter_errors(record), key=str)
    if errors:
        raise LogError(f"{record['log_path']}: record does not match the record schema: {errors[0].message}")
    return record


def read_header(path: str | Path) -> dict[str, Any] | None:
    """The header and environment lines of a log (for the report's environment section)."""
    try:
        parts = _read_lines(Path(path))
    except (OSError, LogError):
        return None
    return {**parts["header"], "environment": parts["environment"]}
