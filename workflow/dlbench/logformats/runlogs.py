"""The dlbench run log (harness/runlog.py writes it): one file, one run, one record.

Rules: JSON lines; the `header` line must be present (else the file is not a dlbench log); `summary` is the
run's outcome, missing when the run was interrupted (record status `error`). Throughput is the summary's,
samples of the measured steps / their wall time, and is re-derived from the `step` lines of the measured
phase: a summary that disagrees with its own steps by more than CONSISTENCY_TOLERANCE (relative) is an
`error` record. A log that cannot be read at all still gives a record from what its path says
(dlbench.vocabulary.identity), status `error`, naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..collect.records import LogError, complete, model_inputs
from ..collect.stats import steady_state
from ..telemetry import summary as telemetry_summary
from ..vocabulary import devices, identity
from ..vocabulary.axes import DEFAULT_BUILD
from . import external
from .common import AXIS_LABELS
from .mlperf import BENCHMARKS

NAME = "dlbench"
# A summary whose throughput disagrees with its own step records by more than this is flagged.
CONSISTENCY_TOLERANCE = 1e-6
THROUGHPUT_DEFINITION = "samples of the measured steps / their wall time (dlbench)"


_DECODER = json.JSONDecoder()  # json.loads' own


def _json_line(line: str) -> Any:
    """json.loads(line), about twice as fast for the harness's own lines: a JSON value from the line's first
    character to its end (or its newline) is decoded where it starts, as json.loads does (raw_decode); any other
    line goes to json.loads, which returns the same value or raises its own error."""
    try:
        value, end = _DECODER.raw_decode(line)
    except ValueError:
        return json.loads(line)
    return value if line[end:] in ("", "\n") else json.loads(line)


def _read_lines(path: Path) -> dict[str, Any]:
    header, environment, summary, measured, window, telemetry, evals = None, {}, None, [], None, [], []
    with open(path, "rb") as f:  # bytes: a damaged line names its number instead of failing to decode the file
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                entry = _json_line(raw.decode("utf-8"))
            except ValueError as exc:  # UnicodeDecodeError is a ValueError
                raise LogError(f"{path}:{number}: not JSON ({exc})") from None
            kind = entry.get("type")
            if kind == "step":  # nearly every line: tested first
                if entry.get("phase") == "measure":
                    measured.append(entry["seconds"])
            elif kind == "header":
                header = entry
            elif kind == "environment":
                environment = entry
            elif kind == "summary":
                summary = entry
            elif kind == "window":
                window = entry
            elif kind == "telemetry":
                telemetry.append(entry)
            elif kind == "eval":
                evals.append(entry)
    if header is None:
        raise LogError(f"{path}: no header line (is this a dlbench run log?)")
    return {
        "header": header,
        "environment": environment,
        "summary": summary,
        "measured": measured,
        "window": window,
        "telemetry": telemetry,
        "evals": evals,
    }


def _warmup_and_steady(cfg: dict[str, Any], summary: dict[str, Any], measured: list[float], ok: bool) -> dict[str, Any]:
    """Warm-up as run (the harness's choice with warmup_steps auto) and the steady-state check of the measured
    step times (dlbench.collect.stats.steady_state), for the record."""
    warmup = summary.get("warmup") or {}
    auto = warmup.get("mode") == "auto" or cfg.get("warmup_steps") == "auto"
    steps = warmup.get("steps", cfg.get("warmup_steps"))
    fields = {
        "warmup_steps": steps if isinstance(steps, int) else None,
        "warmup_auto": auto,
        "warmup_stable": warmup.get("stable") if auto else None,
        "steady": None,
        "steady_statistic": None,
        "steady_p": None,
        "steady_drift": None,
        "warmup_like_steps": None,
    }
    if ok and measured:
        check = steady_state(measured)
        fields |= {
            "steady": check.steady,
            "steady_statistic": check.statistic,
            "steady_p": check.p_value,
            "steady_drift": check.drift,
            "warmup_like_steps": check.warmup_like_steps,
        }
    return fields


def _placed(path: Path, problem: Exception, labels: dict[str, Any]) -> dict[str, Any]:
    """Where an unreadable log belongs: what its path says (results/runs/...), else what its labels say."""
    try:
        cfg = identity.parse_run_log(path)
    except identity.IdentityError:
        try:
            cfg = identity.from_labels(labels)
        except identity.IdentityError as error:
            raise LogError(f"{problem}; {error}") from None
    if isinstance(cfg.get("compiler"), str):  # a torch.compile mode: the record's compiler is on, with that mode
        cfg = {**cfg, "compiler": True, "compiler_mode": cfg["compiler"]}
    return {**cfg, **model_inputs(cfg)}  # strategy too: the path's variant says it


def parse(path: str | Path, labels: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run log -> one validated record. A readable log says everything itself; labels only place an unreadable
    one that is not under results/runs/ (an import)."""
    path = Path(path)
    try:
        parts = _read_lines(path)
    except (OSError, LogError) as exc:
        cfg = _placed(path, exc, labels or {})
        record = {
            **cfg,
            "devices": cfg["nodes"] * cfg["devices_per_node"],
            "status": "error",
            "error": f"unreadable log: {exc}",
            "hosts": "",
            "source": "dlbench",
            "log_path": str(path),
        }
        return complete(record)
    header, env, summary = parts["header"], parts["environment"], parts["summary"]
    cfg = header["config"]
    if summary is not None and summary.get("external_log"):
        return runner_record(path, header, summary, parts["telemetry"])
    if summary is None:
        summary = {"status": "error", "error": f"{path}: the log has no summary line (run interrupted?)"}
    ok = summary.get("status") == "ok"
    error = summary.get("error", "")
    if ok and parts["measured"]:
        from_steps = summary["samples"] / sum(parts["measured"])
        if abs(from_steps - summary["throughput"]) > CONSISTENCY_TOLERANCE * from_steps:
            ok, error = (
                False,
                (
                    f"{path}: summary throughput {summary['throughput']:.6g} disagrees with "
                    f"its step records ({from_steps:.6g})"
                ),
            )
    record = {
        **run_fields(path, header, summary),
        **_warmup_and_steady(cfg, summary, parts["measured"], ok),
        "status": summary["status"] if summary["status"] != "ok" or ok else "error",
        "error": error,
        "throughput": summary.get("throughput") if ok else None,
        "sequences_per_s": summary.get("sequences_per_s") if ok else None,
        "unit": summary.get("unit"),
        "elapsed_s": summary.get("elapsed_s"),
        "samples": summary.get("samples"),
        "step_time_median_s": (summary.get("step_time_s") or {}).get("median"),
        "loss_final": summary.get("loss_final"),
        "world_size": summary.get("world_size"),
        "train_flops_per_sample": summary.get("train_flops_per_sample"),
        "achieved_tflops": summary.get("achieved_tflops") if ok else None,
        "framework_version": env.get("framework_version"),
        "device_name": env.get("device_name"),
        "math_dtype": devices.run_math(cfg["precision"], env),  # the peak MFU is held to (dlbench.vocabulary.devices)
        "interpreter": env.get("interpreter"),
        **{f"{lib}_version": None if env.get(lib) is None else str(env[lib]) for lib in ("cuda", "cudnn", "nccl")},
        "strategy_in_effect": (env.get("strategy_in_effect") or {}).get("summary"),
        "peak_memory_bytes": max((r.get("peak_memory_bytes") or 0 for r in summary.get("ranks", [])), default=None)
        or None,
        "vm_peak_bytes": max(
            (r.get("vm_peak_bytes") or 0 for r in summary.get("ranks", [summary.get("memory") or {}])), default=None
        )
        or None,
        "memory_limit_gb": cfg.get("memory_limit_gb") or None,
        "slurm_state": summary.get("slurm_state")
        or next((s for s in reversed(summary.get("slurm_states") or []) if s), None),
        "rank_hosts": ",".join(r.get("host", "") for r in sorted(summary.get("ranks", []), key=lambda r: r["rank"]))
        or None,
        "lost_nodes": ";".join(f"{n['node']} ({n['state']})" for n in summary.get("lost_nodes", [])) or None,
        # A runner's run that ended before its tool wrote a log still belongs to that tool's column.
        "source": json.loads(cfg["runner"])["format"] if cfg.get("runner") else NAME,
        "throughput_definition": THROUGHPUT_DEFINITION,
        **telemetry_summary.summarise(parts["telemetry"], parts["window"], summary.get("samples") if ok else None),
    }
    if cfg.get("quality"):
        record |= quality_fields(cfg, summary, parts["evals"], ok)
    return complete(record)


def quality_fields(
    cfg: dict[str, Any], summary: dict[str, Any], evals: list[dict[str, Any]], ok: bool
) -> dict[str, Any]:
    """A time-to-quality run (harness/quality.py): time to train = run_stop - run_start (evaluation included), as
    MLPerf's; a run that ended at its budget without reaching the target is `failed` (MLPerf: aborted), and its
    time stays recorded. Its `throughput` (the steps' own rate between evaluations) stays in `details`: the
    metric is the time. One run set per configuration (the repeats), scored by logformats.mlperf.score_records."""
    settings = json.loads(cfg["quality"])
    quality = summary.get("quality") or {}
    fields: dict[str, Any] = {
        "metric": identity.TIME_TO_QUALITY,
        "target_accuracy": settings["target"],
        "benchmark": BENCHMARKS.get(cfg["model"]),
        "run_set": cfg["config_id"],
        "throughput": None,
        "achieved_tflops": None,
        "warmup_steps": None,
        "measured_steps": None,  # no timed window: trained to a target
        "eval_curve": json.dumps([[e["elapsed_s"], e["samples"], e["accuracy"]] for e in evals]),
        "eval_accuracy": evals[-1]["accuracy"] if evals else None,
    }
    if not (ok and quality):
        return fields
    fields |= {
        "time_to_train_min": quality["time_to_train_s"] / 60,
        "converged": quality["converged"],
        "samples_to_converge": quality["samples_to_converge"],
        "eval_seconds": quality["eval_seconds"],
        "global_batch_size": quality["global_batch_size"],
        "details": json.dumps(
            {
                "throughput_between_evals": summary.get("throughput"),
                "stopped_by": quality["stopped_by"],
                "steps": quality["steps"],
            }
        ),
    }
    if not quality["converged"]:
        best = max((e["accuracy"] for e in evals), default=None)
        fields |= {
            "status": "failed",
            "error": f"did not converge: accuracy {quality['accuracy_final']} (best "
            f"{best}) below the target {settings['target']} at the budget ({quality['stopped_by']}, "
            f"{quality['steps']} steps)",
        }
    return fields


def sweep_node(config_id: str) -> str | None:
    """A sweep's node, the part of the run's config id that names it (None: not a sweep's, or not dlbench's id)."""
    try:
        return identity.parse_config_id(config_id).get("node")
    except identity.IdentityError:
        return None


def run_fields(path: Path, header: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """What a run's header (and summary) say about the run, whatever measured it: identity, axes, provenance.
    For a runner's run they win over what its own log says."""
    cfg = header["config"]
    devices = cfg["nodes"] * cfg["devices_per_node"]
    slurm = header.get("slurm") or {}
    return {
        "run_id": header["run_id"],
        "config_id": header["config_id"],
        "framework": cfg["framework"],
        "model": cfg["model"],
        "topology": cfg["topology"],
        "nodes": cfg["nodes"],
        "devices_per_node": cfg["devices_per_node"],
        "devices": devices,
        "batch_size": cfg["batch_size"],
        "global_batch_size": cfg["batch_size"] * devices,
        "precision": cfg["precision"],
        "compiler": cfg["compiler"],
        "compiler_mode": cfg.get("compiler_mode") or None,
        "data": cfg["data"],
        **model_inputs(cfg),
        "strategy": cfg.get("strategy", identity.DEFAULT_STRATEGY),  # logs from before the axis: auto
        "build": cfg.get("build", DEFAULT_BUILD),  # logs from before the axis: the study's one build
        "node": sweep_node(header["config_id"]),
        "warmup_steps": cfg.get("warmup_steps"),
        "measured_steps": cfg.get("measured_steps"),
        "repeat": cfg["repeat"],
        "hosts": ";".join(summary.get("hosts") or [header.get("hostname", "")]),
        "cpu_model": header.get("cpu_model"),
        "threads_per_rank": header.get("threads_per_rank"),
        "git_commit": header.get("git_commit"),
        "dlbench_version": header.get("dlbench_version"),
        "slurm_job_id": slurm.get("job_id"),
        "slurm_nodelist": slurm.get("nodelist"),
        "slurm_partition": slurm.get("partition"),
        "attempts": summary.get("attempts") or header.get("attempt"),
        "started_at": header.get("started_at"),
        "finished_at": summary.get("finished_at"),
        "log_path": str(path),
    }


def runner_record(
    path: Path, header: dict[str, Any], summary: dict[str, Any], telemetry: list[dict[str, Any]]
) -> dict[str, Any]:
    """A runner's run (harness/runner.py): the measurement comes from its own log, read by its format's
    parser with the run's axes as labels; the run's identity and provenance come from our header. Its
    `elapsed_s` is the command's wall time from start to exit (our summary's: startup included, as the script's
    own timed window is not visible); a figure its log gives for its timed steps stays in `details`
    (`log_elapsed_s`). `telemetry` says why there is none (harness/runner.py, NO_TELEMETRY)."""
    cfg = header["config"]
    definition = json.loads(cfg.get("runner") or "{}")
    fields = {
        **run_fields(path, header, summary),
        "elapsed_s": summary.get("elapsed_s"),
        **telemetry_summary.summarise(telemetry, None, None),
    }
    labels = {
        **definition.get("labels", {}),
        **{k: v for k, v in fields.items() if k in AXIS_LABELS},
        "run_set": header["config_id"],
    }  # a runner's repeats of one configuration are one set (MLPerf)
    try:
        fmt = summary["external_format"]
        parser = parse if fmt == NAME else external.get(fmt).parse
        record = parser(Path(summary["external_log"]), labels)
    except (OSError, LogError) as exc:
        return complete(
            {
                **fields,
                "status": "error",
                "error": f"runner log unreadable: {exc}",
                "source": summary["external_format"],
            }
        )
    if record.get("elapsed_s") is not None:
        details = json.loads(record.get("details") or "{}")
        record["details"] = json.dumps({**details, "log_elapsed_s": record["elapsed_s"]})
    return complete({**record, **fields, "external_log": summary["external_log"]})


def read_run(path: str | Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    """(header, environment, summary or None, eval lines) of a run log (LogError for one that cannot be read)."""
    parts = _read_lines(Path(path))
    return parts["header"], parts["environment"], parts["summary"], parts["evals"]


def read_header(path: str | Path) -> dict[str, Any] | None:
    """The header and environment lines of a log (for the report's environment section)."""
    try:
        parts = _read_lines(Path(path))
    except (OSError, LogError):
        return None
    return {**parts["header"], "environment": parts["environment"]}
