"""The run record: one row of results/aggregate/records.csv, whatever log format it came from (core environment).

`workflow/schemas/record.schema.yaml` is the record's definition; `complete` gives a parser's dict every field
(None where unknown) and validates it. The parsers that make records live in dlbench.logformats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..vocabulary.axes import inputs_of
from ..vocabulary.identity import model_kind

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "record.schema.yaml"
# libyaml's loader where PyYAML has it: the schema is read at every Snakemake start, by every run's parse.
_SCHEMA: dict[str, Any] = yaml.load(SCHEMA_PATH.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
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
    errors = sorted(_VALIDATOR.iter_errors(record), key=str)
    if errors:
        raise LogError(f"{record['log_path']}: record does not match the record schema: {errors[0].message}")
    return record
