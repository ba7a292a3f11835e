"""Run logs in the harness's format with chosen results: fixtures for tests and benchmarks.

Uses the harness's own line writer and header layout so the fixtures cannot drift from real logs.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..harness.runlog import LOG_SCHEMA_VERSION, append_line
from ..vocabulary import identity
from ..vocabulary.axes import DEFAULTS as AXIS_DEFAULTS
from ..vocabulary.identity import is_bert


def _write_header(path: Path, config_id: str, repeat: int, config: dict) -> None:
    """A fixture log, started afresh with its header line in the harness's layout, on a fixed test node."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    append_line(
        path,
        {
            "type": "header",
            "schema_version": LOG_SCHEMA_VERSION,
            "run_id": identity.run_id(config_id, repeat),
            "config_id": config_id,
            "config": config,
            "hostname": "node001",
            "python": "3.11.7",
            "cpu_model": "Test CPU",
            "machine": {"cpu_count": 64, "memory_bytes": 512 * 2**30, "os": "Test OS 1 (6.1)"},
            "threads_per_rank": 2,
            "git_commit": "0" * 40,
            "started_at": "2026-01-01T00:00:00Z",
            "slurm": None,
        },
    )


def write_run_log(
    path: Path,
    *,
    framework: str = "pytorch",
    model: str = "resnet50",
    topology: str = "1x1",
    batch_size: int = 32,
    precision: str = "fp32",
    compiler: bool = False,
    data: str = "synthetic",
    image_size: int = AXIS_DEFAULTS["image_size"],
    repeat: int = 1,
    throughput: float | None = 100.0,
    status: str = "ok",
    error: str = "",
    measured_steps: int = 10,
    warmup_steps: int = 2,
    seq_length: int = AXIS_DEFAULTS["seq_length"],
    optimizer: str = AXIS_DEFAULTS["optimizer"],
    grad_clip: bool = False,
    strategy: str = "auto",
    strategy_in_effect: str = "",
    node: str | None = None,
) -> Path:
    """A complete log whose measured steps give exactly `throughput` (None: no summary line); the environment line
    says `strategy_in_effect` as the backend's read-back summary (none: a run that failed before setup); `node`: a
    sweep's node, in the run's config id."""
    nodes, per_node = identity.parse_topology(topology)
    world = nodes * per_node
    bert = is_bert(model)
    config_id = identity.config_id(
        dict(
            model=model,
            framework=framework,
            topology=topology,
            batch_size=batch_size,
            precision=precision,
            compiler=compiler,
            data=data,
            image_size=image_size,
            seq_length=seq_length,
            optimizer=optimizer,
            grad_clip=grad_clip,
            strategy=strategy,
            node=node,
        )
    )
    config = {
        "framework": framework,
        "model": model,
        "nodes": nodes,
        "devices_per_node": per_node,
        "batch_size": batch_size,
        "precision": precision,
        "compiler": compiler,
        "data": data,
        "image_size": image_size,
        "warmup_steps": warmup_steps,
        "measured_steps": measured_steps,
        "repeat": repeat,
        "config_id": config_id,
        "topology": topology,
        "world_size": world,
        "seq_length": seq_length,
        "max_predictions": 0,
        "grad_clip": grad_clip,
        "optimizer": optimizer if bert else "auto",
        "strategy": strategy,
    }
    _write_header(path, config_id, repeat, config)
    append_line(
        path,
        {
            "type": "environment",
            "framework": framework,
            "framework_version": "1.0",
            "device_name": "Test GPU",
            "device_type": "cuda",
            "strategy": strategy,
            **({"strategy_in_effect": {"summary": strategy_in_effect}} if strategy_in_effect else {}),
        },
    )
    if throughput is None and status == "ok":
        return path  # an interrupted run: no summary
    samples = batch_size * world * measured_steps
    elapsed = samples / throughput if throughput else 1.0
    for step in range(warmup_steps):
        append_line(path, {"type": "step", "phase": "warmup", "step": step, "seconds": 0.5, "loss": 6.9})
    for step in range(measured_steps):
        append_line(path, {"type": "step", "phase": "measure", "step": step, "seconds": elapsed / measured_steps})
    if status == "ok":
        append_line(
            path,
            {
                "type": "summary",
                "status": "ok",
                "samples": samples,
                "elapsed_s": elapsed,
                "throughput": samples / elapsed,
                "unit": "sequences/s" if bert else "images/s",
                "world_size": world,
                "step_time_s": {"median": elapsed / measured_steps},
                "loss_final": 6.5,
                "ranks": [{"rank": r, "host": "node001", "peak_memory_bytes": 2**30} for r in range(world)],
                "hosts": ["node001"],
                "finished_at": "2026-01-01T00:01:00Z",
            },
        )
    else:
        append_line(path, {"type": "summary", "status": status, "error": error, "finished_at": "2026-01-01T00:01:00Z"})
    return path


