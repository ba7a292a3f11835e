"""The report's tables: DLPerf-style throughput tables, per-configuration details, failures, overview and
environment, as rows for the HTML template and as Markdown."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd
import yaml

from ..collect.aggregate import parse_statuses
from ..vocabulary.axes import DEFAULTS as AXIS_DEFAULTS
from ..vocabulary.axes import INPUTS, NAMED_AWAY
from ..vocabulary.devices import NO_ENTRY
from .format import (
    DASH,
    compiler_label,
    compiler_title,
    config_outcome,
    failure_text,
    flag_codes,
    flag_label,
    fmt_int,
    fmt_mfu,
    fmt_num,
    fmt_pct,
    fmt_speedup,
    fmt_text,
    input_label,
    interval_text,
    md_escape,
    missing,
    ok_counts,
    throughput_text,
    unit_text,
)

# Identity of a DLPerf table: everything but framework and topology; a model's inputs (dlbench.vocabulary.axes),
# None if n/a.
INPUT_KEYS = INPUTS
NO_INTERVAL = "(n=k: too few repeats for an interval)"
GROUP_KEYS = ("model", "precision", "batch_size", "compiler", "data", *INPUT_KEYS, *NAMED_AWAY)


def supported_interval(row: pd.Series | None) -> bool:
    """Whether a row's repeats carry an interval of its median (enough of them: aggregate leaves ci_low empty
    otherwise); a ratio to a baseline (speedup, efficiency) needs that on both sides."""
    return row is not None and not missing(row.get("ci_low"))


def framework_cell(
    row: pd.Series | None, baseline: pd.Series | None = None, wide: frozenset[str] = frozenset()
) -> dict[str, str]:
    """One framework's cells of a throughput table. Failed cells always carry their status; a flag is named where
    it stands (those every configuration carries, `wide`, are said once above the tables); a speedup's interval
    is printed only where both this configuration and its 1x1 baseline have an interval of their median."""
    if row is None:
        return {
            "text": "not run",
            "css": "missing",
            "speedup": DASH,
            "efficiency": DASH,
            "flags": "",
            "tooltip": "no configuration for this topology",
        }
    n_ok, n_total = ok_counts(row)
    tooltip = f"{fmt_text(row.get('config_id'))}: {fmt_text(row.get('statuses'))}".strip(": ")
    if n_ok == 0 or missing(row.get("median")):
        text = failure_text(row)
        css = "unsupported" if text == "unsupported" else "failed"
        return {"text": text, "css": css, "speedup": DASH, "efficiency": DASH, "flags": "", "tooltip": tooltip}
    text = throughput_text(row)
    if fmt_text(row.get("batch_label")):  # a table of batch_size max: each framework's own size
        text = f"{fmt_text(row.get('batch_label'))}: {text}"
    css = "ok"
    if n_ok < n_total:
        text += f" ({n_ok}/{n_total} ok)"
        css = "partial"
        tooltip += f" — failed: {failure_text(row)}"
    elif missing(row.get("ci_low")) and "few_repeats" not in wide:
        text += f" (n={n_ok})"  # too few repeats for an interval
    if supported_interval(row) and supported_interval(baseline):
        speedup = interval_text(row.get("speedup"), row.get("speedup_low"), row.get("speedup_high"), fmt_speedup)
        efficiency = interval_text(
            row.get("efficiency"), row.get("efficiency_low"), row.get("efficiency_high"), fmt_pct
        )
    else:
        speedup, efficiency = fmt_speedup(row.get("speedup")), fmt_pct(row.get("efficiency"))
    codes = [c for c in flag_codes(row.get("flags")) if c not in wide]
    if codes:  # not a finding as it stands: named here, why in the tooltip and in 'Flagged results'
        tooltip += f" — flagged: {fmt_text(row.get('flags'))}"
    flags = ", ".join(f"⚑ {flag_label(c)}" for c in codes)
    return {
        "text": text,
        "css": css,
        "speedup": speedup,
        "efficiency": efficiency,
        "flags": flags,
        "tooltip": tooltip,
    }


def group_key(row: pd.Series) -> tuple[Any, ...]:
    """A configuration's table; those at the size a batch_size max search found share one ("max"), as in
    DLPerf's "bsz=max" tables, where each framework has its own size."""
    found = bool(fmt_text(row.get("batch_label")))
    return tuple(
        "max" if k == "batch_size" and found else None if missing(row.get(k)) else row.get(k) for k in GROUP_KEYS
    )


def sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    # Missing values sort first and are never compared with a value of another type ("max" after the sizes).
    return tuple((v is not None, isinstance(v, str), v if v is not None else 0) for v in key)


