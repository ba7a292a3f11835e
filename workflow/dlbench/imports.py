"""Imports: existing logs turned into records beside the study's own runs (core environment).

A study's `imports:` entry names a log format (dlbench.logformats), the files (paths, directories, globs) and
the labels the logs cannot carry; an optional `path_pattern` reads labels from each file's path, like DLPerf's
`<framework>/<bsz>/<nodes>n<gpus>g/r<N>.log` trees. The rule `import_logs` writes one JSON line per file to
results/imports/<name>.jsonl; `aggregate` reads those records like the parsed run logs.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
from pathlib import Path
from typing import Any

from . import logformats
from .collect.records import LogError
from .vocabulary.axes import MODEL_AXES

# Labels that are whole numbers wherever they come from (a path pattern gives text): the integer model axes too.
INTEGER_LABELS = (
    "batch_size",
    "nodes",
    "devices_per_node",
    "repeat",
    *(axis.name for axis in MODEL_AXES if (axis.values or {}).get("type") == "integer"),
    "measured_steps",
    "warmup_steps",
)


class ImportProblem(ValueError):
    """An import entry that cannot be read (named by the message)."""


def expand_paths(paths: list[str], base_dir: Path = Path(".")) -> list[Path]:
    """Every file the entry's paths name: files as given, directories recursively, globs expanded; sorted.
    A path that names nothing is a problem, reported with the path."""
    files: list[Path] = []
    for text in paths:
        path = Path(base_dir, text)
        if glob.has_magic(text):
            found = [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if Path(p).is_file()]
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        else:
            found = [path] if path.is_file() else []
        if not found:
            raise ImportProblem(f"{text}: no such file, or nothing matches")
        files += found
    return sorted(dict.fromkeys(files))


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """'{framework}/bs{batch_size}/r{repeat}.log' -> a regex matching the end of a path, one group per field."""
    parts = re.split(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", pattern)
    regex = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+?)" for i, part in enumerate(parts))
    return re.compile(f"(?:^|/){regex}$")


def labels_from_path(path: Path, pattern: str | None) -> dict[str, Any]:
    if not pattern:
        return {}
    match = pattern_regex(pattern).search(path.as_posix())
    if not match:
        raise ImportProblem(f"{path}: does not match path_pattern {pattern!r}")
    return {
        key: int(value) if key in INTEGER_LABELS and value.isdigit() else value
        for key, value in match.groupdict().items()
    }


def file_labels(path: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """The labels of one file: the entry's, overridden by what its path says; topology from nodes x devices
    (nodes and devices_per_node themselves are not labels: the record derives them from the topology)."""
    labels = {**entry.get("labels", {}), **labels_from_path(path, entry.get("path_pattern"))}
    if {"nodes", "devices_per_node"} <= set(labels):
        nodes, per_node = labels.pop("nodes"), labels.pop("devices_per_node")
        labels.setdefault("topology", f"{nodes}x{per_node}")
    return labels


def run_logs_of(entry: dict[str, Any], files: list[Path], named: set[Path]) -> tuple[list[Path], list[str]]:
    """The files of an entry that are run logs (logformats.run_logs) and a note for each other file. An entry
    whose paths hold no run log would import nothing (and publish an empty report): a problem naming its paths
    and what they hold."""
    logs, notes = logformats.run_logs(entry["format"], files, named)
    if not logs:
        found = f"{len(files)} file{'' if len(files) == 1 else 's'}"
        raise ImportProblem(
            f"{', '.join(entry['paths'])}: no {entry['format']} run log among its {found} "
            f"({'; '.join(notes[:3])}{'; ...' if len(notes) > 3 else ''}): name the logs themselves in paths, or "
            "a directory that holds them"
        )
    return logs, notes


def check_entries(entries: list[dict[str, Any]], base_dir: Path = Path(".")) -> list[str]:
    """Problems of a study's imports (unknown format, duplicate name, missing paths, paths that hold no run log or
    do not fit the pattern), each naming the entry; checked before any job runs."""
    problems, seen = [], set()
    for i, entry in enumerate(entries):
        where = f"imports[{i}] ({entry['name']})"
        if entry["name"] in seen:
            problems.append(f"{where}: the name {entry['name']!r} is used twice")
        seen.add(entry["name"])
        if entry["format"] not in logformats.FORMATS:
            problems.append(
                f"{where}.format: {entry['format']!r} is not a known log format "
                f"(known: {', '.join(logformats.FORMATS)})"
            )
        try:
            files = expand_paths(entry["paths"], base_dir)
            if entry["format"] not in logformats.FORMATS:
                continue  # which files are its logs, only a known format says
            logs, _ = run_logs_of(entry, files, named_files(entry["paths"], base_dir))
            for path in logs:
                labels_from_path(path, entry.get("path_pattern"))
        except ImportProblem as problem:
            problems.append(f"{where}.paths: {problem}")
    return problems


def named_files(paths: list[str], base_dir: Path = Path(".")) -> set[Path]:
    """The files an entry names itself (not through a directory or a glob): logs whatever their names."""
    return {Path(base_dir, text) for text in paths if not glob.has_magic(text) and Path(base_dir, text).is_file()}


def import_records(
    entry: dict[str, Any], files: list[Path], named: set[Path] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """(one record per run log, in the entry's format, with its labels and per-set figures such as MLPerf's
    score filled in; a note for each other file, e.g. an MLPerf result directory's scaling.json). `named`: the
    files the entry names itself, logs whatever their names (default: every file)."""
    logs, notes = run_logs_of(entry, files, set(files) if named is None else named)
    records = [logformats.parse(path, entry["format"], file_labels(path, entry)) for path in logs]
    return logformats.score_sets(entry["format"], records), notes


def notes_path(out: Path) -> Path:
    """Where an import's notes (files not read as runs) are kept beside its records."""
    return out.with_name(out.name.removesuffix(".jsonl") + ".notes")


def write_records(records: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records), encoding="utf-8")
    tmp.replace(out)


def read_records(paths: list[str | Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for p in paths for line in Path(p).read_text(encoding="utf-8").splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.imports", description="Parse one import entry's logs.")
    p.add_argument("--entry", required=True, help="the import entry as JSON (name, format, paths, labels, ...)")
    p.add_argument("--out", required=True, type=Path, help="records as JSON lines")
    args = p.parse_args(argv)
    entry = json.loads(args.entry)
    try:
        records, notes = import_records(entry, expand_paths(entry["paths"]), named_files(entry["paths"]))
    except (ImportProblem, logformats.UnknownFormat, LogError) as problem:
        print(f"dlbench: import {entry.get('name')}: {problem}", file=sys.stderr)
        return 1
    for note in notes:
        print(f"dlbench: import {entry['name']}: {note}", file=sys.stderr)
    write_records(records, args.out)
    notes_path(args.out).write_text("".join(f"{note}\n" for note in notes), encoding="utf-8")
    print(f"dlbench: import {entry['name']}: {len(records)} records -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
