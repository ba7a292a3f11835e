"""A sweep's fleet (the study's `sweep:`): per configuration, every node's figure against the rest of the fleet.

For each configuration (its id without the node part) and each node it ran on: the node's median throughput with
its interval (stats.median_ci), its ratio to the fleet's median with a bootstrap interval (stats.ratio_ci, the
same statistics as the build comparison and the expectations), and a verdict at the study's tolerance (`sweep:
tolerance`, 0.95 by default):

    within     the ratio's interval lies at or above the tolerance
    slow       the ratio's interval lies below the tolerance
    unstable   the interval contains the tolerance and is wider than the band between the tolerance and its
               mirror above 1 (2 x (1 - tolerance)): the repeats are too spread to judge
    undecided  the interval contains the tolerance and is narrower: more repeats
    too few    fewer ok repeats than an interval needs (stats.MIN_RATIO_REPEATS)
    no fleet   no other node has an ok run of the configuration
    failed     no ok run
    down       the node took no job: SLURM said down, drained, failed or in maintenance when it was planned

Only `within` is a pass. The fleet's reference for a node is the median of the other nodes' medians (one slow
node hardly moves it, where it would drag a pooled median of every run); above LEAVE_ONE_OUT_NODES nodes, the
median of every node's medians (one node's own share is then below the bootstrap's noise). Beside each row stands
the hardware its runs reported (CPU and GPU model, clocks, power, throttle reasons: the telemetry's), a slow
node's probable cause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..vocabulary.identity import IdentityError, with_node
from . import stats
from .compare import ok_throughputs

WITHIN, SLOW, UNSTABLE, UNDECIDED, TOO_FEW, ALONE, FAILED, DOWN = (
    "within",
    "slow",
    "unstable",
    "undecided",
    "too few repeats",
    "no fleet",
    "failed",
    "down",
)
ALONE_NOTE = "no other node has an ok run of this configuration"
DEFAULT_TOLERANCE = 0.95  # the config schema's sweep.tolerance default
LEAVE_ONE_OUT_NODES = 50
# The telemetry's columns that say what a node's hardware did (records.csv), and the words each goes under.
HARDWARE = (
    ("cpu_model", "CPU"),
    ("device_name", "GPU"),
    ("gpu_sm_clock_mean_mhz", "SM MHz"),
    ("gpu_sm_clock_min_mhz", "min SM MHz"),
    ("power_mean_w", "W"),
    ("gpu_temp_max_c", "max °C"),
    ("cpu_freq_mhz_mean", "CPU MHz"),
    ("throttle_reasons", "throttled"),
)


def fleet_key(config_id: str) -> str | None:
    """The configuration a sweep's run belongs to, whatever its node (None: not an id of dlbench's)."""
    try:
        return with_node(config_id, None)
    except IdentityError:
        return None


def hardware(runs: pd.DataFrame) -> dict[str, Any]:
    """What a node's runs reported: the first text, the median of each number, the throttle reasons seen."""
    out: dict[str, Any] = {}
    for column, _ in HARDWARE:
        if column not in runs:
            continue
        values = runs[column].dropna()
        if column == "throttle_reasons":
            reasons = sorted({r for v in values.astype(str) for r in v.replace(";", ",").split(",") if r.strip()})
            out[column] = ", ".join(r.strip() for r in reasons) or None
        elif pd.api.types.is_numeric_dtype(values) and len(values):
            out[column] = float(values.median())
        else:
            out[column] = str(values.iloc[0]) if len(values) else None
    if out.get("device_name") == out.get("cpu_model"):  # a CPU run's device is its CPU: said once
        out["device_name"] = None
    return out


def hardware_words(row: Mapping[Any, Any]) -> str:
    """The hardware of a fleet row in a few words ('AMD EPYC; 1,410 SM MHz (min 1,005); 690 W; throttled: ...')."""
    parts = []
    for column, words in HARDWARE:
        value = row.get(column)
        if value is None or (isinstance(value, float) and np.isnan(value)) or value == "":
            continue
        parts.append(f"{words} {value:,.0f}" if isinstance(value, float) else f"{words}: {value}")
    return "; ".join(parts)


