"""The run record: one row of results/aggregate/records.csv, whatever log format it came from (core environment).

`workflow/schemas/record.schema.yaml` with the model axes' columns (dlbench.vocabulary.axes) is the record's
definition; `complete` gives a parser's dict every field (None where unknown) and validates it. The parsers that
make records live in dlbench.logformats.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastjsonschema
import jsonschema
import yaml

from ..vocabulary.axes import inputs_of, with_record_axes
from ..vocabulary.identity import model_kind

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "record.schema.yaml"
# libyaml's loader where PyYAML has it: the schema is read at every Snakemake start, by every run's parse.
# The model axes' columns are declared once, in dlbench.vocabulary.axes.
_SCHEMA: dict[str, Any] = with_record_axes(
    yaml.load(SCHEMA_PATH.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
)
FIELDS: list[str] = list(_SCHEMA["properties"])


def field_types() -> dict[str, str]:
    """Each record field's JSON type (integer, number, boolean or string; null aside), for typed tables."""
    types = {}
    for name, prop in _SCHEMA["properties"].items():
        declared = prop.get("type", "string")
        declared = [declared] if isinstance(declared, str) else declared
        types[name] = next((t for t in declared if t != "null"), "string")
    return types


_VALIDATOR = jsonschema.Draft202012Validator(_SCHEMA)


@functools.cache
def _fast_check() -> Callable[[dict[str, Any]], Any]:
    """The record schema compiled to Python (fastjsonschema, about 20x faster than _VALIDATOR): a record it
    accepts is valid. It is never more lenient than _VALIDATOR, only stricter in places (a pattern's `$` matches
    the end of the text alone), so a record it rejects goes to _VALIDATOR, which decides and words the error
    (tests/test_records.py holds the two to that). Compiled on first use: Snakemake imports this module at start."""
    return fastjsonschema.compile(_SCHEMA, use_default=False)  # checks only: fills in no defaults


class LogError(ValueError):
    """A log that does not follow its format's rules (the message names the file and, where known, the line)."""


def model_inputs(cfg: dict[str, Any]) -> dict[str, Any]:
    """The input shape and training settings that identify a configuration besides its axes (dlbench.vocabulary.axes'
    model axes: image size for ResNet-50; sequence length, masked positions, optimizer and clipping for BERT;
    sequence length and activation checkpointing for Llama; None where n/a)."""
    return inputs_of(model_kind(cfg["model"]), cfg)


def complete(record: dict[str, Any]) -> dict[str, Any]:
    """Every field present (None when unknown), validated against the record schema."""
    record = {name: record.get(name) for name in FIELDS}
    record["error"] = record["error"] or ""
    record["hosts"] = record["hosts"] or ""
    try:
        _fast_check()(record)
    except fastjsonschema.JsonSchemaException:  # jsonschema decides, and words the error
        errors = sorted(_VALIDATOR.iter_errors(record), key=str)
        if errors:
            message = errors[0].message
            raise LogError(f"{record['log_path']}: record does not match the record schema: {message}") from None
    return record
