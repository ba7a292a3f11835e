"""The report's first screen: the hardware in one line, what was measured, the headline table (per framework and
model: best throughput, scaling efficiency at the largest topology, the flags that matter) and the conditions that
hold for the whole study, said once instead of on every cell."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from ..collect import stats
from ..harness.frameworks import EAGER
from ..vocabulary.axes import DEFAULT_BUILD
from .format import (
    DASH,
    compiler_label,
    config_outcome,
    flag_codes,
    flag_label,
    fmt_int,
    fmt_num,
    fmt_pct,
    fmt_text,
    missing,
    unit_text,
)
from .tables import batch_text, group_key, topology_sort


def _throughput(summary: pd.DataFrame) -> pd.DataFrame:
    """The configurations measured by throughput (time-to-train ones have a section of their own)."""
    if "metric" in summary:
        return summary[summary["metric"].fillna("throughput") != "time_to_train"]
    return summary


def _measured(summary: pd.DataFrame) -> pd.DataFrame:
    """The throughput configurations with a median."""
    summary = _throughput(summary)
    return summary[summary["median"].notna()]


def study_wide_flags(summary: pd.DataFrame) -> set[str]:
    """Flag codes every measured configuration carries: a condition of the study, said once, not per cell."""
    measured = _measured(summary)
    if measured.empty or "flags" not in measured:
        return set()
    return set.intersection(*(set(flag_codes(f)) for f in measured["flags"]))


def study_conditions(summary: pd.DataFrame, level: float) -> list[str]:
    """The study-wide flags in words (one sentence each)."""
    out = []
    wide = study_wide_flags(summary)
    measured = _measured(summary)
    if "few_repeats" in wide:
        most = int(measured["n_ok"].max())
        out.append(
            f"Every configuration has at most {most} ok repeats: too few for a {level:.0%} interval of the median "
            f"(at least {stats.min_repeats(level)} needed). Medians, speedups and efficiencies are printed without "
            "intervals; differences of a few percent are not findings. Add repeats (defaults.repeats) to get them."
        )
    for code in sorted(wide - {"few_repeats"}):
        out.append(f"Every configuration is flagged {flag_label(code)} (see 'Flagged results' for why).")
    return out


def _machine_text(machine: dict[str, Any]) -> str:
    parts = [fmt_text(machine.get("cpu_model")) or "CPU not recorded"]
    if not missing(machine.get("cpu_count")):
        parts.append(f"{int(machine['cpu_count'])} logical CPUs")
    if not missing(machine.get("memory_bytes")):
        parts.append(f"{float(machine['memory_bytes']) / 2**30:.0f} GiB memory")
    if fmt_text(machine.get("os")):
        parts.append(fmt_text(machine["os"]))
    return ", ".join(parts)


def hardware_line(env: dict[str, Any], records: pd.DataFrame) -> str:
    """Nodes (CPU model, logical CPUs, memory, OS) and accelerators (model × count per node), one line."""
    machines = env.get("machines")
    if not isinstance(machines, dict):
        machines = {}
    hosts = list(env.get("hosts") or []) or list(machines)  # every node a run used, described or not
    described: dict[str, int] = {}
    for host in hosts:
        text = _machine_text(machines[host]) if isinstance(machines.get(host), dict) else None
        if text is not None:
            described[text] = described.get(text, 0) + 1
    unknown = len(hosts) - sum(described.values())
    if described:
        nodes = "; ".join(f"{n} node{'s' if n > 1 else ''}: {text}" for text, n in described.items())
        if unknown:  # other nodes of multi-node runs: no header of theirs says what they are
            nodes += f"; {unknown} more node{'s' if unknown > 1 else ''} not described by any run's header"
    else:
        cpus = "; ".join(str(c) for c in env.get("cpu_models") or []) or "CPU not recorded"
        nodes = f"{cpus} (logical CPUs, memory and OS not recorded in these logs)"
    cpu_models = {fmt_text(c) for c in records.get("cpu_model", pd.Series(dtype=object)).dropna()}
    gpus = []
    if "device_name" in records:
        on_device = records[records["device_name"].notna() & ~records["device_name"].isin(cpu_models)]
        for name, runs in on_device.groupby("device_name"):
            per_node = runs["devices_per_node"].dropna()
            count = f"{int(per_node.max())}× " if len(per_node) else ""
            gpus.append(f"{count}{name} per node")
    return f"{nodes} · accelerators: {'; '.join(gpus) if gpus else 'none (runs on CPU)'}"


def _values(series: pd.Series, fmt=fmt_text) -> str:
    values = [fmt(v) for v in series.dropna().unique()]
    return ", ".join(sorted(v for v in values if v)) or DASH


def measured_line(summary: pd.DataFrame, records: pd.DataFrame) -> str:
    """What was measured: metric, models, frameworks, topologies, precisions, data, batch sizes, repeats."""
    if summary.empty:
        return "nothing: the study has no configurations"
    topologies = sorted({fmt_text(t) for t in summary["topology"].dropna()}, key=lambda t: (len(t), t))
    repeats = summary["n_total"].dropna().astype(int)
    repeat_text = (
        f"{repeats.min()} repeats per configuration"
        if len(repeats) and repeats.min() == repeats.max()
        else f"{repeats.min()}-{repeats.max()} repeats per configuration"
        if len(repeats)
        else "repeats not recorded"
    )
    timed = len(summary) - len(_throughput(summary))
    metric = (
        "training throughput"
        if timed == 0
        else "time to quality"
        if timed == len(summary)
        else "training throughput and time to quality"
    )
    return (
        f"{metric} of {_values(summary['model'])} with {_values(summary['framework'])}; "
        f"topologies {', '.join(topologies) or DASH}; precision {_values(summary['precision'])}; "
        f"{_values(summary['data'])} data; batch {_values(summary['batch_size'], fmt_int)} per device; "
        f"{repeat_text}; {len(summary)} configurations, {len(records)} runs"
    )


def _config_text(row: pd.Series) -> str:
    parts = [fmt_text(row.get("topology")), fmt_text(row.get("precision")), f"bs {batch_text(row)}"]
    parts.append(f"{fmt_text(row.get('data'))} data")
    if (compiled := compiler_label(row.get("compiler"), row.get("framework"))) not in (EAGER, DASH):
        parts.append(compiled)
    if fmt_text(row.get("strategy")) not in ("", "auto"):
        parts.append(fmt_text(row.get("strategy")))
    if fmt_text(row.get("build")) not in ("", DEFAULT_BUILD):
        parts.append(f"build {fmt_text(row.get('build'))}")
    return ", ".join(p for p in parts if p)


def build_words(pairs: pd.DataFrame) -> str:
    """One build's comparisons with the first build on one framework and model (dlbench.collect.builds), in words:
    its ratio with the interval and verdict where it is one configuration, else the median ratio and the verdicts
    counted."""
    ratios = pairs["ratio"].dropna().astype(float)
    if ratios.empty:
        return "no ratio (no ok runs in one of the two)"
    if len(pairs) == 1:
        row = pairs.iloc[0]
        interval = "" if missing(row.get("ratio_low")) else f" [{row['ratio_low']:.2f}–{row['ratio_high']:.2f}]"
        return f"{row['ratio']:.2f}×{interval}, {fmt_text(row['verdict'])}"
    verdicts = pairs["verdict"].map(fmt_text).value_counts()
    counted = ", ".join(f"{n} {verdict}" for verdict, n in verdicts.items())
    return f"{ratios.median():.2f}× (median of {len(pairs)} configurations: {counted})"


def build_cells(comparisons: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Per (framework, model): every other build against the first, 'site: 0.91× [0.89–0.93], slower; ...'."""
    if comparisons.empty:
        return {}
    out: dict[tuple[str, str], str] = {}
    for (framework, model), pairs in comparisons.groupby(["framework", "model"], sort=True):
        out[(str(framework), str(model))] = "; ".join(
            f"{build}: {build_words(rows)}" for build, rows in pairs.groupby("build", sort=False)
        )
    return out


