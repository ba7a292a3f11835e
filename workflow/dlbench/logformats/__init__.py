"""Log formats: one module per format, one registry (core environment).

Reading a log = pick the parser for its `source`, get a record:

    from dlbench import logformats
    record = logformats.parse(path, source="dlbench", labels={})

Each format module declares
    NAME                     the record's `source` (key of the registry)
    THROUGHPUT_DEFINITION    what its `throughput` means (shown in the report)
    parse(path, labels) -> dict
                             one log file -> one validated record (dlbench.collect.records.complete). `labels` supply
                             what the log cannot say (framework label, model, topology, precision, ...). A log
                             that cannot be read gives an `error` record naming the file and line where the
                             labels or the path say enough to place it, else raises records.LogError.
and documents its project's rules in its docstring. A format whose figures belong to a set of runs (MLPerf's
score) also declares `score_records(records) -> records`, which fills them in once every run of a set is read.
A format whose projects keep other files beside their logs (MLPerf's result directories) declares
`is_run_log(path) -> bool` (its naming rules) and `other_file_note(path) -> str` (what is done with the rest).

Adding a format: a module here, one line in external.FORMATS, its tests (tests/test_logformats_<name>.py), and
its name in the record schema's `source` enum (tests/test_architecture.py checks the two agree).

Formats: dlbench (ours, module runlogs), mlperf (MLPerf Training result logs; mlperf.parse_set scores a result
directory), dllogger (NVIDIA DLLogger text and JSON), tf_cnn_benchmarks, dlperf (DLPerf log trees). Not formats:
external (the other projects' formats by name, which runlogs reads a runner's log through), common (labels,
identity and records shared by the external formats) and external_log_fixtures (logs of their shapes written for
tests and benchmarks). Parsers only read: the MLPerf log of a dlbench run is written by dlbench.collect.mlperf_writer.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from . import external, runlogs
from .external import UnknownFormat

FORMATS: dict[str, ModuleType] = {runlogs.NAME: runlogs, **external.FORMATS}

__all__ = ["FORMATS", "UnknownFormat", "get", "parse", "score_sets"]


def get(source: str) -> ModuleType:
    return external.get(source, FORMATS)


def parse(path: str | Path, source: str = "dlbench", labels: dict[str, Any] | None = None) -> dict[str, Any]:
    """The record of one log file in the given format."""
    return get(source).parse(Path(path), labels or {})


def score_sets(source: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of one import with their per-set figures filled in, for formats that have them."""
    module = get(source)
    return module.score_records(records) if hasattr(module, "score_records") else records


def run_logs(source: str, files: list[Path], named: set[Path]) -> tuple[list[Path], list[str]]:
    """The files of an import that are run logs, and a note for each that is not. A file the import names itself
    (`named`) is a log; one found in a directory or by a glob is a log by its format's naming rules
    (`is_run_log`, where the format has them), else read for what it is or skipped (`other_file_note`)."""
    module = get(source)
    if not hasattr(module, "is_run_log"):
        return list(files), []
    logs = [path for path in files if path in named or module.is_run_log(path)]
    return logs, [module.other_file_note(path) for path in files if path not in logs]
