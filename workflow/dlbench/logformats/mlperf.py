"""MLPerf Training result logs (mlcommons/logging): one result_N file = one run, a result directory = one scored set.

Line formats, told apart per record by their marker, which may stand anywhere in a line (a record glued after
an MPI rank prefix or other output counts; text after an MLLOG record's JSON is other output):
    MLLOG (v0.7 on)  `:::MLLOG {"namespace", "time_ms", "event_type", "key", "value", "metadata": {..}}`, ms
    v0.6             `:::MLL <unix s> <key>: {"value": .., "metadata": {..}}`
    v0.5             `:::MLPv0.5.0 <benchmark> <unix s> (<file>:<line>) <key>[: <value>]`
A marked record that cannot be read makes the run an `error` record naming file:line (the official summarizer
drops a log its parser cannot read), as does a log without run_start or run_stop (truncated).

Per run (result_summarizer's rules): time to train = first run_stop - first run_start (ms in MLLOG, s before),
in minutes; status from run_stop: metadata.status `success` / `aborted` (MLLOG), `success` / `abort` (v0.6),
the value {"success": "true"|"false"} (v0.5); anything else, or none, is a failed run. The official summarizer
decides pass/fail with the compliance checker; the run_stop status stands in for it here. Also read:
submission_benchmark/org/platform/division/status, global_batch_size (v0.5: input_batch_size), local_batch_size
(per device, where logged), the last eval_accuracy (a number -> eval_accuracy; anything else such as maskrcnn's
{"BBOX": .., "SEGM": ..} -> eval_accuracy_json, as JSON text: MLPerf defines no single scalar for it) and the
`tracked_stats` throughputs some submitters log per epoch (details.epoch_throughput).

Per set (score_set, score_records, parse_set): result_summarizer's score: sort the successful runs' times,
drop the fastest and slowest (4 each for unet3d), where every failed run counts as one of the dropped slowest,
average the rest, multiply by scaling.json's scaling_factor in the result directory where present. No score
when more runs failed than may be dropped (the summarizer's "CRITICAL ERROR"). Those per-benchmark drop counts
are inline in the summarizer's code (`4 if benchmark == "unet3d" else 1`), so MAX_DROPPED mirrors them.

mlperf-logging use: key names from mllog.constants; v0.6 lines through its parser (mlp_parser.ruleset_060);
the olympic mean and scaling.json through result_summarizer's own functions. Not used: its MLLOG parser (it
numbers lines among MLLOG lines only, keeps only the last of several records on one line and refuses text
glued after a record) and the compliance checker; it has no v0.5 parser (v0.5 was checked by the separate
mlperf_compliance package), so v0.5 lines are read here.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from mlperf_logging.compliance_checker.mlp_parser import ruleset_060
from mlperf_logging.mllog import constants as K

from ..collect.records import LogError
from .common import AXIS_LABELS, UNKNOWN, check_labels, error_record, external_record

NAME = "mlperf"
THROUGHPUT_DEFINITION = (
    "harmonic mean of the run's per-epoch tracked_stats throughput (samples/s, the "
    "submitter's own figures; = samples / time for equal epochs), where logged; MLPerf's "
    "own metric is the time to train (time_to_train_min) and the set's score (score_min)"
)
OPTIONS: frozenset[str] = frozenset()
SCALING_FILE = "scaling.json"  # result_summarizer: a result directory's RCP scaling factor
MAX_DROPPED = {"unet3d": 4}  # result_summarizer: `4 if benchmark == "unet3d" else 1`
# submission_benchmark -> dlbench's model name, where dlbench has one (MLPerf's resnet is ResNet-50 v1.5).
MODELS = {"resnet": "resnet50"}
# The MLPerf benchmark a dlbench model counts as (a time-to-quality record's `benchmark`, its MLPerf log).
BENCHMARKS = {"resnet50": "resnet", "resnet_tiny": "resnet", "bert_base": "bert", "bert_tiny": "bert"}

MLLOG, V06, V05 = ":::MLLOG ", ":::MLL ", ":::MLPv0.5.0 "
_V05_LINE = re.compile(r":::MLPv0\.5\.0 (\S+) ([0-9.]+) \(([^)]*)\) ([A-Za-z0-9_]+)(?::\s*(.*))?$")
_DECODER = json.JSONDecoder()
_UNIT_S = {"mllog": 1e-3, "v0.6": 1.0, "v0.5": 1.0}  # timestamp unit in seconds


class Event(NamedTuple):
    lineno: int
    key: str
    value: Any
    metadata: dict[str, Any]
    time: float  # in the format's unit (_UNIT_S)


def _v05_value(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()


def read_events(path: Path) -> tuple[str | None, list[Event]]:
    """(format, events in file order) of one result log; LogError naming file:line for an unreadable record."""
    fmt, events = None, []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            at = line.find(":::ML")
            if at < 0:
                continue
            try:
                if line.startswith(MLLOG, at):
                    fmt = "mllog"
                    while at >= 0:
                        entry, end = _DECODER.raw_decode(line, at + len(MLLOG))
                        events.append(
                            Event(
                                lineno,
                                entry["key"],
                                entry.get("value"),
                                entry.get("metadata") or {},
                                float(entry["time_ms"]),
                            )
                        )
                        at = line.find(MLLOG, end)
                elif line.startswith(V06, at):
                    fmt = "v0.6"
                    parsed = ruleset_060.string_to_logline(lineno, line[at:].strip())
                    body = parsed.value if isinstance(parsed.value, dict) else {"value": parsed.value}
                    events.append(
                        Event(lineno, parsed.key, body.get("value"), body.get("metadata") or {}, parsed.timestamp)
                    )
                elif line.startswith(V05, at):
                    fmt = "v0.5"
                    match = _V05_LINE.match(line[at:].rstrip())
                    if not match:
                        raise ValueError("not `:::MLPv0.5.0 <benchmark> <time> (<file>:<line>) <key>[: <value>]`")
                    events.append(
                        Event(
                            lineno,
                            match.group(4),
                            _v05_value(match.group(5)),
                            {"benchmark": match.group(1), "file": match.group(3)},
                            float(match.group(2)),
                        )
                    )
            except (ValueError, KeyError, TypeError) as exc:
                raise LogError(f"{path}:{lineno}: unreadable MLPerf log record ({type(exc).__name__}: {exc})") from None
    return fmt, events


def _status(fmt: str, stop: Event) -> tuple[str, str]:
    """Record status and error text from run_stop."""
    if fmt == "v0.5":
        value = stop.value if isinstance(stop.value, dict) else {}
        success = str(value.get("success", "")).lower()
        return ("ok", "") if success == "true" else ("failed", f"run_stop: success {value.get('success')!r}")
    raw = stop.metadata.get(K.STATUS)
    if raw == K.SUCCESS:
        return "ok", ""
    if raw is None:
        return "error", "run_stop without metadata.status (the compliance checker rejects such a log)"
    return "failed", f"run_stop: status {raw!r}"


def _accuracy(value: Any) -> tuple[float | None, str | None]:
    """eval_accuracy (v0.5 wraps it: {"value": .., "epoch": N}) -> (number, None) or (None, JSON text)."""
    if isinstance(value, dict) and set(value) <= {"value", "epoch"} and "value" in value:
        value = value["value"]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), None
    return None, None if value is None else json.dumps(value, sort_keys=True)


def summarise_run(path: Path, fmt: str, events: Sequence[Event]) -> dict[str, Any]:
    """The record fields one run's events give (LogError naming the last line when run_start or run_stop is
    missing)."""
    first: dict[str, Event] = {}
    last_accuracy, epoch_throughput = None, []
    for event in events:
        first.setdefault(event.key, event)
        if event.key == K.EVAL_ACCURACY:
            last_accuracy = event
        elif event.key == "tracked_stats" and isinstance(event.value, dict) and "throughput" in event.value:
            epoch_throughput.append(float(event.value["throughput"]))
    for key in (K.RUN_START, K.RUN_STOP):
        if key not in first:
            raise LogError(f"{path}:{events[-1].lineno}: no {key} up to the last record (log truncated?)")
    start, stop = first[K.RUN_START], first[K.RUN_STOP]
    status, error = _status(fmt, stop)

    def value(key: str) -> Any:
        return first[key].value if key in first else None

    accuracy, accuracy_json = _accuracy(last_accuracy.value if last_accuracy else None)
    benchmark = value(K.SUBMISSION_BENCHMARK) or (events[0].metadata.get("benchmark") if fmt == "v0.5" else None)
    throughput = statistics.harmonic_mean(epoch_throughput) if epoch_throughput and status == "ok" else None
    return {
        "benchmark": benchmark,
        "model": None if benchmark is None else MODELS.get(benchmark, benchmark),
        "organization": value(K.SUBMISSION_ORG),
        "platform": value(K.SUBMISSION_PLATFORM),
        "division": value(K.SUBMISSION_DIVISION),
        "availability": value(K.SUBMISSION_STATUS),
        "global_batch_size": value(K.GLOBAL_BATCH_SIZE) or value("input_batch_size"),
        "batch_size": value("local_batch_size"),
        "time_to_train_min": (stop.time - start.time) * _UNIT_S[fmt] / 60,
        "status": status,
        "error": error,
        "eval_accuracy": accuracy,
        "eval_accuracy_json": accuracy_json,
        "throughput": throughput,
        "unit": "samples/s" if throughput else None,
        "measured_steps": len(epoch_throughput) or None,
        "data": "real",
        "details": json.dumps({"format": fmt, "epoch_throughput": epoch_throughput}),
    }


def _run_number(path: Path) -> int | None:
    match = re.fullmatch(r"result_(\d+)", path.stem)
    return int(match.group(1)) if match else None


def parse(path: str | Path, labels: dict[str, Any] | None = None) -> dict[str, Any]:
    """One result log -> one record (score fields empty: a score needs the set, see parse_set/score_records).

    labels: the record labels of dlbench.logformats.common (framework, topology, precision, ...)."""
    path, labels = Path(path), labels or {}
    check_labels(labels, OPTIONS, NAME)
    number = _run_number(path)
    # A result directory is one submission's configuration: its name ends the variant.
    hints: dict[str, Any] = {
        "definition": THROUGHPUT_DEFINITION,
        "variant_extra": [path.parent.name] if path.parent.name else [],
        "run_name": path.stem,
    }
    base = {"run_set": str(path.parent), "repeat": None if number is None else number + 1}
    try:
        fmt, events = read_events(path)
        if fmt is None:
            raise LogError(f"{path}: no MLPerf log record (:::MLLOG, :::MLL or :::MLPv0.5.0)")
        read = summarise_run(path, fmt, events)
    except LogError as exc:
        return error_record(NAME, path, str(exc), labels, read=base, **hints)
    except OSError as exc:
        return error_record(NAME, path, f"{path}: unreadable log ({exc})", labels, read=base, **hints)
    return external_record(NAME, path, {**base, **read}, labels, **hints)


def scaling_factor(directory: str | Path) -> float:
    """scaling.json's scaling_factor in a result directory, 1.0 without one (result_summarizer's reader)."""
    from mlperf_logging.result_summarizer.result_summarizer import _get_scaling_factor  # slow import: pandas, scipy

    return float(_get_scaling_factor(str(directory)))


def score_set(
    times: Sequence[float | None], statuses: Sequence[str], benchmark: str | None, factor: float = 1.0
) -> dict[str, Any]:
    """result_summarizer's score of one set of runs: times to train (minutes) and statuses in the same order.

    Returns score_min (None when more runs failed than may be dropped, or none is left), the factor, how many
    runs failed and, per run, whether its time is one of those averaged (`counted`)."""
    from mlperf_logging.result_summarizer.result_summarizer import _compute_olympic_average

    max_dropped = MAX_DROPPED.get(benchmark or "", 1)
    ok = sorted((t, i) for i, (t, s) in enumerate(zip(times, statuses, strict=True)) if s == "ok" and t is not None)
    failed = len(times) - len(ok)
    counted = [False] * len(times)
    score = None
    if failed <= max_dropped:
        average = _compute_olympic_average([t for t, _ in ok], failed, max_dropped)
        if average is not None:
            score = average * factor
            for _, i in ok[max_dropped : len(ok) - (max_dropped - failed)]:
                counted[i] = True
    return {
        "score_min": score,
        "scaling_factor": factor,
        "n_runs": len(times),
        "n_failed": failed,
        "max_dropped": max_dropped,
        "counted": counted,
    }


# What an unreadable run log of a set takes from the set's readable ones (it was run as one of them): every axis
# (common.AXIS_LABELS but the repeat), the topology's parts and the submission's keys.
SET_FIELDS = (AXIS_LABELS - {"repeat"}) | {
    "nodes",
    "devices_per_node",
    "devices",
    "global_batch_size",
    "benchmark",
    "organization",
    "platform",
    "division",
    "availability",
}


def place_with_set(members: list[dict[str, Any]]) -> None:
    """Give the `error` records of one MLPerf set (logs that could not be read) the configuration of the set's
    readable runs, so a bad log counts in its set rather than under `unknown`; run id <config id>/<file stem>."""
    readable = [r for r in members if r["status"] != "error"]
    if not readable:
        return
    home = readable[0]
    for record in members:
        if record["status"] != "error" or record.get("source") != NAME or record["config_id"] == home["config_id"]:
            continue
        for key in sorted(SET_FIELDS):
            if record.get(key) in (None, UNKNOWN):
                record[key] = home.get(key)
        record["config_id"] = home["config_id"]
        record["run_id"] = f"{home['config_id']}/{Path(record['log_path']).stem}"


def unreadable_runs(statuses: Iterable[str]) -> int:
    """How many runs of a set could not be read (`error`): a score over such a set counts each as a failed run,
    which it may not have been, so the score is flagged rather than a finding."""
    return sum(status == "error" for status in statuses)


def score_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """MLPerf records with score_min, scaling_factor and score_counted filled per run_set (others unchanged;
    the records are parse()'s, already validated, and the three fields' types are the schema's)."""
    records = [dict(r) for r in records]
    sets: dict[str, list[dict[str, Any]]] = {}
    for record in records:  # MLPerf's logs, and dlbench's time-to-quality runs (one set per configuration)
        if (record.get("source") == NAME or record.get("metric") == "time_to_quality") and record.get("run_set"):
            sets.setdefault(record["run_set"], []).append(record)
    for run_set, members in sets.items():
        place_with_set(members)
        factor = scaling_factor(run_set) if Path(run_set).is_dir() else 1.0
        benchmark = next((r["benchmark"] for r in members if r.get("benchmark")), None)
        result = score_set(
            [r.get("time_to_train_min") for r in members], [r["status"] for r in members], benchmark, factor
        )
        for record, counted in zip(members, result["counted"], strict=True):
            record.update(score_min=result["score_min"], scaling_factor=float(factor), score_counted=counted)
    return records


def is_run_log(path: Path) -> bool:
    """A run log by MLPerf's naming: result_<N>.txt in a result directory (result_<N>.log as kept here), or the
    MLPerf log dlbench writes of a time-to-quality run (rep<N>.mlperf.log). Nothing else in a result directory is
    a run: scaling.json is the set's scaling factor, other files are the submitter's."""
    return (path.name.startswith("result_") and path.suffix in (".txt", ".log")) or path.name.endswith(".mlperf.log")


def other_file_note(path: Path) -> str:
    """What an import does with a file of a result directory that is not a run log (is_run_log)."""
    if path.name == SCALING_FILE:
        return f"{path}: read as its set's scaling factor ({scaling_factor(path.parent):g}), not as a run"
    return f"{path}: skipped, not a run log by MLPerf's naming (result_<N>.txt)"


def result_files(directory: str | Path) -> list[Path]:
    """A result directory's run logs (is_run_log), in run order."""
    found = [p for p in Path(directory).iterdir() if p.is_file() and is_run_log(p)]
    return sorted(found, key=lambda p: (_run_number(p) is None, _run_number(p) or 0, p.name))


def parse_set(directory: str | Path, labels: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every run of a result directory, scored together (score_min, scaling_factor, score_counted)."""
    return score_records(parse(p, labels) for p in result_files(directory))
