"""dlbench.collect.records.complete: the compiled check of the record schema (fastjsonschema) decides as jsonschema
does, and a record that fails gets jsonschema's error, naming the file, the field and the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastjsonschema import JsonSchemaException

from dlbench.collect.records import _VALIDATOR, FIELDS, LogError, _fast_check, complete
from dlbench.logformats import runlogs
from dlbench.logformats.run_log_fixtures import write_run_log

# Values of every JSON type and the edges the schema draws (minimum 1, exclusiveMinimum 0, integer-valued floats,
# the topology pattern's `$`, the enums): each is tried in every field.
VALUES: list[Any] = [None, True, False, 0, -1, 2, 1.0, 1.5, float("nan"), "", "x", "ok", "fp32", "1x1\n", "2x4", [], {}]


def completed(record: dict[str, Any]) -> dict[str, Any]:
    """The record as complete has it before its check: every field, error and hosts text."""
    record = {name: record.get(name) for name in FIELDS}
    return {**record, "error": record["error"] or "", "hosts": record["hosts"] or ""}


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list[dict[str, Any]]:
    """An ok run's record and an out-of-memory run's (no throughput), as dlbench's parser completes them."""
    root: Path = tmp_path_factory.mktemp("logs")
    ok = write_run_log(root / "results/runs/resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic/rep1.jsonl")
    oom = write_run_log(
        root / "results/runs/resnet50/pytorch/1x1/bs64-fp32-nocompile-synthetic/rep1.jsonl",
        batch_size=64,
        status="oom",
        error="OOM",
    )
    return [runlogs.parse(ok), runlogs.parse(oom)]


def test_the_compiled_check_is_never_more_lenient_than_jsonschema(records):
    """For each record and each field set to each value: a record the compiled check accepts, jsonschema accepts
    (one it rejects goes to jsonschema, which decides: complete's result is jsonschema's by construction)."""
    lenient = []
    for base in records:
        assert _VALIDATOR.is_valid(completed(base))
        for field in FIELDS:
            for value in VALUES:
                record = completed({**base, field: value})
                try:
                    _fast_check()(record)
                except JsonSchemaException:
                    continue
                if not _VALIDATOR.is_valid(record):
                    lenient.append((base["status"], field, value))
    assert not lenient


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"status": "ok", "throughput": None}, "is not valid under any of the given schemas"),
        ({"source": "dlbench", "nodes": None}, "None is not of type 'integer'"),
        ({"topology": "1x1\n2x2"}, "does not match '^[1-9][0-9]*x[1-9][0-9]*$'"),
        ({"repeat": 0}, "0 is less than the minimum of 1"),
        ({"status": "done"}, "'done' is not one of"),
    ],
)
def test_a_record_that_fails_names_its_file_field_and_reason(records, change, reason):
    record = {**records[0], **change}
    with pytest.raises(LogError) as failed:
        complete(record)
    assert str(failed.value).startswith(f"{record['log_path']}: record does not match the record schema: ")
    assert reason in str(failed.value)


def test_a_topology_with_a_trailing_newline_passes_as_jsonschema_lets_it(records):
    """The compiled check's pattern is stricter (its `$` is the end of the text): jsonschema decides."""
    assert complete({**records[0], "topology": "1x1\n"})["topology"] == "1x1\n"
