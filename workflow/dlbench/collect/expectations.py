"""Expectations a study states about its figures, judged pass, fail or cannot be judged: a cluster's acceptance test.

    expectations:
      - match: {model: resnet50, precision: amp}   # a selector over the axes (every configuration it matches)
        at_least: 2600                             # an absolute floor, in the configuration's unit
      - match: {model: resnet50}
        of_previous: 0.95                          # >= 0.95 x the newest earlier published version
      - match: {framework: pytorch, build: site}
        of_build: {pypi: 0.97}                     # >= 0.97 x the same configuration in build pypi
      - match: {model: resnet50}
        of_published: 0.95                         # >= 95% of the published figure that matches it
      - match: {model: resnet50}
        of_fleet: 0.95                             # a sweep: each node >= 0.95 x the rest of the fleet

Each is judged on an interval at the report's level, so noise is never a verdict: a floor F (at_least, or the factor
times the published figure) passes when the median's interval lies at or above F and fails when it lies below; a
factor f of another set (of_previous, of_build; of_fleet: the node's ratio to the rest of the fleet, as the
report's fleet table computes it, dlbench.collect.fleet) passes when the ratio of medians' bootstrap interval lies at or
above f and fails when it lies below. An interval that straddles the bound, too few repeats for an interval, or
nothing to compare with (no earlier version, no such build, no published figure, a sweep's node that took no
job) cannot be judged, which is not a
pass. A configuration with no successful run fails every expectation on it.

A published report is judged again, from its own records, by `python -m dlbench.judge <report>`
(dlbench.judge), which the workflow's rule `expectations` runs after each report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..vocabulary.axes import DEFAULT_BUILD
from ..vocabulary.identity import IdentityError, parse_config_id, with_build
from . import fleet, stats
from .compare import ok_throughputs
from .references import match_references

PASS, FAIL, UNJUDGED = "pass", "fail", "cannot be judged"
KINDS = ("at_least", "of_previous", "of_build", "of_published", "of_fleet")
FILE = "expectations.json"  # beside a report's index.html


@dataclass(frozen=True)
class Expectation:
    index: int
    match: Mapping[str, Any]
    kind: str  # one of KINDS
    bound: float  # the floor, or the factor
    other: str = ""  # of_build: the build compared with

    @classmethod
    def of(cls, index: int, entry: Mapping[str, Any]) -> Expectation:
        kind = next(k for k in KINDS if k in entry)
        if kind == "of_build":
            ((other, factor),) = entry[kind].items()
            return cls(index, entry.get("match") or {}, kind, float(factor), str(other))
        return cls(index, entry.get("match") or {}, kind, float(entry[kind]))

    def words(self) -> str:
        """The expectation as the report states it."""
        where = ", ".join(f"{k} {v}" for k, v in self.match.items()) or "every configuration"
        bound = {
            "at_least": f"throughput ≥ {self.bound:g}",
            "of_previous": f"≥ {self.bound:g} × the previous version",
            "of_build": f"≥ {self.bound:g} × build {self.other}",
            "of_published": f"≥ {self.bound:g} × the published figure",
            "of_fleet": f"≥ {self.bound:g} × the fleet",
        }[self.kind]
        return f"expectations[{self.index}] ({where}): {bound}"


def matches(selector: Mapping[str, Any], config_id: str) -> bool:
    """Whether a configuration's axes (as its id spells them) have every value the selector names."""
    try:
        axes = parse_config_id(config_id)
    except IdentityError:
        return False
    axes["build"] = axes.get("build") or DEFAULT_BUILD
    return all(str(axes.get(key)) == str(value) for key, value in selector.items())


def _bounded(low: float | None, high: float | None, bound: float) -> str | None:
    """PASS when the interval lies at or above the bound, FAIL when below it, None when it straddles it."""
    if low is None or high is None or np.isnan(low) or np.isnan(high):
        return None
    return PASS if low >= bound else FAIL if high < bound else None