def verdict_of(ratio: stats.RatioCI, n_ok: int, tolerance: float) -> tuple[str, str]:
    """The verdict of a node's ratio to the fleet, and why."""
    if n_ok == 0:
        return FAILED, "no ok run"
    if ratio.ratio is None:
        return ALONE, ratio.note
    if not ratio.ok:
        return TOO_FEW, ratio.note
    assert ratio.low is not None and ratio.high is not None
    interval = f"ratio {ratio.ratio:.3f} [{ratio.low:.3f}, {ratio.high:.3f}]"
    if ratio.high < tolerance:
        return SLOW, f"{interval} lies below {tolerance:g}"
    if ratio.low >= tolerance:
        return WITHIN, f"{interval} at or above {tolerance:g}"
    if ratio.high - ratio.low > 2 * (1 - tolerance):
        return UNSTABLE, f"{interval} contains {tolerance:g} and is too wide to judge: the repeats are too spread"
    return UNDECIDED, f"{interval} contains {tolerance:g}: more repeats"


def ratios_by_config(records: pd.DataFrame, level: float = stats.DEFAULT_LEVEL) -> dict[str, tuple[stats.RatioCI, str]]:
    """Each sweep run's configuration (its config id, node included) -> its node's ratio to the rest of the fleet,
    and what the node's hardware reported (hardware_words)."""
    if records.empty or "node" not in records or records["node"].dropna().empty:
        return {}
    swept = records[records["node"].notna()]
    runs = ok_throughputs(swept)
    out: dict[str, tuple[stats.RatioCI, str]] = {}
    keys = [fleet_key(str(c)) for c in swept["config_id"]]
    for _, of_config in swept.groupby(keys, sort=False):
        parts = {str(node): part for node, part in of_config.groupby("node", sort=False)}
        ids = {node: str(part["config_id"].iloc[0]) for node, part in parts.items()}
        ratios = node_ratios({node: runs.get(config, np.array([])) for node, config in ids.items()}, level)
        out |= {ids[node]: (ratio, hardware_words(hardware(parts[node]))) for node, ratio in ratios.items()}
    return out


def fleet_table(
    records: pd.DataFrame,
    unavailable: Mapping[str, str] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    level: float = stats.DEFAULT_LEVEL,
) -> pd.DataFrame:
    """One row per (configuration, node) of a sweep's records, and one per configuration and node that took no
    job (`unavailable`: node -> why), sorted by configuration and ratio (slowest first, those without a ratio
    last). Empty outside a sweep."""
    if records.empty or "node" not in records or records["node"].dropna().empty:
        return pd.DataFrame()
    swept = records[records["node"].notna()].copy()
    swept["configuration"] = [fleet_key(str(c)) for c in swept["config_id"]]
    unavailable = unavailable or {}
    runs = ok_throughputs(swept)
    rows: list[dict[str, Any]] = []
    for configuration, of_config in swept.groupby("configuration", sort=False):
        per_node = {str(node): part for node, part in of_config.groupby("node", sort=False)}
        values = {node: runs.get(str(part["config_id"].iloc[0]), np.array([])) for node, part in per_node.items()}
        ratios = node_ratios(values, level)
        pooled = np.concatenate([v for v in values.values()]) if values else np.array([])
        fleet_median = float(np.median(pooled)) if len(pooled) else None
        for node, part in per_node.items():
            mine = values[node]
            ci = stats.median_ci(mine, level)
            verdict, why = verdict_of(ratios[node], len(mine), tolerance)
            if node in unavailable:  # runs from before it went down: read, none new
                why += f"; now {unavailable[node]} in SLURM (these runs are from before; no new one)"
            rows.append(
                {
                    "configuration": configuration,
                    "node": node,
                    "config_id": str(part["config_id"].iloc[0]),
                    "framework": part["framework"].iloc[0],
                    "model": part["model"].iloc[0],
                    "unit": part["unit"].iloc[0] if "unit" in part else None,
                    "n_ok": len(mine),
                    "n_total": len(part),
                    "median": ci.median,
                    "ci_low": ci.low,
                    "ci_high": ci.high,
                    "fleet_median": fleet_median,
                    "ratio": ratios[node].ratio,
                    "ratio_low": ratios[node].low,
                    "ratio_high": ratios[node].high,
                    "verdict": verdict,
                    "why": why,
                    **hardware(part),
                }
            )
        for node, why in unavailable.items():
            if node not in per_node:
                rows.append(
                    {
                        "configuration": configuration,
                        "node": node,
                        "n_ok": 0,
                        "n_total": 0,
                        "fleet_median": fleet_median,
                        "verdict": DOWN,
                        "why": why,
                    }
                )
    table = pd.DataFrame(rows)
    table["_order"] = table["ratio"].fillna(np.inf) if "ratio" in table else np.inf  # the nodes without one last
    return table.sort_values(["configuration", "_order"], kind="stable").drop(columns="_order").reset_index(drop=True)