def headline_rows(summary: pd.DataFrame, builds: pd.DataFrame | None = None) -> list[dict[str, str]]:
    """Per framework and model: the best median throughput and where, the scaling efficiency of that series at
    its largest topology, configurations that failed or are unsupported, and the flags beyond the study-wide ones;
    with more than one build (`builds`: dlbench.collect.builds.compare_builds), each build against the first."""
    by_build = build_cells(builds) if builds is not None else {}
    baseline = str(builds["baseline"].iloc[0]) if by_build and builds is not None else ""
    measured = _measured(summary)
    wide = study_wide_flags(summary)
    rows = []
    for (framework, model), all_rows in _throughput(summary).groupby(["framework", "model"], sort=True):
        ok = measured[(measured["framework"] == framework) & (measured["model"] == model)]
        outcomes = Counter(config_outcome(r) for _, r in all_rows.iterrows())
        flags = sorted({c for f in ok.get("flags", pd.Series(dtype=object)) for c in flag_codes(f)} - wide)
        row = {"Framework": fmt_text(framework), "Model": fmt_text(model)}
        if ok.empty:
            row.update({"Best throughput": "no successful run", "At": DASH, "Scaling efficiency": DASH})
        else:
            fastest: Any = ok["median"].astype(float).idxmax()  # a row label (pandas types it as any hashable)
            best = ok.loc[fastest]
            series = [r for _, r in ok.iterrows() if group_key(r) == group_key(best)]
            scaled = [r for r in series if not missing(r.get("efficiency")) and not missing(r.get("devices"))]
            largest = max(scaled, key=topology_sort) if scaled else None
            row.update(
                {
                    "Best throughput": f"{fmt_num(best['median'])} {unit_text([best.get('unit')], model)}",
                    "At": _config_text(best),
                    "Scaling efficiency": DASH
                    if largest is None or int(largest["devices"]) == 1
                    else f"{fmt_pct(largest['efficiency'])} at {fmt_text(largest['topology'])}",
                }
            )
        notes = [flag_label(c) for c in flags]
        for outcome in ("failed", "unsupported"):  # unsupported: the framework cannot run it here, not a failure
            if outcomes[outcome]:
                notes.append(f"{outcomes[outcome]} of {len(all_rows)} configurations {outcome}")
        row["Flags"] = ", ".join(notes) or "none"
        if by_build:
            row[f"Builds vs {baseline}"] = by_build.get((fmt_text(framework), fmt_text(model)), DASH)
        rows.append(row)
    return rows
