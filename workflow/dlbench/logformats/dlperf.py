"""DLPerf log trees (Oneflow-Inc/DLPerf): one file per run, laid out as
`[...]/<framework>/[<model>/][bz<B> | <B>/]<nodes>n<gpus>g/<model>_b<B>_<precision>_<repeat>.log` (or `r<N>.log`).

DLPerf's rule (OneFlow/*/extract_util.py compute_throughput): throughput = batch per device x devices x
(end_iter - start_iter) / (t_end - t_start), the times being those logged at the two iterations; default
window 20..120 (the 20 warm-up steps skipped, the next 100 timed), 19..119 for OneFlow BERT's 0-based
`step:` lines (extract_bert_result.py's defaults); labels start_iter / end_iter change it. Both iterations
must be in the log (DLPerf asserts it): else an `error` record naming the file and its last line. The median
over repeats and the speedup over 1n1g happen in aggregation, as in DLPerf's extract_result.

Line shapes timed (those DLPerf's extract scripts read):
    `train: epoch <E>, iter <I>, ..., <unix time>`   OneFlow CNNs (extract_cnn_result.py): last token = time
    `step: <I>, ..., <unix time>`                    OneFlow BERT (extract_bert_result.py)
    DLLogger text/JSON records with an iteration     NVIDIA DLE PyTorch/TF scripts (extract_*_logs_time.py):
                                                     iteration = the step's last number, time = the record's
                                                     stamp; the first epoch's lines; DLPerf's scripts count
                                                     lines instead (after iteration 5 for PyTorch), the
                                                     iteration numbers here are those logged
    `Epoch: [<E>][<I>/<N>]\\tTime <s> (...)`          pytorch/examples (PyTorch/resnet50v1.5): t_end - t_start
                                                     = the Time of iterations start+1..end added up
Not read: TF2 models' TimeHistory lines, MXNet's `Epoch[0] Batch [..]` speedometer lines, PaddlePaddle and
MindSpore logs (an `error` record says so).

Axes: nodes and GPUs per node from the `<n>n<g>g` directory (any number of digits, unlike DLPerf's
`int(run_case[0])`), batch per device from `_b<B>_` in the file name, a `bz<B>`/`bs<B>`/`<B>` directory or
OneFlow's `batch_size_per_device = <B>` header, precision from the file name (fp16/amp -> amp) or
`use_fp16 = True`, the framework from the nearest directory above that is neither a batch size nor a model.
Labels win over all of them.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from ..collect.records import LogError
from . import dllogger
from .common import check_labels, error_record, external_record, repeat_from_name, resolve

NAME = "dlperf"
THROUGHPUT_DEFINITION = (
    "DLPerf's: batch per device x devices x (end_iter - start_iter) / (time at end_iter - "
    "time at start_iter), iterations 20..120 by default (= samples / time)"
)
OPTIONS = frozenset({"start_iter", "end_iter"})
WINDOW = (20, 120)
BERT_STEP_WINDOW = (19, 119)
MODELS = {
    "rn50": "resnet50",
    "r50": "resnet50",
    "resnet50": "resnet50",
    "resnet50v1.5": "resnet50",
    "bert": "bert_base",
    "bert_base": "bert_base",
    "bert-base": "bert_base",
}

_TOPOLOGY_DIR = re.compile(r"(\d+)n(\d+)g")
_BATCH_DIR = re.compile(r"(?:bsz?|bz|b)?(\d+)")
_HEADER = re.compile(r"(batch_size_per_device|gpu_num_per_node|num_nodes|model|use_fp16) = (\S+)")
_ONEFLOW_CNN = re.compile(r"train: epoch (\d+), iter (\d+),.* ([0-9.]+)\s*$")
_ONEFLOW_BERT = re.compile(r"step: (\d+),.* ([0-9.]+)\s*$")
_PYTORCH_EXAMPLES = re.compile(r"Epoch: \[(\d+)\]\[\s*(\d+)/\s*\d+\]\s+Time\s+([0-9.]+)")


def _path_axes(path: Path) -> dict[str, Any]:
    """What the tree and the file name say."""
    axes: dict[str, Any] = {"repeat": repeat_from_name(path)}
    parts = path.parent.parts
    at = next((i for i in range(len(parts) - 1, -1, -1) if _TOPOLOGY_DIR.fullmatch(parts[i])), None)
    if at is not None and (topology := _TOPOLOGY_DIR.fullmatch(parts[at])):
        nodes, gpus = topology.groups()
        axes |= {"nodes": int(nodes), "devices_per_node": int(gpus)}
        for name in reversed(parts[:at]):
            if batch_dir := _BATCH_DIR.fullmatch(name):
                axes.setdefault("batch_size", int(batch_dir.group(1)))
            elif name.lower() in MODELS:
                axes.setdefault("model", MODELS[name.lower()])
            else:
                axes["framework"] = name
                break
    tokens = path.stem.split("_")
    if tokens[0].lower() in MODELS:
        axes["model"] = MODELS[tokens[0].lower()]
    for token in tokens[1:]:
        if re.fullmatch(r"b\d+", token):
            axes["batch_size"] = int(token[1:])
        elif token in ("fp32", "tf32", "fp16", "amp"):
            axes["precision"] = "amp" if token in ("fp16", "amp") else token
    return axes


def _oneflow_times(path: Path) -> tuple[str | None, dict[int, float], dict[str, Any], int]:
    """(shape, iteration -> time, header axes, last line) for OneFlow's and pytorch/examples' lines."""
    shape: str | None = None
    times: dict[int, float] = {}
    header: dict[str, str] = {}
    elapsed = 0.0
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    for line in lines:
        if match := _HEADER.match(line):
            header[match.group(1)] = match.group(2)
        elif match := _ONEFLOW_CNN.match(line):
            shape = "oneflow-cnn"
            times.setdefault(int(match.group(2)), float(match.group(3)))
        elif match := _ONEFLOW_BERT.match(line):
            shape = "oneflow-bert"
            times.setdefault(int(match.group(1)), float(match.group(2)))
        elif match := _PYTORCH_EXAMPLES.search(line):
            shape = "pytorch-examples"
            elapsed += float(match.group(3))  # time at the end of each iteration, from the first
            times.setdefault(int(match.group(2)), elapsed)
    axes: dict[str, Any] = {}
    for key, field in (
        ("batch_size_per_device", "batch_size"),
        ("gpu_num_per_node", "devices_per_node"),
        ("num_nodes", "nodes"),
    ):
        if key in header and header[key].isdigit():
            axes[field] = int(header[key])
    if "model" in header:
        axes["model"] = MODELS.get(header["model"].lower(), header["model"])
    if header.get("use_fp16", "").lower() == "true":
        axes["precision"] = "amp"
    return shape, times, axes, len(lines)


def _dllogger_times(path: Path) -> tuple[dict[int, float], dict[str, Any], float | None, str | None, int]:
    """(iteration -> time, PARAMETER axes, summary, summary key, last line) of a DLLogger log's training steps."""
    log = dllogger.read_log(path)
    training = [
        (e.step, e.timestamp)
        for e in log.entries
        if isinstance(e.step, tuple) and e.step and not any(k.startswith("val") for k in e.data)
    ]
    longest = max((len(step) for step, _ in training), default=0)
    times: dict[int, float] = {}
    first_epoch = next((step[0] for step, _ in training if len(step) == longest), None)
    for step, timestamp in training:
        if len(step) == longest and (longest == 1 or step[0] == first_epoch):
            times.setdefault(step[-1], datetime.fromisoformat(timestamp).timestamp())
    try:
        s = dllogger.series(path, log)
        summary, key = s.summary, s.summary_key
    except LogError:
        summary, key = None, None
    return times, dllogger.parameter_axes(log), summary, key, log.last_line


