"""NVIDIA DLLogger logs (NVIDIA/dllogger, as NVIDIA DeepLearningExamples' training scripts write them).

Backends, both read from the same file (lines without a marker are other output and ignored; a marker may
follow a prefix, e.g. mpirun's `[1,0]<stdout>:`; lines whose prefix names a rank other than 0 are skipped):
    text  `DLL <date> <time> - <step> <key> : <value> [<unit>]  <key> : <value> [<unit>] ...` (`DLLL` in
          early versions). Pairs are split on ` : `, the word before each ` : ` being its key; a value is a
          number, `None` or text, and what follows a number or None up to the next key is its unit.
    JSON  `DLLL {"timestamp", "datetime", "elapsedtime", "type": "LOG"|"METADATA", "step", "data"}`;
          METADATA lines give units.
Steps: `PARAMETER` = configuration; otherwise the step's integers as a tuple (`Epoch: 0 Iteration: 5` ->
(0, 5), `(0, 200)` -> (0, 200), `Iteration: 5` -> (5,), `Summary:`, `()` or empty -> ()). Among the lines
carrying the throughput key, the longest steps are the per-step series, shorter non-empty ones per-epoch
figures, the last empty-step line carrying a summary key is the script's own final figure.

Throughput keys by script (the first present wins; labels throughput_key / summary_key override):
    PyTorch ConvNets  train.total_ips per step and in `Summary:` (train.compute_ips excludes data loading)
    TF ConvNets       total_ips per step, train_throughput in the `()` summary (the mean of per-step ips)
    PyTorch BERT      training_sequences_per_second in the empty-step summary (no per-step throughput)
    TF BERT           throughput_train per step and in the empty-step summary
    MXNet ConvNets    train.ips per step (every disp_batches), per epoch and in `Summary:`
The record carries both: throughput_reported = the script's summary figure (throughput_reported_key says
which line), and throughput = the `statistic` label applied to the per-step series after `skip_steps`:
    harmonic_mean_of_steps  (default) = samples of those steps / their time when steps are equal-sized:
                            dlbench's own definition, re-derived
    mean_of_steps           arithmetic mean of the per-step values (DLE TF's own rule; PaddlePaddle/Perf's
                            published tables, e.g. skip_steps 8 for PyTorch RN50, 5 for TF RN50)
    summary                 the script's own figure
A log without per-step throughput falls back to its summary. A log with steps but no summary line was
interrupted or truncated: `error` record naming the file and its last DLL line, as is an unreadable JSON
line or a throughput value that is not a number. series() returns the per-step and per-epoch values so a
caller can apply any other published rule.

Also read from PARAMETER lines where present: per-device batch size (batch_size_per_gpu; batch_size, which
MXNet's scripts give for all GPUs together), device count (world_size, n_gpu, the gpus list), precision
(amp / fp16 / dtype float16 -> amp, else fp32 where one of them is logged) and the model (arch). Framework
labels default to dle-pytorch / dle-tensorflow / dle-mxnet (told by the throughput key).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..collect.records import LogError
from .common import check_labels, error_record, external_record, other_rank, repeat_from_name

NAME = "dllogger"
THROUGHPUT_DEFINITION = (
    "by the `statistic` label over the per-step throughput after `skip_steps`: "
    "harmonic mean (default; = samples / time, dlbench's definition), arithmetic mean, or the "
    "script's own summary figure (throughput_reported)"
)
OPTIONS = frozenset({"skip_steps", "statistic", "throughput_key", "summary_key"})
STATISTICS = ("harmonic_mean_of_steps", "mean_of_steps", "summary")
STEP_KEYS = (
    "train.total_ips",
    "total_ips",
    "train.ips",
    "training_sequences_per_second",
    "throughput_train",
    "imgs_per_sec",
    "train_throughput",
)
SUMMARY_KEYS = (
    "train.total_ips",
    "train_throughput",
    "train.ips",
    "training_sequences_per_second",
    "throughput_train",
    "total_ips",
    "imgs_per_sec",
)
# The key a script logs tells its framework (DeepLearningExamples' PyTorch, TensorFlow and MXNet scripts).
FRAMEWORKS = {
    "train.total_ips": "dle-pytorch",
    "training_sequences_per_second": "dle-pytorch",
    "total_ips": "dle-tensorflow",
    "train_throughput": "dle-tensorflow",
    "imgs_per_sec": "dle-tensorflow",
    "throughput_train": "dle-tensorflow",
    "train.ips": "dle-mxnet",
}
MODELS = {"resnet50": "resnet50", "resnetv15": "resnet50"}  # arch -> dlbench's model name

_TEXT = re.compile(r"DLLL? (\d{4}-\d\d-\d\d[ T]\S+) - ?(.*)")
_INT = re.compile(r"-?\d+")


@dataclass
class Entry:
    """One DLLogger record: its line, time stamp text, step ("PARAMETER" or a tuple of ints) and data (text
    backend: raw `value [unit]` strings, parsed when needed; JSON backend: typed values)."""

    lineno: int
    timestamp: str
    step: str | tuple[int, ...]
    data: dict[str, Any]


@dataclass
class Log:
    entries: list[Entry] = field(default_factory=list)
    units: dict[str, str] = field(default_factory=dict)
    last_line: int = 0


def _split_pairs(text: str) -> tuple[str, dict[str, str]]:
    """'Epoch: 0 Iteration: 1  train.loss : 7.0 None train.total_ips : 391.47 images/s' ->
    ('Epoch: 0 Iteration: 1', {'train.loss': '7.0 None', 'train.total_ips': '391.47 images/s'})."""
    parts = text.split(" : ")
    if len(parts) < 2:
        return text.strip(), {}
    head = parts[0].rstrip()
    cut = head.rfind(" ")
    step, key = head[:cut].strip() if cut >= 0 else "", head[cut + 1 :]
    data = {}
    for part in parts[1:-1]:
        part = part.rstrip()
        cut = part.rfind(" ")
        if cut < 0:
            raise ValueError(f"no value between {key!r} and {part!r}")
        data[key], key = part[:cut].strip(), part[cut + 1 :]
    data[key] = parts[-1].strip()
    return step, data


def _step(text: str | list | None) -> str | tuple[int, ...]:
    if text == "PARAMETER":
        return "PARAMETER"
    if isinstance(text, list):
        return tuple(int(x) for x in text if isinstance(x, int) or str(x).lstrip("-").isdigit())
    return tuple(int(x) for x in _INT.findall(text or ""))


def value_and_unit(raw: Any) -> tuple[float | None, str | None]:
    """A metric's number and unit: '391.47 images/s' -> (391.47, 'images/s'); 'None %' -> (None, '%');
    JSON values pass through. ValueError for anything else."""
    if raw is None or isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return raw, None
    number, _, rest = str(raw).partition(" ")
    unit = rest.strip() or None
    if unit == "None":  # a metric without a unit prints its unit as None
        unit = None
    return (None if number == "None" else float(number)), unit


def read_log(path: Path) -> Log:
    """Every DLL record of a log, in file order (LogError naming file:line for an unreadable one)."""
    log = Log()
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            at = line.find("DLL")
            if at < 0 or (at and other_rank(line[:at])):
                continue
            try:
                if line.startswith("DLLL {", at):
                    entry = json.loads(line[at + 5 :])
                    if entry.get("type") == "METADATA":
                        unit = (entry.get("metadata") or {}).get("unit")
                        if unit:
                            log.units[entry["metric"]] = unit
                        continue
                    log.entries.append(
                        Entry(lineno, entry.get("datetime", ""), _step(entry.get("step")), entry.get("data") or {})
                    )
                else:
                    match = _TEXT.match(line, at)
                    if not match:
                        continue  # "DLL" inside other output
                    step, data = _split_pairs(match.group(2).rstrip("\n"))
                    log.entries.append(Entry(lineno, match.group(1), _step(step), data))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise LogError(f"{path}:{lineno}: unreadable DLLogger record ({exc})") from None
            log.last_line = lineno
    return log


@dataclass
class Series:
    """A log's throughput: per-step values (step, value, line), per-epoch values, the summary figure."""

    key: str | None
    steps: list[tuple[tuple[int, ...], float, int]]
    epochs: list[tuple[tuple[int, ...], float, int]]
    summary_key: str | None
    summary: float | None
    summary_line: int | None
    unit: str | None


