"""tf_cnn_benchmarks output (tensorflow/benchmarks scripts/tf_cnn_benchmarks, benchmark_cnn.py; printed to stdout).

Lines read (a launcher's rank prefix such as `[1,0]<stdout>:` may precede any; other ranks' lines skipped):
    header   `TensorFlow:  <major.minor>`, `Model:       <name>`, `Dataset:     <name>[ (synthetic)]`,
             `Mode:        <mode>`, `Batch size:  <B> global` then `             <b> per device`,
             `Num batches: <N>`, `Devices:     [<device>, ...]`, `Data format: <fmt>`, `Optimizer:   <opt>`,
             `Variables:   <variable_update>`, `AllReduce:   <spec>`
    steps    `<step>\\timages/sec: <X> +/- <Y> (jitter = <Z>)\\t<loss>[\\t<top1>\\t<top5>]` (every display_every
             steps after the warm-up; `images/sec: <X>` alone when a scale applies). X is batch / mean step
             time so far (a running figure for one worker: batch x its local devices), Y = std(step speeds)/sqrt(n),
             Z = 1.4826 x their median absolute deviation.
    total    `total images/sec: <T>` = workers x steps x batch / wall time of the measured loop: dlbench's own
             definition, so throughput = throughput_reported = T. Not printed in train_and_eval mode.
The last step line's X, Y, Z go to details (images_per_sec, uncertainty, jitter); series() returns every step
line. Steps without the total line: `error` record naming the last step line (interrupted or truncated); a
step line that does not parse: `error` naming its line.

Model names are tf_cnn_benchmarks' own, except resnet50_v1.5 -> resnet50 (dlbench's ResNet-50 is v1.5) and
resnet50 -> resnet50_v1 (tf_cnn_benchmarks' resnet50 is v1, not comparable). Devices = the Devices list's
length (horovod lists every worker). Precision (use_fp16) and XLA are not printed: labels say them. The
variable_update is part of the variant (parameter_server and replicated are different configurations).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from ..collect.records import LogError
from .common import check_labels, error_record, external_record, rank0_text, repeat_from_name

NAME = "tf_cnn_benchmarks"
THROUGHPUT_DEFINITION = (
    "total images/sec: images of the measured steps, all workers / the loop's wall time "
    "(the script's own final figure; = dlbench's definition)"
)
OPTIONS: frozenset[str] = frozenset()
MODELS = {"resnet50_v1.5": "resnet50", "resnet50": "resnet50_v1"}

_HEADER = re.compile(
    r"(TensorFlow|Model|Dataset|Mode|Batch size|Num batches|Devices|Data format|Optimizer|"
    r"Variables|AllReduce):\s+(.*?)\s*$"
)
_PER_DEVICE = re.compile(r"^\s+(\d+) per device\s*$")
_STEP = re.compile(r"^(\d+)\timages/sec: ([0-9.]+)(?: \+/- ([0-9.]+) \(jitter = ([0-9.]+)\))?(?:\t|$)")
_TOTAL = re.compile(r"total images/sec: ([0-9.]+)")


class Step(NamedTuple):
    step: int
    images_per_sec: float
    uncertainty: float | None
    jitter: float | None
    lineno: int


def read_output(path: Path) -> tuple[dict[str, str], list[Step], float | None, int]:
    """(header fields, step lines, total images/sec or None, last line number)."""
    header: dict[str, str] = {}
    steps: list[Step] = []
    total, lineno = None, 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, start=1):
            line = rank0_text(raw.rstrip("\n"))
            if line is None:
                continue
            if "images/sec" in line:
                if match := _TOTAL.search(line):
                    total = float(match.group(1))
                    continue
                match = _STEP.match(line)
                if not match:
                    if re.match(r"^\d+\timages/sec", line):
                        raise LogError(f"{path}:{lineno}: unreadable step line {line[:80]!r}")
                    continue
                step, mean, plus, jitter = match.groups()
                steps.append(
                    Step(
                        int(step),
                        float(mean),
                        None if plus is None else float(plus),
                        None if jitter is None else float(jitter),
                        lineno,
                    )
                )
            elif (match := _HEADER.match(line)) and match.group(1) not in header:
                header[match.group(1)] = match.group(2)
            elif (match := _PER_DEVICE.match(line)) and "Batch size" in header:
                header.setdefault("per device", match.group(1))
    return header, steps, total, lineno


def series(path: str | Path) -> list[Step]:
    """The step lines (running images/sec of one worker, uncertainty, jitter)."""
    return read_output(Path(path))[1]


def _axes(header: dict[str, str]) -> dict[str, Any]:
    try:
        devices = len(ast.literal_eval(header["Devices"])) if "Devices" in header else None
    except (ValueError, SyntaxError):
        devices = None
    model = header.get("Model")
    dataset = header.get("Dataset", "")
    per_device = header.get("per device")
    return {
        "model": MODELS.get(model, model) if model else None,
        "devices": devices or None,
        "batch_size": int(per_device) if per_device else None,
        "data": ("synthetic" if dataset.endswith("(synthetic)") else "real") if dataset else None,
        "global_batch_size": int(header["Batch size"].split()[0]) if "Batch size" in header else None,
        "framework": "tensorflow",
        "framework_version": header.get("TensorFlow"),
        "measured_steps": int(header["Num batches"]) if "Num batches" in header else None,
    }


def parse(path: str | Path, labels: dict[str, Any] | None = None) -> dict[str, Any]:
    """One tf_cnn_benchmarks output -> one record (labels: those of dlbench.logformats.common)."""
    path, labels = Path(path), labels or {}
    check_labels(labels, OPTIONS, NAME)
    read: dict[str, Any] = {"repeat": repeat_from_name(path)}
    extra: list[str] = []
    try:
        header, steps, total, last = read_output(path)
        read |= _axes(header)
        extra = [header["Variables"]] if "Variables" in header else []
        if total is None:
            where = f"{path}:{steps[-1].lineno if steps else last}"
            raise LogError(
                f"{where}: no 'total images/sec' line"
                + (
                    f" after step {steps[-1].step} (run interrupted or log truncated?)"
                    if steps
                    else " (not tf_cnn_benchmarks output, or a train_and_eval run)"
                )
            )
    except LogError as exc:
        return error_record(
            NAME, path, str(exc), labels, read=read, definition=THROUGHPUT_DEFINITION, variant_extra=extra
        )
    except OSError as exc:
        return error_record(
            NAME, path, f"{path}: unreadable log ({exc})", labels, read=read, definition=THROUGHPUT_DEFINITION
        )
    last_step = steps[-1] if steps else None
    details = {
        "variable_update": header.get("Variables"),
        "mode": header.get("Mode"),
        "dataset": header.get("Dataset"),
        "data_format": header.get("Data format"),
        "optimizer": header.get("Optimizer"),
        "all_reduce": header.get("AllReduce"),
        "global_batch_size": header.get("Batch size"),
        **(
            {
                "images_per_sec": last_step.images_per_sec,
                "uncertainty": last_step.uncertainty,
                "jitter": last_step.jitter,
                "last_step": last_step.step,
            }
            if last_step
            else {}
        ),
    }
    read |= {
        "status": "ok",
        "throughput": total,
        "unit": "images/s",
        "throughput_reported": total,
        "throughput_reported_key": "total images/sec",
        "details": json.dumps(details),
    }
    return external_record(NAME, path, read, labels, definition=THROUGHPUT_DEFINITION, variant_extra=extra)