def parse(path: str | Path, labels: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run of a DLPerf log tree -> one record.

    labels: the record labels of dlbench.logformats.common, and start_iter / end_iter (DLPerf's window)."""
    path, labels = Path(path), labels or {}
    check_labels(labels, OPTIONS, NAME)
    read = _path_axes(path)
    try:
        shape, times, header, last = _oneflow_times(path)
        reported = reported_key = None
        if shape is None:
            times, header, reported, reported_key, last = _dllogger_times(path)
            shape = "dllogger" if times else None
        read |= {k: v for k, v in header.items() if v is not None}
        if shape is None:
            raise LogError(
                f"{path}:{last}: no line DLPerf's rule can time (read: OneFlow `train:`/`step:` lines, "
                "DLLogger records, pytorch/examples `Epoch: [E][I/N] Time`)"
            )
        start, end = BERT_STEP_WINDOW if shape == "oneflow-bert" else WINDOW
        start, end = int(labels.get("start_iter", start)), int(labels.get("end_iter", end))
        for iteration in (start, end):
            if iteration not in times:
                raise LogError(
                    f"{path}:{last}: iteration {iteration} is not logged (logged: "
                    f"{min(times)}..{max(times)}); DLPerf's window is {start}..{end}"
                )
        fields = resolve(read, labels)
        if not fields.get("batch_size") or not fields.get("devices"):
            raise LogError(
                f"{path}: batch size per device or device count unknown (say them in the path, the header or labels)"
            )
        seconds = times[end] - times[start]
        if seconds <= 0:
            raise LogError(f"{path}: iteration {end} is not logged after iteration {start}")
        throughput = fields["batch_size"] * fields["devices"] * (end - start) / seconds
    except LogError as exc:
        return error_record(NAME, path, str(exc), labels, read=read, definition=THROUGHPUT_DEFINITION)
    except OSError as exc:
        return error_record(
            NAME, path, f"{path}: unreadable log ({exc})", labels, read=read, definition=THROUGHPUT_DEFINITION
        )
    unit = "sequences/s" if str(read.get("model", "")).startswith("bert") else "images/s"
    read |= {
        "status": "ok",
        "throughput": throughput,
        "unit": unit,
        "elapsed_s": seconds,
        "warmup_steps": start,
        "measured_steps": end - start,
        "throughput_reported": reported,
        "throughput_reported_key": f"DLLogger {reported_key}" if reported_key else None,
        "throughput_definition": f"DLPerf's: global batch x {end - start} iterations ({start}..{end}) / "
        "their logged time",
        "details": json.dumps({"shape": shape, "start_iter": start, "end_iter": end}),
    }
    return external_record(NAME, path, read, labels, definition=THROUGHPUT_DEFINITION)