def node_ratios(values: Mapping[str, np.ndarray], level: float) -> dict[str, stats.RatioCI]:
    """Each node's ratio to the rest of the fleet: its median ÷ the median of the other nodes' medians (a slow node
    moves that reference less than it would a pooled median), with a percentile-bootstrap interval in which every
    node's runs are resampled. Above LEAVE_ONE_OUT_NODES nodes the reference is every node's medians."""
    nodes = [node for node in values if len(values[node])]
    out = {node: stats.RatioCI(None, None, None, level, 0, 0, "no ok run") for node in values if node not in nodes}
    if len(nodes) < 2:
        return out | {node: stats.RatioCI(None, None, None, level, len(values[node]), 0, ALONE_NOTE) for node in nodes}
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    boot = np.stack([stats.bootstrap_medians(values[node], stats.DEFAULT_RESAMPLES, rng) for node in nodes])
    medians = np.array([np.median(values[node]) for node in nodes])
    whole = np.median(boot, axis=0) if len(nodes) > LEAVE_ONE_OUT_NODES else None
    alpha = 1.0 - level
    for i, node in enumerate(nodes):
        others = np.delete(np.arange(len(nodes)), i)
        reference = float(np.median(medians if whole is not None else medians[others]))
        ratio = float(medians[i] / reference)
        n, rest = len(values[node]), sum(len(values[nodes[j]]) for j in others)
        if n < stats.MIN_RATIO_REPEATS:
            note = f"not enough repeats: {n}, an interval needs >= {stats.MIN_RATIO_REPEATS}"
            out[node] = stats.RatioCI(ratio, None, None, level, n, rest, note)
            continue
        ref_boot = whole if whole is not None else np.median(boot[others], axis=0)
        low, high = np.quantile(boot[i] / ref_boot, [alpha / 2, 1 - alpha / 2])
        note = f"percentile bootstrap, {stats.DEFAULT_RESAMPLES} resamples"
        out[node] = stats.RatioCI(ratio, float(low), float(high), level, n, rest, note)
    return out


def fleet_summary(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Per configuration: how many nodes, the fleet's median, the spread of the node medians (slowest ÷ fastest),
    the slowest and fastest nodes with their ratios, and the nodes of each verdict that is not a pass."""
    out: list[dict[str, Any]] = []
    if table.empty:
        return out
    for configuration, rows in table.groupby("configuration", sort=False):
        measured = rows[rows["ratio"].notna()] if "ratio" in rows else rows.iloc[0:0]
        ordered = measured.sort_values("ratio")
        slowest = ordered.iloc[0] if len(ordered) else None
        fastest = ordered.iloc[-1] if len(ordered) else None
        medians = measured["median"].dropna()
        out.append(
            {
                "configuration": configuration,
                "nodes": len(rows),
                "fleet_median": rows["fleet_median"].dropna().iloc[0] if rows["fleet_median"].notna().any() else None,
                "unit": rows["unit"].dropna().iloc[0] if "unit" in rows and rows["unit"].notna().any() else "",
                "spread": float(medians.min() / medians.max()) if len(medians) > 1 else None,
                "slowest": (str(slowest["node"]), float(slowest["ratio"])) if slowest is not None else None,
                "fastest": (str(fastest["node"]), float(fastest["ratio"])) if fastest is not None else None,
                "not_passing": {
                    verdict: list(map(str, part["node"]))
                    for verdict, part in rows.groupby("verdict", sort=False)
                    if verdict != WITHIN
                },
            }
        )
    return out


def nodes_of(sweep: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The nodes of a sweep's nodes file (identity.SWEEP_NODES) that took no job, with why."""
    return {
        str(n["node"]): f"{n.get('state', '?')}" + (f": {n['reason']}" if n.get("reason") else "")
        for n in sweep
        if n.get("available") == "no"
    }
