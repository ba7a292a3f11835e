"""A study's configurations across its published versions: each version's median (with its interval) per
configuration, and this version against the newest earlier version that has the configuration, with the
statistics of dlbench.collect.compare (ratio of medians, bootstrap interval, rank-test verdict).

An imported set is one more result set: a configuration an import gives one figure for (a published number) is
one point without an interval, and a change against it is "too few repeats", never a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from . import stats
from .compare import ok_throughputs

CURRENT = "this version"


def history(
    current: pd.DataFrame,
    earlier: Sequence[tuple[str, pd.DataFrame]],
    level: float = stats.DEFAULT_LEVEL,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(points, changes). points: one row per (configuration of this version, version that has it), oldest
    version first, this version last as CURRENT: n ok, median, interval. changes: one row per configuration
    that an earlier version has: this version against the newest such version (`since`)."""
    sets = [*earlier, (CURRENT, current)]
    runs = {name: ok_throughputs(records) for name, records in sets}
    configs = list(dict.fromkeys(map(str, current["config_id"])))
    points, changes = [], []
    for config in configs:
        had = [name for name, _ in earlier if config in runs[name]]
        if not had:
            continue
        for name in [*had, CURRENT]:
            values = runs[name].get(config, np.array([]))
            ci = stats.median_ci(values, level)
            points.append(
                {"configuration": config, "version": name, "n": len(values), "median": ci.median}
                | {"low": ci.low, "high": ci.high}
            )
        since = had[-1]
        result = stats.compare_repeats(runs[since][config], runs[CURRENT].get(config, np.array([])), level)
        changes.append(
            {
                "configuration": config,
                "since": since,
                "median_then": float(np.median(runs[since][config])),
                "median_now": _median(runs[CURRENT].get(config)),
                **result.columns(),
            }
        )
    return pd.DataFrame(points), pd.DataFrame(changes)


def _median(values: np.ndarray | None) -> float | None:
    return float(np.median(values)) if values is not None and len(values) else None


def slower_since(changes: pd.DataFrame) -> dict[str, list[str]]:
    """The configurations significantly slower than in the version they are compared with, by that version."""
    if changes.empty:
        return {}
    slower = changes[changes["verdict"] == "slower"]
    return {str(v): list(map(str, group["configuration"])) for v, group in slower.groupby("since", sort=False)}