def _first_key(entries: list[Entry], keys: tuple[str, ...]) -> str | None:
    present = {k for e in entries for k in e.data}
    return next((k for k in keys if k in present), None)


def _number(path: Path, entry: Entry, key: str, units: dict[str, str]) -> tuple[float | None, str | None]:
    try:
        number, unit = value_and_unit(entry.data[key])
    except ValueError:
        raise LogError(f"{path}:{entry.lineno}: {key} is not a number ({entry.data[key]!r})") from None
    return number, unit or units.get(key)


def series(
    path: str | Path, log: Log | None = None, throughput_key: str | None = None, summary_key: str | None = None
) -> Series:
    """The per-step and per-epoch throughput and the summary figure of a log (for applying a published rule)."""
    path = Path(path)
    log = log or read_log(path)
    measured = [e for e in log.entries if isinstance(e.step, tuple)]
    stepped = [e for e in measured if e.step]
    key = throughput_key or _first_key(stepped, STEP_KEYS)
    with_key = [e for e in stepped if key in e.data]
    longest = max((len(e.step) for e in with_key), default=0)
    steps: list[tuple[tuple[int, ...], float, int]] = []
    epochs: list[tuple[tuple[int, ...], float, int]] = []
    units: list[str | None] = []
    for entry in with_key:
        assert key is not None and isinstance(entry.step, tuple)  # with_key: measured entries that have the key
        number, unit = _number(path, entry, key, log.units)
        if number is not None:
            (steps if len(entry.step) == longest else epochs).append((entry.step, number, entry.lineno))
            units.append(unit)
    summaries = [e for e in measured if not e.step]
    s_key = summary_key or _first_key(summaries, SUMMARY_KEYS)
    last = next((e for e in reversed(summaries) if s_key in e.data), None)
    summary, summary_unit = _number(path, last, s_key, log.units) if last and s_key else (None, None)
    unit = next((u for u in [*units, summary_unit] if u), None) or _unit_of(key or s_key)
    return Series(key, steps, epochs, s_key if last else None, summary, last.lineno if last else None, unit)


