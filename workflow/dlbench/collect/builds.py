"""Software builds compared, configuration by configuration: is build B faster or slower than build A, beyond the
noise, and what differs between the two (package versions, variables)?

Two runs of one configuration in two builds differ only in the variant's build part (dlbench.vocabulary.identity:
`with_build`), so the pairs are found from the config ids alone; the statistics are dlbench.collect.compare's
(ratio of medians with its bootstrap interval, a rank-test verdict), the packages are those each build's runs
recorded (environment.json's `builds`, dlbench.collect.aggregate.builds_of).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..vocabulary.axes import DEFAULT_BUILD
from ..vocabulary.identity import IdentityError, with_build
from . import stats
from .compare import ok_throughputs

SHOWN_PACKAGES = 6  # packages named per pair; the rest counted


def baseline_build(records: pd.DataFrame, config: Mapping[str, Any]) -> str:
    """The build the others are compared with: the first of the study's matrix.build that has runs."""
    listed = [*((config.get("matrix") or {}).get("build") or []), DEFAULT_BUILD]
    present = set(records["build"].fillna(DEFAULT_BUILD)) if "build" in records else {DEFAULT_BUILD}
    return next((b for b in listed if b in present), DEFAULT_BUILD)


def compare_builds(records: pd.DataFrame, baseline: str, level: float = stats.DEFAULT_LEVEL) -> pd.DataFrame:
    """One row per configuration in another build than `baseline` whose baseline-build twin is in the records:
    the twin's and this build's medians, ratio (this / baseline) with its interval, the verdict."""
    if "build" not in records or records["build"].fillna(DEFAULT_BUILD).nunique() < 2:
        return pd.DataFrame()
    runs = ok_throughputs(records)
    firsts = records.drop_duplicates("config_id")
    rows = []
    for row in firsts.to_dict(orient="records"):
        build = row.get("build") if isinstance(row.get("build"), str) else DEFAULT_BUILD
        if build == baseline:
            continue
        try:
            twin = with_build(str(row["config_id"]), baseline)
        except IdentityError:
            continue
        if twin not in set(firsts["config_id"]):
            continue
        a, b = runs.get(twin, np.array([])), runs.get(str(row["config_id"]), np.array([]))
        result = stats.compare_repeats(a, b, level)
        rows.append(
            {
                "configuration": twin,
                "framework": row["framework"],
                "model": row.get("model"),
                "build": build,
                "baseline": baseline,
                "n_baseline": len(a),
                "n_build": len(b),
                "median_baseline": float(np.median(a)) if len(a) else None,
                "median_build": float(np.median(b)) if len(b) else None,
                **result.columns(),
            }
        )
    return pd.DataFrame(rows)


def differences(env: Mapping[str, Any], framework: str, baseline: str, build: str) -> str:
    """What differs between two builds of a framework, in words: the packages whose versions differ (as their runs
    recorded them) and the variables the study sets in either."""
    recorded = (env.get("builds") or {}).get(framework) or {}
    a, b = (recorded.get(baseline) or {}).get("packages"), (recorded.get(build) or {}).get("packages")
    parts = []
    if a is None or b is None:
        parts.append("packages not recorded (runs of a dlbench before 0.13, or no ok run)")
    else:
        # versions that changed first (the framework's own among them), then packages only one build has
        changed = [f"{n} {a[n]} → {b[n]}" for n in sorted(set(a) & set(b)) if a[n] != b[n]]
        changed += [f"+{n} {b[n]}" for n in sorted(set(b) - set(a))] + [f"−{n} {a[n]}" for n in sorted(set(a) - set(b))]
        shown = changed[:SHOWN_PACKAGES] + (
            [f"{len(changed) - SHOWN_PACKAGES} more"] if changed[SHOWN_PACKAGES:] else []
        )
        parts.append(", ".join(shown) if changed else "the same packages")
    defined = ((env.get("config") or {}).get("software") or {}).get("builds") or {}
    for name in (baseline, build):
        variables = ((defined.get(name) or {}).get(framework) or {}).get("variables") or {}
        if variables:
            parts.append(f"{name} sets " + " ".join(f"{k}={v}" for k, v in sorted(variables.items())))
    return "; ".join(parts)
