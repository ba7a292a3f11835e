"""Logs in the external formats' shapes, with chosen results: fixtures for tests and benchmarks (not a format).

MLPerf logs go through the real mlperf_logging.mllog package, so they cannot drift from what submitters'
code writes. DLLogger, tf_cnn_benchmarks and DLPerf lines follow the line formats their modules document
(dllogger has no usable PyPI package). Nothing here copies another project's logs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants as K
from mlperf_logging.mllog import mllog

START_MS = 1_700_000_000_000
_STAMP = datetime(2023, 8, 4, 5, 50, 0, tzinfo=UTC)


def write_mllog(
    path: Path,
    *,
    benchmark: str = "resnet",
    ttt_min: float = 30.0,
    status: str | None = K.SUCCESS,
    eval_accuracy: Sequence[Any] = (0.5, 0.76),
    epoch_throughput: Sequence[float] = (),
    global_batch_size: int = 256,
    local_batch_size: int | None = None,
    org: str = "dlbench",
    platform: str = "1xTest",
    division: str = "closed",
    availability: str = "onprem",
    weights_lines: int = 0,
    start_ms: int = START_MS,
    stop: bool = True,
) -> Path:
    """One MLLOG run log written by mlperf_logging's MLLogger: submission keys, init, run_start, epochs with
    eval_accuracy (and tracked_stats throughput when given), run_stop with `status` after ttt_min minutes
    (status None: run_stop without one; stop False: no run_stop, as in a truncated log)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"dlbench.synthetic.mllog.{path}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path, mode="w")
    logger.addHandler(handler)
    try:
        log = mllog.MLLogger(logger=logger)
        t = start_ms
        for key, value in (
            (K.SUBMISSION_BENCHMARK, benchmark),
            (K.SUBMISSION_ORG, org),
            (K.SUBMISSION_DIVISION, division),
            (K.SUBMISSION_STATUS, availability),
            (K.SUBMISSION_PLATFORM, platform),
        ):
            log.event(key, value, time_ms=t)
        log.start(K.INIT_START, time_ms=t)
        log.event(K.GLOBAL_BATCH_SIZE, global_batch_size, time_ms=t)
        if local_batch_size:
            log.event("local_batch_size", local_batch_size, time_ms=t)
        for i in range(weights_lines):
            log.event(K.WEIGHTS_INITIALIZATION, metadata={"tensor": f"module.layer{i}.weight"}, time_ms=t)
        log.end(K.INIT_STOP, time_ms=t + 1000)
        start = t + 1000
        log.start(K.RUN_START, time_ms=start)
        epochs = max(len(eval_accuracy), len(epoch_throughput))
        step = ttt_min * 60_000 / max(epochs, 1)
        for epoch in range(epochs):
            at = int(start + step * epoch)
            log.start(K.EPOCH_START, epoch, metadata={K.EPOCH_NUM: epoch}, time_ms=at)
            log.end(K.EPOCH_STOP, epoch, metadata={K.EPOCH_NUM: epoch}, time_ms=int(at + step * 0.9))
            if epoch < len(epoch_throughput):
                log.event(
                    "tracked_stats",
                    {"throughput": epoch_throughput[epoch]},
                    metadata={"step": epoch + 1},
                    time_ms=int(at + step * 0.9),
                )
            if epoch < len(eval_accuracy):
                log.event(
                    K.EVAL_ACCURACY,
                    eval_accuracy[epoch],
                    metadata={K.EPOCH_NUM: epoch + 1},
                    time_ms=int(at + step * 0.95),
                )
        if stop:
            metadata = {K.STATUS: status} if status else None
            log.end(K.RUN_STOP, metadata=metadata, time_ms=int(start + ttt_min * 60_000))
    finally:
        logger.removeHandler(handler)
        handler.close()
    return path


def _dll_text(when: datetime, step: str, data: dict[str, Any], units: dict[str, str]) -> str:
    pairs = " ".join(f"{k} : {v} {units.get(k, '')}" for k, v in data.items())
    return f"DLL {when.strftime('%Y-%m-%d %H:%M:%S.%f')} - {step} {pairs}"


def _dll_json(when: datetime, step: Any, data: dict[str, Any]) -> str:
    return "DLLL " + json.dumps(
        {
            "timestamp": str(when.timestamp()),
            "datetime": str(when),
            "elapsedtime": "0.0",
            "type": "LOG",
            "step": step,
            "data": data,
        }
    )


# Per script: step shape (text, JSON), summary step, per-step and summary keys, unit, parameters logged.
# script -> (step text, summary step text, per-step key or None, summary key, unit, PARAMETER fields)
SCRIPTS: dict[str, tuple[str, str, str | None, str, str, dict[str, Any]]] = {
    "pytorch_convnets": (
        "Epoch: {e} Iteration: {i}",
        "Summary:",
        "train.total_ips",
        "train.total_ips",
        "images/s",
        {"arch": "resnet50", "batch_size": 256, "amp": True, "world_size": 8},
    ),
    "tf_convnets": (
        "({e}, {i})",
        "()",
        "total_ips",
        "train_throughput",
        "images/s",
        {"arch": "resnet50", "batch_size": 256, "amp": True},
    ),
    "pytorch_bert": (
        "Training Epoch: {e} Training Iteration: {i}",
        "",
        None,
        "training_sequences_per_second",
        "sequences/s",
        {"batch_size_per_gpu": 128},
    ),
    "tf_bert": ("Iteration: {i}", "", "throughput_train", "throughput_train", "sequences/s", {}),
    "mxnet_convnets": (
        "Epoch: {e} Iteration: {i}",
        "Summary:",
        "train.ips",
        "train.ips",
        "images/s",
        {
            "arch": "resnetv15",
            "num_layers": 50,
            "batch_size": 2048,
            "gpus": [0, 1, 2, 3, 4, 5, 6, 7],
            "dtype": "float16",
        },
    ),
}


