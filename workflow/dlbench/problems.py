"""What a Snakemake run says at its end about inputs it could not read.

A log that cannot be read becomes an `error` record naming its file and line (dlbench.logformats), so nothing
stops; said only in the report, it would pass unnoticed. At the end of every run (the Snakefile's onsuccess and
onerror) `problem_lines` gives one line per such record and `note_lines` one per file an import did not read as
a run, each naming the file; workflow/rules/common.smk prints them.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path


def problem_lines(records_csv: str | Path) -> list[str]:
    """One line per record of results/aggregate/records.csv that ended in an error (`error`: an unreadable log,
    a failed input, a crashed run; its message names the file and, where known, the line)."""
    lines = []
    if Path(records_csv).exists():
        with open(records_csv, encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                if row.get("status") == "error":
                    message = row.get("error") or "no message"
                    path = row.get("log_path") or row.get("run_id") or "?"
                    lines.append(message if path in message else f"{path}: {message}")
    return lines


def note_lines(notes: Iterable[str | Path]) -> list[str]:
    """The imports' notes (imports.notes_path): each file of an import not read as a run, and what was done."""
    return [
        line for path in notes if Path(path).exists() for line in Path(path).read_text("utf-8").splitlines() if line
    ]
