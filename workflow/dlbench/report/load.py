"""Read the aggregate step's tables into typed frames (records.csv, summary.csv, environment.json)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..collect.records import field_types

# Column types used to normalise both CSVs (everything else stays a string).
# Typed columns: the record's come from its schema; the summary's own are listed here (aggregate.py makes them).
_RECORD_TYPES = field_types()
SUMMARY_INT = (
    "n_total",
    "n_ok",
    "n_failed",
    "steady_runs",
    "nonsteady_runs",
    "warmup_unstable_runs",
    "contended_runs",
    "throttled_runs",
)
SUMMARY_FLOAT = (
    "median",
    "reported_median",
    "min",
    "max",
    "q25",
    "q75",
    "iqr",
    "cv",
    "ci_low",
    "ci_high",
    "ci_level",
    "ci_coverage",
    "speedup",
    "efficiency",
    "speedup_low",
    "speedup_high",
    "efficiency_low",
    "efficiency_high",
    "tflops",
    "mfu",
    "peak_tflops",
    "peak_memory_gb",
    "energy_ci_low",
    "energy_ci_high",
    "target_accuracy",
    "score_min",
    "samples_to_converge",
    "eval_share",
)
INT_COLUMNS = (*(n for n, t in _RECORD_TYPES.items() if t == "integer"), *SUMMARY_INT)
FLOAT_COLUMNS = (*(n for n, t in _RECORD_TYPES.items() if t == "number"), *SUMMARY_FLOAT)
BOOL_COLUMNS = tuple(n for n, t in _RECORD_TYPES.items() if t == "boolean")
RECORD_COLUMNS = (
    "run_id",
    "config_id",
    "framework",
    "model",
    "topology",
    "nodes",
    "devices_per_node",
    "devices",
    "repeat",
    "status",
    "error",
    "hosts",
    "log_path",
)


def to_bool(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return pd.NA
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "y", "on"):
        return True
    if text in ("false", "0", "no", "n", "off"):
        return False
    return pd.NA


def read_table(path: Path, required: Sequence[str]) -> pd.DataFrame:
    """Read a CSV as strings (so ids/commits are never mangled), then type known columns.

    Only empty cells become missing; ints become nullable Int64, bools nullable boolean.
    """
    df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    for col in required:
        if col not in df.columns:
            df[col] = pd.NA
    for col in df.columns:
        if col in INT_COLUMNS:
            df[col] = pd.to_numeric(df[col], errors="coerce").round().astype("Int64")
        elif col in FLOAT_COLUMNS:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
        elif col in BOOL_COLUMNS:
            df[col] = df[col].map(to_bool).astype("boolean")
        else:
            df[col] = df[col].astype(object).where(df[col].notna(), None)
    if "topology" in df.columns and {"nodes", "devices_per_node"} <= set(df.columns):
        missing = df["topology"].isna() & df["nodes"].notna() & df["devices_per_node"].notna()
        df.loc[missing, "topology"] = (
            df.loc[missing, "nodes"].astype(str) + "x" + df.loc[missing, "devices_per_node"].astype(str)
        )
    return df


def load_environment(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        env = json.load(fh)
    return env if isinstance(env, dict) else {}