def write_quality_log(
    path: Path,
    *,
    framework: str = "pytorch",
    model: str = "resnet_tiny",
    topology: str = "1x1",
    batch_size: int = 32,
    repeat: int = 1,
    target: float = 0.7,
    accuracies: tuple[float, ...] = (),
    eval_every_steps: int = 10,
    time_to_train_s: float = 60.0,
    start: float = 1.7e9,
) -> Path:
    """A complete time-to-quality log (harness/quality.py's lines): one evaluation per entry of `accuracies`, evenly
    spread over `time_to_train_s`; it converged when the last one reaches `target` (else it stopped at its budget)."""
    from ..harness import quality

    settings = quality.Settings(
        target=target, eval_every_steps=eval_every_steps, max_steps=eval_every_steps * max(1, len(accuracies))
    )
    nodes, per_node = identity.parse_topology(topology)
    world = nodes * per_node
    axes = dict(
        model=model,
        framework=framework,
        topology=topology,
        batch_size=batch_size,
        precision="fp32",
        compiler=False,
        data="real",
        image_size=32,
        metric=identity.TIME_TO_QUALITY,
        quality=vars(settings),
    )
    config_id = identity.config_id(axes)
    config = {
        "framework": framework,
        "model": model,
        "nodes": nodes,
        "devices_per_node": per_node,
        "batch_size": batch_size,
        "precision": "fp32",
        "compiler": False,
        "data": "real",
        "image_size": 32,
        "warmup_steps": 20,
        "measured_steps": 100,
        "repeat": repeat,
        "config_id": config_id,
        "seed": 0,
        "topology": topology,
        "world_size": world,
        "optimizer": "auto",
        "quality": json.dumps(vars(settings)),
    }
    _write_header(path, config_id, repeat, config)
    append_line(
        path,
        {
            "type": "environment",
            "framework": framework,
            "framework_version": "1.0",
            "device_name": "Test CPU",
            "device_type": "cpu",
        },
    )
    gbs, records = batch_size * world, 600
    init_stop = run_start = start + 5.0
    evals = len(accuracies)
    for i, accuracy in enumerate(accuracies, start=1):
        step = i * eval_every_steps
        at = run_start + time_to_train_s * i / evals
        append_line(
            path,
            {
                "type": "eval",
                "step": step,
                "samples": step * gbs,
                "epoch": step * gbs / records,
                "accuracy": accuracy,
                "correct": round(accuracy * 200),
                "count": 200,
                "loss": 1.0,
                "lr": 0.1,
                "time": at,
                "elapsed_s": at - run_start,
                "train_seconds": 0.8 * time_to_train_s / evals,
                "eval_seconds": 0.2 * time_to_train_s / evals,
            },
        )
    converged = bool(accuracies) and accuracies[-1] >= target
    steps = evals * eval_every_steps
    append_line(
        path,
        {
            "type": "summary",
            "status": "ok",
            "samples": steps * gbs,
            "elapsed_s": time_to_train_s,
            "throughput": steps * gbs / (0.8 * time_to_train_s),
            "unit": "images/s",
            "world_size": world,
            "loss_final": 1.0,
            "ranks": [{"rank": r, "host": "node001"} for r in range(world)],
            "hosts": ["node001"],
            "finished_at": "2026-01-01T00:01:00Z",
            "quality": {
                **vars(settings),
                "converged": converged,
                "stopped_by": "target" if converged else "max_steps",
                "steps": steps,
                "samples_to_converge": steps * gbs if converged else None,
                "time_to_train_s": time_to_train_s,
                "train_seconds": 0.8 * time_to_train_s,
                "eval_seconds": 0.2 * time_to_train_s,
                "evaluations": evals,
                "accuracy_final": accuracies[-1] if accuracies else None,
                "train_records": records,
                "eval_records": 200,
                "global_batch_size": gbs,
                "init_start": start,
                "init_stop": init_stop,
                "run_start": run_start,
                "run_stop": run_start + time_to_train_s,
            },
        },
    )
    return path