EPOCH_SUMMARIES = ("pytorch_convnets", "mxnet_convnets")  # scripts that log a per-epoch figure


def write_dllogger(
    path: Path,
    *,
    script: str = "pytorch_convnets",
    values: Sequence[float] = (100.0,) * 10,
    summary: float | None = 100.0,
    backend: str = "text",
    prefix: str = "",
    epochs: int = 1,
    banner: int = 2,
    seconds_per_step: float = 0.25,
) -> Path:
    """A DLLogger log of one of DeepLearningExamples' scripts (SCRIPTS): PARAMETER line, `values` as per-step
    throughput spread over `epochs` (with per-epoch means where the script logs them), the summary (None: a
    run cut off before it). `prefix` goes before every line (e.g. `[1,0]<stdout>:`)."""
    step_fmt, summary_step, step_key, summary_key, unit, params = SCRIPTS[script]
    units = {step_key: unit, summary_key: unit, "loss": "None"} if step_key else {summary_key: unit}
    lines = [f"banner line {i} of other output" for i in range(banner)]
    when = _STAMP

    def emit(step_text: str, step_json: Any, data: dict[str, Any]) -> None:
        lines.append(_dll_json(when, step_json, data) if backend == "json" else _dll_text(when, step_text, data, units))

    emit("PARAMETER", "PARAMETER", params)
    per_epoch = max(1, len(values) // epochs)
    for index, value in enumerate(values):
        epoch, iteration = divmod(index, per_epoch)
        when += timedelta(seconds=seconds_per_step)
        data = {"loss": 6.5, step_key: value} if step_key else {"average_loss": 6.5}
        emit(
            step_fmt.format(e=epoch, i=iteration + 1),
            [epoch, iteration + 1] if "{e}" in step_fmt else [iteration + 1],
            data,
        )
        if script in EPOCH_SUMMARIES and iteration + 1 == per_epoch:
            chunk = values[epoch * per_epoch : (epoch + 1) * per_epoch]
            emit(f"Epoch: {epoch}", [epoch], {summary_key: sum(chunk) / len(chunk)})
    if summary is not None:
        emit(summary_step, [], {summary_key: summary})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{prefix}{line}\n" for line in lines))
    return path


def write_tf_cnn(
    path: Path,
    *,
    model: str = "resnet50_v1.5",
    batch_per_device: int = 64,
    devices: int = 2,
    variable_update: str = "replicated",
    steps: Sequence[tuple[int, float, float, float]] = ((1, 100.0, 0.0, 0.0), (10, 110.0, 1.0, 2.0)),
    total: float | None = 220.0,
    synthetic: bool = True,
    prefix: str = "",
) -> Path:
    """tf_cnn_benchmarks' stdout: header, step lines (step, images/sec, +/-, jitter), total images/sec."""
    device_list = [f"/gpu:{i}" for i in range(devices)]
    lines = [
        "TensorFlow:  1.15",
        f"Model:       {model}",
        f"Dataset:     imagenet{' (synthetic)' if synthetic else ''}",
        "Mode:        training",
        "SingleSess:  False",
        f"Batch size:  {batch_per_device * devices} global",
        f"             {batch_per_device} per device",
        "Num batches: 100",
        "Num epochs:  0.01",
        f"Devices:     {device_list}",
        "NUMA bind:   False",
        "Data format: NCHW",
        "Optimizer:   sgd",
        f"Variables:   {variable_update}",
        "==========",
        "Generating training model",
        "Running warm up",
        "Done warm up",
        "Step\tImg/sec\ttotal_loss",
    ]
    lines += [f"{s}\timages/sec: {x:.1f} +/- {y:.1f} (jitter = {z:.1f})\t7.890" for s, x, y, z in steps]
    if total is not None:
        lines += ["-" * 64, f"total images/sec: {total:.2f}", "-" * 64]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{prefix}{line}\n" for line in lines))
    return path


def write_oneflow(
    path: Path,
    *,
    times: dict[int, float],
    batch_per_device: int | None = 128,
    gpus: int | None = None,
    nodes: int | None = None,
    bert: bool = False,
) -> Path:
    """A OneFlow benchmark log as DLPerf's OneFlow extract scripts read it: `key = value` header lines and a
    `train: epoch 0, iter I, ...` (`step: I, ...` for BERT) line per iteration ending in its unix time."""
    lines = [
        f"{k} = {v}"
        for k, v in (
            ("model", "bert" if bert else "resnet50"),
            ("batch_size_per_device", batch_per_device),
            ("gpu_num_per_node", gpus),
            ("num_nodes", nodes),
        )
        if v is not None
    ]
    for iteration, at in sorted(times.items()):
        lines.append(
            f"step: {iteration}, total_loss: 9.7, mlm_loss: 8.9, nsp_loss: 0.8, throughput: 55.0 {at}"
            if bert
            else f"train: epoch 0, iter {iteration}, loss: 7.0, top_1: 0.0, top_k: 0.0, samples/s: 3988.8 {at}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))
    return path