def _unit_of(key: str | None) -> str | None:
    if not key:
        return None
    return "sequences/s" if "seq" in key or key == "throughput_train" else "images/s"


def _step_label(step: tuple[int, ...]) -> str:
    return "/".join(map(str, step))


def apply_rule(s: Series, statistic: str, skip_steps: int) -> tuple[float | None, str, int]:
    """(throughput, its definition, values used) under a rule; raises ValueError when the rule cannot apply."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic {statistic!r} is not one of {', '.join(STATISTICS)}")
    if statistic == "summary" or not s.steps:
        if s.summary is None:
            raise ValueError("no summary figure and no per-step throughput")
        why = "" if statistic == "summary" else " (the log has no per-step throughput)"
        return s.summary, f"the script's own summary {s.summary_key}{why}", 0
    used = [v for _, v, _ in s.steps[skip_steps:]]
    if not used:
        raise ValueError(f"skip_steps {skip_steps} leaves none of the {len(s.steps)} per-step values")
    window = (
        f"{s.key} at steps {_step_label(s.steps[skip_steps][0])}..{_step_label(s.steps[-1][0])} "
        f"({len(used)} values, first {skip_steps} skipped)"
    )
    if statistic == "mean_of_steps":
        return statistics.fmean(used), f"mean of per-step {window}", len(used)
    return (
        statistics.harmonic_mean(used),
        f"harmonic mean of per-step {window} = samples / time (dlbench's definition)",
        len(used),
    )


def _int(value: Any) -> int | None:
    try:
        return int(float(str(value).split()[0]))
    except (ValueError, IndexError):
        return None


def _truthy(value: Any) -> bool:
    return str(value).split()[0].lower() in ("true", "1") if str(value).strip() else False


def parameter_axes(log: Log) -> dict[str, Any]:
    """Per-device batch, devices, precision and model that the PARAMETER records state."""
    params: dict[str, Any] = {}
    for entry in log.entries:
        if entry.step == "PARAMETER":
            params.update(entry.data)
    gpus = params.get("gpus")
    gpu_list = json.loads(gpus) if isinstance(gpus, str) and gpus.startswith("[") else gpus
    devices = (
        _int(params.get("world_size"))
        or _int(params.get("n_gpu"))
        or (len(gpu_list) if isinstance(gpu_list, list) and gpu_list else None)
    )
    batch = _int(params.get("batch_size_per_gpu"))
    if batch is None and (total := _int(params.get("batch_size"))):
        batch = total
        if isinstance(gpu_list, list) and gpu_list and batch % len(gpu_list) == 0:
            batch //= len(gpu_list)  # MXNet's scripts: batch_size is all GPUs' together
    half = any(_truthy(params[k]) for k in ("amp", "fp16") if k in params) or str(params.get("dtype", "")).split(" ")[
        0
    ] in ("float16", "fp16")
    stated = any(k in params for k in ("amp", "fp16", "dtype"))
    arch = str(params.get("arch", "")).split(" ")[0]
    if arch == "resnetv15" and _int(params.get("num_layers")) not in (None, 50):
        arch = f"resnet{_int(params['num_layers'])}"
    return {
        "batch_size": batch,
        "devices": devices,
        "precision": "amp" if half else ("fp32" if stated else None),
        "model": MODELS.get(arch, arch or None),
    }


def parse(path: str | Path, labels: dict[str, Any] | None = None) -> dict[str, Any]:
    """One DLLogger log -> one record.

    labels: the record labels of dlbench.logformats.common, and skip_steps (int, default 0), statistic
    (harmonic_mean_of_steps | mean_of_steps | summary), throughput_key, summary_key."""
    path, labels = Path(path), labels or {}
    check_labels(labels, OPTIONS, NAME)
    statistic, skip = labels.get("statistic", STATISTICS[0]), int(labels.get("skip_steps", 0))
    read: dict[str, Any] = {"repeat": repeat_from_name(path)}
    try:
        log = read_log(path)
        s = series(path, log, labels.get("throughput_key"), labels.get("summary_key"))
        read |= {**parameter_axes(log), "framework": FRAMEWORKS.get(s.key or s.summary_key or "")}
        if s.summary is None:
            if s.steps:
                raise LogError(
                    f"{path}:{log.last_line}: per-step {s.key} but no summary line after the last "
                    "step (run interrupted or log truncated?)"
                )
            raise LogError(f"{path}:{log.last_line}: no throughput ({', '.join(STEP_KEYS)}) in any DLL record")
        try:
            throughput, definition, used = apply_rule(s, statistic, skip)
        except ValueError as exc:
            raise LogError(f"{path}: {exc}") from None
    except LogError as exc:
        return error_record(NAME, path, str(exc), labels, read=read, definition=THROUGHPUT_DEFINITION)
    except OSError as exc:
        return error_record(
            NAME, path, f"{path}: unreadable log ({exc})", labels, read=read, definition=THROUGHPUT_DEFINITION
        )
    details = {"epoch_throughput": [v for _, v, _ in s.epochs]} if s.epochs else None
    read |= {
        "status": "ok",
        "throughput": throughput,
        "unit": s.unit,
        "throughput_definition": definition,
        "throughput_reported": s.summary,
        "throughput_reported_key": f"{s.summary_key} (line {s.summary_line})",
        "warmup_steps": skip if used else None,
        "measured_steps": used or None,
        "details": json.dumps(details) if details else None,
    }
    return external_record(NAME, path, read, labels, definition=THROUGHPUT_DEFINITION)
