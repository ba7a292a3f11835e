"""A published report's expectations judged again: from the records, summary and study the version holds, the
versions of the study published before it (of_previous) and the published figures the study names (of_published),
by the same judge the report used (dlbench.collect.expectations). Its exit status is the verdict's: 0 when every
expectation passed, 1 when any failed or could not be judged, 2 when the report cannot be read.

    PYTHONPATH=workflow .venv/bin/python -m dlbench.judge results/reports/v3   # or results/report

Where the judgement differs from the one the version wrote (its expectations.json: a changed references file, an
edited records.csv), it says so. `--gate FILE` (the workflow's rule `expectations`) writes FILE only when every
expectation passed, so a rerun with nothing else to do judges again and exits as the report's verdict says.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from .collect import expectations as expected
from .collect import fleet
from .collect.compare import load_records
from .collect.references import study_references
from .report.publish import earlier_results
from .report.sections import confidence_level
from .vocabulary.identity import PUBLISHED_MANIFEST


class CannotJudge(Exception):
    """The report cannot be read (the message names the file)."""


def version_dir(report: Path) -> Path:
    """The published version a report directory is: itself, or the version results/report's manifest names."""
    manifest = Path(report) / Path(PUBLISHED_MANIFEST).name
    if manifest.is_file():
        return Path(json.loads(manifest.read_text(encoding="utf-8"))["path"])
    return Path(report)


def judge_again(report: Path) -> list[dict[str, Any]]:
    """The judgements of the version `report` is, made again from what it holds (CannotJudge where it cannot)."""
    version = version_dir(report)
    try:
        env = json.loads((version / "environment.json").read_text(encoding="utf-8"))
        records = load_records(version)
        summary = pd.read_csv(version / "summary.csv")
    except (OSError, ValueError, pd.errors.ParserError) as error:
        raise CannotJudge(f"{version}: not a readable report ({error})") from None
    config = env.get("config") or {}
    earlier = earlier_results(version.parent)
    names = [name for name, _ in earlier]
    before = earlier[: names.index(version.name)] if version.name in names else earlier
    try:
        published = study_references(config)
    except OSError as error:
        raise CannotJudge(f"{version}: the study's references cannot be read ({error})") from None
    down = fleet.nodes_of((env.get("sweep") or {}).get("nodes") or [])
    level = confidence_level(env)
    return expected.judge(config.get("expectations") or [], records, summary, before, published, level, down)


def verdicts(judgements: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What two judgements of one report must agree on: each expectation's verdict on each configuration (the
    figures they were judged on are floats read back from CSV)."""
    return [(j["index"], j["configuration"], j["verdict"]) for j in judgements]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.judge", description=__doc__.split("\n\n")[0])
    p.add_argument("report", type=Path, help="a report directory (results/report, results/reports/v3)")
    p.add_argument("--gate", type=Path, help="a file written only when every expectation passed")
    args = p.parse_args(argv)
    if args.gate:
        args.gate.unlink(missing_ok=True)
    try:
        judgements = judge_again(args.report)
    except CannotJudge as error:
        print(f"dlbench: expectations: {error}", file=sys.stderr)
        return 2
    version = version_dir(args.report)
    written = version / expected.FILE
    if written.is_file() and verdicts(expected.read(written)) != verdicts(judgements):
        print(
            f"dlbench: expectations: judged again, they differ from those {written} holds "
            f"({expected.summary_line(expected.read(written))}): its records or references changed since",
            file=sys.stderr,
        )
    for line in expected.failure_lines(judgements):
        print(f"dlbench: {line}", file=sys.stderr)
    counts = expected.counts(judgements)
    said = expected.summary_line(judgements) or "none stated"
    print(f"dlbench: expectations of {version.name}: {said}", file=sys.stderr)
    if counts[expected.FAIL] or counts[expected.UNJUDGED]:
        return 1
    if args.gate:
        args.gate.write_text(f"{version.name}: {said}\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
