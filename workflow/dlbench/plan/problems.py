"""What a Snakemake run says at its end about inputs it could not read, and damaged run logs set aside to be redone.

A log that cannot be read becomes an `error` record naming its file and line (dlbench.logformats), so nothing
stops; said only in the report, it would pass unnoticed. At the end of every run (the Snakefile's onsuccess and
onerror) `problem_lines` gives one line per such record and `note_lines` one per file an import did not read as
a run, each naming the file.

A run log (results/runs/.../rep<N>.jsonl) is complete by construction: the harness writes `<log>.partial` and
renames it only once its summary line is written. One that is not whole (runlog.incomplete: its header first, its
summary last, as many measured steps as the header asks for before an ok summary) was damaged afterwards (a
truncated copy, a full disk while restoring, an edit, a summary line alone); `set_aside_damaged` renames it to
`<log>.damaged` (kept, never deleted) before the DAG is built, so Snakemake runs it again.
Where this lives: the set-aside and the printing are dlbench.plan.session's (set_aside_damaged_run_logs,
print_problems), called from workflow/rules/common.smk and the Snakefile.
"""

from __future__ import annotations

import csv
import re
from base64 import urlsafe_b64decode
from collections.abc import Iterable
from pathlib import Path

from ..harness.runlog import incomplete

DAMAGED_SUFFIX = ".damaged"


RUN_LOG_NAME = re.compile(r"rep\d+\.jsonl")  # identity.RUN_LOG_PATTERN's file name


def damaged_run_logs(runs_dir: str | Path) -> list[tuple[Path, str]]:
    """The run logs under runs_dir that are not whole, each with why (runlog.incomplete)."""
    logs = (path for path in sorted(Path(runs_dir).rglob("rep*.jsonl")) if RUN_LOG_NAME.fullmatch(path.name))
    return [(path, why) for path in logs if (why := incomplete(path)) is not None]


def set_aside_damaged(runs_dir: str | Path, dependants: Iterable[str | Path]) -> list[str]:
    """Rename each damaged run log to <log>.damaged (replacing an older one of the same run) and remove the
    outputs between the run logs and the study's target (the aggregate's records, the report rule's manifest:
    both made again from their inputs; the published report versions are no rule's output and stay), so
    Snakemake, which does not redo a missing file whose dependants are up to date, runs it again; one line per
    log, naming both files."""
    lines = []
    for path, why in damaged_run_logs(runs_dir):
        aside = path.with_name(path.name + DAMAGED_SUFFIX)
        path.replace(aside)
        lines.append(f"{path}: {why} (damaged after the run); kept as {aside}, run again")
    if lines:
        for dependant in dependants:
            Path(dependant).unlink(missing_ok=True)
    return lines


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


def finished_but_marked(metadata_dir: str | Path) -> list[tuple[Path, Path]]:
    """Run logs Snakemake still marks incomplete although they are whole: a run that ended and renamed its log
    just before Snakemake was stopped (Ctrl-C), whose end Snakemake never recorded; `rerun-incomplete` would run
    it again. (log, Snakemake's marker) pairs, read from Snakemake's file-based metadata (.snakemake/incomplete:
    each marker's path spells its output's path in URL-safe base64, split into '@'-prefixed parts when long)."""
    markers = Path(metadata_dir, "incomplete")
    found = []
    for marker in sorted(p for p in markers.rglob("*") if p.is_file()) if markers.is_dir() else []:
        spelled = "".join(part.removeprefix("@") for part in marker.relative_to(markers).parts)
        try:
            log = Path(metadata_dir).parent / urlsafe_b64decode(spelled.encode()).decode()  # from the workdir
        except (ValueError, UnicodeDecodeError):
            continue  # not a marker of an output path (Snakemake's own files)
        if RUN_LOG_NAME.fullmatch(log.name) and log.is_file() and incomplete(log) is None:
            found.append((log, marker))
    return found
