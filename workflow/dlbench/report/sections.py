"""Report sections beyond the DLPerf tables: each a titled table built from the records and the summary.

A section is a function (records, summary, environment) -> Section | None (None: nothing to show, e.g. no
MLPerf logs in the study). SECTIONS lists them in report order; render.py shows each one in index.html (one
shared table template) and README.md. A new section = a function here and a line in SECTIONS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import pandas as pd

from .format import DASH, fmt_num, fmt_text, missing


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    caption: str
    rows: list[dict[str, str]]


def _minutes(value: Any) -> str:
    return DASH if missing(value) else f"{float(value):.2f}"


def time_to_train(records: pd.DataFrame, summary: pd.DataFrame, env: dict[str, Any]) -> Section | None:
    """MLPerf sets: each run's time to train and the set's score, as mlperf_logging's result summarizer
    computes it (olympic mean; a failed run counts among the dropped slowest; scaling.json's factor)."""
    if "time_to_train_min" not in records or records["time_to_train_min"].isna().all():
        return None
    rows = []
    runs = records[records["time_to_train_min"].notna() | (records["source"] == "mlperf")]
    for run_set, group in runs.groupby(runs["run_set"].fillna(runs["config_id"]), sort=True):
        first = group.iloc[0]
        times = ", ".join(f"{_minutes(t)}{'' if s == 'ok' else f' ({s})'}"
                          for t, s in zip(group["time_to_train_min"], group["status"], strict=True))
        rows.append({
            "Set": PurePath(run_set).name if PurePath(run_set).is_absolute() else str(run_set),
            "Benchmark": fmt_text(first.get("benchmark")) or DASH,
            "Organization": fmt_text(first.get("organization")) or DASH,
            "Platform": fmt_text(first.get("platform")) or DASH, "Framework": fmt_text(first.get("framework")),
            "Runs": f"{int((group['status'] == 'ok').sum())}/{len(group)} ok",
            "Time to train (min), per run": times,
            "Score (min)": _minutes(first.get("score_min")),
            "Scaling factor": fmt_num(first.get("scaling_factor")),
        })
    return Section("time-to-train", "Time to train (MLPerf)",
                   "Time to train = first run_stop - first run_start. Score = MLPerf's: sort the runs, drop the "
                   "fastest and the slowest (a failed run counts among the dropped slowest), average the rest, "
                   "times scaling.json's factor where the result directory has one.", rows)


def throughput_definitions(records: pd.DataFrame, summary: pd.DataFrame, env: dict[str, Any]) -> Section | None:
    """Which definition of throughput each framework column uses: sources differ (dlbench: samples over the
    measured wall time; DLLogger: a mean of per-step rates; tf_cnn: its own average), so the report says."""
    if "throughput_definition" not in records or "source" not in records:
        return None
    known = records[records["throughput_definition"].notna()]
    if known.empty or set(known["source"]) == {"dlbench"}:
        return None  # our own definition is stated in the notes
    rows = [{"Framework": fmt_text(fw), "Source": fmt_text(src), "Throughput means": fmt_text(definition)}
            for (fw, src, definition), _ in known.groupby(["framework", "source", "throughput_definition"])]
    return Section("definitions", "What each throughput means",
                   "Figures from other tools keep their own definition; where a log has per-step lines, dlbench "
                   "re-derives its own and keeps the tool's final figure as throughput_reported in the data files.",
                   rows)


SECTIONS: tuple[Callable[[pd.DataFrame, pd.DataFrame, dict[str, Any]], Section | None], ...] = (
    time_to_train, throughput_definitions,
)


def build_sections(records: pd.DataFrame, summary: pd.DataFrame, env: dict[str, Any]) -> list[Section]:
    return [s for make in SECTIONS if (s := make(records, summary, env)) is not None]