def batch_text(row: pd.Series) -> str:
    """The batch size per device as the report reads it: 96, or max (96) where a search found it."""
    return fmt_text(row.get("batch_label")) or fmt_int(row.get("batch_size"))


def topology_sort(row: pd.Series) -> tuple[int, int, str]:
    nodes: Any = row.get("nodes")
    dpn: Any = row.get("devices_per_node")
    return (10**9 if missing(nodes) else int(nodes), 10**9 if missing(dpn) else int(dpn), fmt_text(row.get("topology")))


def build_groups(summary: pd.DataFrame, wide: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """One DLPerf-style table per (model, precision, batch, compiler, data, input size, strategy): a row per
    topology and framework, so the table is as wide with five frameworks as with one. `wide`: the flags every
    configuration carries (said once, not per cell)."""
    if "metric" in summary:  # configurations measured by time to train have a table of their own (sections.py)
        summary = summary[summary["metric"].fillna("throughput") != "time_to_train"]
    frameworks = sorted({fmt_text(f) for f in summary["framework"]})
    keyed: dict[tuple[Any, ...], list[pd.Series]] = {}
    for _, row in summary.iterrows():
        keyed.setdefault(group_key(row), []).append(row)

    groups = []
    for key in sorted(keyed, key=sort_key):
        rows = keyed[key]
        model, precision, batch, compiler, data, *rest = key
        inputs, named = rest[: len(INPUT_KEYS)], dict(zip(NAMED_AWAY, rest[len(INPUT_KEYS) :], strict=True))
        group_fws = [f for f in frameworks if any(fmt_text(r["framework"]) == f for r in rows)]
        by_topo: dict[str, dict[str, pd.Series]] = {}
        topo_rows: dict[str, pd.Series] = {}
        for r in sorted(rows, key=topology_sort):
            topo = fmt_text(r.get("topology"))
            topo_rows.setdefault(topo, r)
            by_topo.setdefault(topo, {}).setdefault(fmt_text(r["framework"]), r)

        baselines = {fw: r for fw, r in by_topo.get("1x1", {}).items()}  # the speedups' baseline (aggregate.py)
        table_rows = []
        for topo, first in topo_rows.items():
            for fw in group_fws:
                table_rows.append(
                    {
                        "topology": topo,
                        "devices": fmt_int(first.get("devices")),
                        "framework": fw,
                        "cell": framework_cell(by_topo[topo].get(fw), baselines.get(fw), wide),
                    }
                )

        title_parts = [
            fmt_text(model) or "?",
            fmt_text(precision) or "?",
            f"batch {batch if batch == 'max' else fmt_int(batch)}/device",
            compiler_title(compiler, group_fws),
            f"{fmt_text(data) or '?'} data",
            input_label(dict(zip(INPUT_KEYS, inputs, strict=True))),
        ]
        # Away from their defaults: a strategy (speedups against the auto 1x1, aggregate.py), a build.
        title_parts += [
            f"{name} {fmt_text(value)}"
            for name, value in named.items()
            if fmt_text(value) not in ("", str(AXIS_DEFAULTS.get(name, "")))
        ]
        unit = unit_text([r.get("unit") for r in rows], model)
        groups.append(
            {
                "title": " · ".join(title_parts),
                "unit": unit,
                "caption": (
                    f"Throughput in {unit}: median [confidence interval] over successful repeats "
                    f"{'(no interval: too few repeats)' if 'few_repeats' in wide else NO_INTERVAL}; "
                    "speedup vs. 1×1 of the same framework; efficiency = speedup / devices; "
                    "⚑ names a flag (why: 'Flagged results')."
                ),
                "frameworks": group_fws,
                "rows": table_rows,
            }
        )
    return groups


GROUP_COLUMNS = ("Topology", "Devices", "Framework", "Throughput", "Speedup", "Efficiency", "Flags")


def group_markdown(group: dict[str, Any]) -> str:
    records = [
        dict(
            zip(
                GROUP_COLUMNS,
                (
                    md_escape(row["topology"]),
                    row["devices"],
                    md_escape(row["framework"]),
                    md_escape(row["cell"]["text"]),
                    row["cell"]["speedup"],
                    row["cell"]["efficiency"],
                    md_escape(row["cell"]["flags"]) or DASH,
                ),
                strict=True,
            )
        )
        for row in group["rows"]
    ]
    return pd.DataFrame(records, columns=list(GROUP_COLUMNS)).to_markdown(index=False, disable_numparse=True)


# The details table: (heading, summary column, how it reads); Input and OK are computed from several columns.
DETAIL_COLUMNS = (
    ("Config", "config_id", fmt_text),
    ("Framework", "framework", fmt_text),
    ("Model", "model", fmt_text),
    ("Topology", "topology", fmt_text),
    ("Devices", "devices", fmt_int),
    ("Batch/device", "batch_size", fmt_int),
    ("Precision", "precision", fmt_text),
    ("Data", "data", fmt_text),
    ("Statuses", "statuses", fmt_text),
    ("Median", "median", fmt_num),
    ("Min", "min", fmt_num),
    ("Max", "max", fmt_num),
    ("Q25", "q25", fmt_num),
    ("Q75", "q75", fmt_num),
    ("IQR", "iqr", fmt_num),
    ("CI low", "ci_low", fmt_num),
    ("CI high", "ci_high", fmt_num),
    ("CI", "ci_note", fmt_text),
    ("Steady runs", "steady_runs", fmt_int),
    ("Not steady", "nonsteady_runs", fmt_int),
    ("Flags", "flags", fmt_text),
    ("CV%", "cv", lambda v: fmt_pct(v, 1)),
    ("Speedup", "speedup", fmt_speedup),
    ("Efficiency", "efficiency", fmt_pct),
    ("TFLOP/s", "tflops", fmt_num),
    ("Unit", "unit", fmt_text),
)
DETAIL_ORDER = (
    "Config",
    "Framework",
    "Model",
    "Topology",
    "Devices",
    "Batch/device",
    "Precision",
    "Compiler",
    "Data",
    "Input",
    "OK",
    "Statuses",
    "Median",
    "CI low",
    "CI high",
    "CI",
    "Min",
    "Max",
    "Q25",
    "Q75",
    "IQR",
    "CV%",
    "Speedup",
    "Efficiency",
    "TFLOP/s",
    "Unit",
    "Steady runs",
    "Not steady",
    "Flags",
)
# Columns shown only where some configuration has a value (a CPU study has no MFU), after TFLOP/s, in this order;
# MFU also wherever a configuration counts tokens/s (an LLM's headline figure: blank with the reason, never absent).
TOKENS = "tokens/s"  # the unit of Llama runs (backends/base.py)
OPTIONAL_DETAIL_COLUMNS = (
    ("MFU", "mfu", fmt_mfu),
    ("Peak TFLOP/s", "peak_tflops", lambda v: DASH if missing(v) else f"{float(v):g}"),
    ("Peak memory/rank (GiB)", "peak_memory_gb", fmt_num),
)


def detail_order(summary: pd.DataFrame) -> tuple[tuple[str, ...], tuple[tuple[str, str, Any], ...]]:
    """The details table's headings, and the optional columns among them (those with a value somewhere)."""
    tokens = "unit" in summary and (summary["unit"] == TOKENS).any()
    optional = tuple(
        c
        for c in OPTIONAL_DETAIL_COLUMNS
        if c[1] in summary and (summary[c[1]].notna().any() or (c[1] == "mfu" and tokens))
    )
    at = DETAIL_ORDER.index("TFLOP/s") + 1
    return (*DETAIL_ORDER[:at], *(label for label, _, _ in optional), *DETAIL_ORDER[at:]), optional


def detail_rows(summary: pd.DataFrame) -> list[dict[str, str]]:
    """All summary columns, formatted, sorted like the DLPerf tables."""
    rows = []
    order, optional = detail_order(summary)
    ordered = sorted(
        (r for _, r in summary.iterrows()),
        key=lambda r: (sort_key(group_key(r)), fmt_text(r.get("framework")), topology_sort(r)),
    )
    for r in ordered:
        n_ok, n_total = ok_counts(r)
        row = {label: fmt(r.get(column)) for label, column, fmt in (*DETAIL_COLUMNS, *optional)}
        if "MFU" in row and missing(r.get("mfu")) and not missing(r.get("mfu_note")):
            row["MFU"] = f"{DASH} ({fmt_text(r.get('mfu_note'))})"  # no peak: blank, and why
        row["Compiler"] = compiler_label(r.get("compiler"), r.get("framework"))
        row["Input"] = input_label(r)
        row["Batch/device"] = batch_text(r)
        row["OK"] = f"{n_ok}/{n_total}"
        rows.append({label: row[label] for label in order})
    return rows


# The details split in three tables keyed by Config, so that each fits a page: what ran, the statistics (every
# column not named here, the optional ones included, in detail_order), and the interval's note with the flags.
DETAIL_SETUP: tuple[str, ...] = ("Framework", "Model", "Topology", "Devices", "Batch/device", "Precision", "Compiler")
DETAIL_SETUP += ("Data", "Input", "OK", "Statuses", "Unit")
DETAIL_NOTES = ("CI", "Flags")


def detail_tables(rows: list[dict[str, str]]) -> list[tuple[str, list[dict[str, str]]]]:
    """(title, rows) of the three details tables; every column of `rows` is in exactly one (Config in all)."""
    if not rows:
        return []
    named = {"Config", *DETAIL_SETUP, *DETAIL_NOTES}
    parts = (
        ("What ran", [c for c in rows[0] if c in DETAIL_SETUP]),
        ("Throughput statistics", [c for c in rows[0] if c not in named]),
        ("Interval and flags", [c for c in rows[0] if c in DETAIL_NOTES]),
    )
    return [(title, [{"Config": r["Config"], **{c: r[c] for c in columns}} for r in rows]) for title, columns in parts]


def failure_rows(summary: pd.DataFrame, records: pd.DataFrame) -> list[dict[str, str]]:
    """Configurations with at least one failed repeat, with the first failure message."""
    logs: dict[str, str] = {}
    failed_runs = records[records["status"].map(lambda s: fmt_text(s).lower() not in ("", "ok"))]
    for _, rec in failed_runs.iterrows():
        logs.setdefault(fmt_text(rec.get("config_id")), fmt_text(rec.get("log_path")))
    rows = []
    for _, r in summary.iterrows():
        n_ok, n_total = ok_counts(r)
        if n_ok >= n_total and all(s == "ok" for s, _ in parse_statuses(r.get("statuses"))):
            continue
        cid = fmt_text(r.get("config_id"))
        rows.append(
            {
                "Config": cid,
                "Status": failure_text(r),
                "Message": fmt_text(r.get("error")) or DASH,
                "Log": logs.get(cid, "") or DASH,
            }
        )
    rows.sort(key=lambda x: x["Config"])
    return rows


def rows_markdown(rows: list[dict[str, str]], limit: int | None = None) -> str:
    if not rows:
        return "_None._"
    df = pd.DataFrame([{k: md_escape(v, limit) for k, v in row.items()} for row in rows])
    return df.to_markdown(index=False, disable_numparse=True)


def environment_view(env: dict[str, Any]) -> dict[str, Any]:
    frameworks = []
    for name, info in sorted((env.get("frameworks") or {}).items()):
        info = info if isinstance(info, dict) else {"version": info}
        frameworks.append(
            {
                "name": str(name),
                "version": fmt_text(info.get("framework_version") or info.get("version")) or DASH,
                "python": fmt_text(info.get("python")) or DASH,
                "cuda": fmt_text(info.get("cuda")) or DASH,
                "cudnn": fmt_text(info.get("cudnn")) or DASH,
                # the framework's settings in effect (threads, oneDNN, layout, ...), read back by its backend
                "settings": fmt_text((info.get("settings") or {}).get("summary")) or DASH,
                "packages": [str(p) for p in info.get("packages") or []],
            }
        )

    def as_list(value: Any) -> list[str]:
        if value is None:
            return []
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]

    config = env.get("config")
    cpus = set(as_list(env.get("cpu_models")))
    peaks = env.get("device_peaks")
    if not isinstance(peaks, dict):
        peaks = {}
    return {
        "hosts": as_list(env.get("hosts")),
        "cpu_models": as_list(env.get("cpu_models")),
        "devices": as_list(env.get("devices")),
        # the peak MFU uses per device (aggregate.environment, dlbench.vocabulary.devices); a CPU is listed where
        # its peak was measured (platform.cpu_peak), not where it has none
        "device_peaks": [
            f"{name}: {text}"
            for name, text in sorted(peaks.items())
            if name not in cpus or not text.startswith(NO_ENTRY)
        ],
        "frameworks": frameworks,
        "config_yaml": yaml.safe_dump(config, sort_keys=False, allow_unicode=True, default_flow_style=False)
        if config
        else "",
    }


def overview(summary: pd.DataFrame, records: pd.DataFrame) -> dict[str, int]:
    """The counts of the summary line: configurations by outcome (unsupported apart from failed) and runs."""
    outcomes = Counter(config_outcome(r) for _, r in summary.iterrows())
    statuses = records["status"].map(lambda s: fmt_text(s).lower())
    return {
        "configs": len(summary),
        "configs_ok": outcomes["ok"],
        "configs_partial": outcomes["partial"],
        "configs_failed": outcomes["failed"],
        "configs_unsupported": outcomes["unsupported"],
        "runs": len(records),
        "runs_ok": int((statuses == "ok").sum()),
        "runs_unsupported": int((statuses == "unsupported").sum()),
    }