def judge(
    entries: Sequence[Mapping[str, Any]],
    records: pd.DataFrame,
    summary: pd.DataFrame,
    earlier: Sequence[tuple[str, pd.DataFrame]] = (),
    published: pd.DataFrame | None = None,
    level: float = stats.DEFAULT_LEVEL,
    unavailable: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One judgement per (expectation, configuration it matches), in the study's order; an expectation that
    matches no configuration is one judgement that cannot be made. of_fleet: also one per sweep node that took no
    job (`unavailable`: node -> why), which cannot be judged."""
    runs = ok_throughputs(records)
    earlier_runs = [(name, ok_throughputs(r)) for name, r in earlier]
    rows = {str(r["config_id"]): {str(k): v for k, v in r.items()} for r in summary.to_dict(orient="records")}
    figures = _published(summary, published)
    ratios: dict[str, tuple[stats.RatioCI, str]] = {}
    if any("of_fleet" in entry for entry in entries):
        ratios = fleet.ratios_by_config(records, level)
    out: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        expectation = Expectation.of(index, entry)
        hits = [c for c in rows if matches(expectation.match, c)]
        if not hits:
            out.append(_verdict(expectation, "", UNJUDGED, "matches no configuration of this report"))
        for config in hits:
            if expectation.kind == "of_fleet":
                out.append(_judge_fleet(expectation, config, rows[config], runs, ratios))
                continue
            out.append(_judge_one(expectation, config, rows[config], runs, earlier_runs, figures, level))
        if expectation.kind == "of_fleet":
            for node, why in (unavailable or {}).items():
                out.append(_verdict(expectation, f"node {node}", UNJUDGED, f"took no job: {why}"))
    return out


def _judge_fleet(
    expectation: Expectation,
    config: str,
    row: Mapping[str, Any],
    runs: Mapping[str, np.ndarray],
    ratios: Mapping[str, tuple[stats.RatioCI, str]],
) -> dict[str, Any]:
    if config not in ratios:
        return _verdict(expectation, config, UNJUDGED, "not a sweep's run (no node): no fleet to compare with")
    if len(runs.get(config, ())) == 0:
        return _verdict(expectation, config, FAIL, f"no successful run ({row.get('statuses') or 'none'})")
    ratio, seen = ratios[config]
    if ratio.ratio is None:
        return _verdict(expectation, config, UNJUDGED, ratio.note)
    interval = f"[{ratio.low:.3f}, {ratio.high:.3f}]" if ratio.ok else "(no interval)"
    measured = f"{ratio.ratio:.3f} × the fleet {interval}" + (f" (its runs saw {seen})" if seen else "")
    return _decide(expectation, config, expectation.bound, measured, (ratio.ratio, ratio.low, ratio.high), ratio.note)


def _published(summary: pd.DataFrame, published: pd.DataFrame | None) -> dict[str, tuple[float, str]]:
    """The published figure each configuration matches (the first), with its label."""
    if published is None or published.empty or summary.empty:
        return {}
    matched = match_references(summary, published)
    return {
        str(r["config_id"]): (float(r["published"]), f"{r['label']} ({r['device']})")
        for r in matched.drop_duplicates("config_id").to_dict(orient="records")
    }


def _judge_one(
    expectation: Expectation,
    config: str,
    row: Mapping[str, Any],
    runs: Mapping[str, np.ndarray],
    earlier: Sequence[tuple[str, Mapping[str, np.ndarray]]],
    figures: Mapping[str, tuple[float, str]],
    level: float,
) -> dict[str, Any]:
    mine = runs.get(config, np.array([]))
    if row.get("metric") == "time_to_train":
        return _verdict(
            expectation, config, UNJUDGED, "a time to train (lower is better): expectations judge throughput"
        )
    if len(mine) == 0:
        return _verdict(expectation, config, FAIL, f"no successful run ({row.get('statuses') or 'none'})")
    if expectation.kind in ("at_least", "of_published"):
        return _judge_floor(expectation, config, mine, figures, level)
    if expectation.kind == "of_previous":
        before = [(name, r[config]) for name, r in earlier if config in r]
        if not before:
            return _verdict(expectation, config, UNJUDGED, "no earlier published version has this configuration")
        against, other = before[-1]
    else:
        twin = with_build(config, expectation.other)
        if twin not in runs:
            return _verdict(expectation, config, UNJUDGED, f"no ok run of build {expectation.other} ({twin})")
        against, other = f"build {expectation.other}", runs[twin]
    ratio = stats.ratio_ci(mine, other, level)
    interval = f"[{ratio.low:.3f}, {ratio.high:.3f}]" if ratio.ok else "(no interval)"
    measured = f"{ratio.ratio:.3f} × {against} {interval}"
    return _decide(
        expectation, config, expectation.bound, measured, (ratio.ratio, ratio.low, ratio.high), ratio.note, level
    )


def _judge_floor(
    expectation: Expectation,
    config: str,
    mine: np.ndarray,
    figures: Mapping[str, tuple[float, str]],
    level: float,
) -> dict[str, Any]:
    floor, what = expectation.bound, f"{expectation.bound:g}"
    if expectation.kind == "of_published":
        if config not in figures:
            return _verdict(expectation, config, UNJUDGED, "no published figure matches this configuration")
        figure, label = figures[config]
        floor, what = expectation.bound * figure, f"{expectation.bound:g} × {figure:g} ({label})"
    ci = stats.median_ci(mine, level)
    interval = f"[{ci.low:.4g}, {ci.high:.4g}]" if ci.ok else "(no interval)"
    measured = f"median {ci.median:.4g} {interval} against {what}"
    return _decide(expectation, config, floor, measured, (ci.median, ci.low, ci.high), ci.note, level)


def _decide(
    expectation: Expectation,
    config: str,
    bound: float,
    measured: str,
    figure: tuple[float | None, float | None, float | None],
    note: str,
    level: float = stats.DEFAULT_LEVEL,
) -> dict[str, Any]:
    """The judgement of a figure (value, low, high) against its bound: `measured` says what it was judged on;
    without a verdict, why (`note` when there is no interval)."""
    value, low, high = figure
    verdict = _bounded(low, high, bound)
    if verdict is None:
        why = note if low is None else f"the {level:.0%} interval contains {bound:.4g}: more repeats"
        return _verdict(expectation, config, UNJUDGED, f"{measured}: {why}", value, low, high)
    return _verdict(expectation, config, verdict, measured, value, low, high)


def _verdict(
    expectation: Expectation,
    config: str,
    verdict: str,
    reason: str,
    value: float | None = None,
    low: float | None = None,
    high: float | None = None,
) -> dict[str, Any]:
    return {
        "expectation": expectation.words(),
        "index": expectation.index,
        "kind": expectation.kind,
        "configuration": config,
        "verdict": verdict,
        "value": value,
        "low": low,
        "high": high,
        "reason": reason,
    }


def counts(judgements: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return {v: sum(j["verdict"] == v for j in judgements) for v in (PASS, FAIL, UNJUDGED)}


def summary_line(judgements: Sequence[Mapping[str, Any]]) -> str:
    """'3 pass, 1 fail, 1 cannot be judged' (empty without expectations)."""
    if not judgements:
        return ""
    return ", ".join(f"{n} {verdict}" for verdict, n in counts(judgements).items() if n)


def failure_lines(judgements: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per judgement that is not a pass: what was expected, of which configuration, and why."""
    return [
        f"{j['verdict'].upper()}: {j['expectation']}: {j['configuration'] or '-'}: {j['reason']}"
        for j in judgements
        if j["verdict"] != PASS
    ]


def write(path: Path, judgements: Sequence[Mapping[str, Any]]) -> None:
    path.write_text(json.dumps({"judgements": list(judgements), "counts": counts(judgements)}, indent=2) + "\n")


def read(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(Path(path).read_text(encoding="utf-8"))["judgements"])
