"""Render and publish versioned benchmark reports (HTML + Markdown + plots + data).

Inputs come from the aggregate step: records.csv (one row per run), summary.csv (one row
per configuration, aggregated over repeats) and environment.json (study metadata).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd
import seaborn as sns
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from .aggregate import SUMMARY_COLUMNS

__all__ = ["ReportVersionExists", "publish_report", "render_report"]

TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "templates"
TEMPLATE_NAME = "report.html.j2"

VERSION_RE = re.compile(r"^[A-Za-z0-9._-]+$")
AUTO_VERSION_RE = re.compile(r"^v(\d+)$")
DASH = "—"

# Column types used to normalise both CSVs (everything else stays a string).
INT_COLUMNS = (
    "nodes", "devices_per_node", "devices", "batch_size", "global_batch_size",
    "image_size", "seq_length", "max_predictions", "warmup_steps", "measured_steps", "repeat", "samples",
    "threads_per_rank", "n_total", "n_ok", "n_failed",
)
FLOAT_COLUMNS = (
    "throughput", "elapsed_s", "step_time_median_s", "loss_final", "median", "min", "max",
    "q25", "q75", "iqr", "cv", "speedup", "efficiency", "tflops", "achieved_tflops", "train_flops_per_sample",
)
BOOL_COLUMNS = ("compiler", "grad_clip")
RECORD_COLUMNS = (
    "run_id", "config_id", "framework", "model", "topology", "nodes", "devices_per_node",
    "devices", "repeat", "status", "error", "hosts", "log_path",
)
# Identity of a DLPerf table: everything but framework and topology.
INPUT_KEYS = ("image_size", "seq_length", "max_predictions", "optimizer", "grad_clip")  # per model; None if n/a
GROUP_KEYS = ("model", "precision", "batch_size", "compiler", "data", *INPUT_KEYS)
STATUS_LABELS = {"oom": "OOM"}
DATA_FILES = ("records.csv", "summary.csv", "records.parquet", "summary.parquet",
              "environment.json")


class ReportVersionExists(Exception):
    """Raised when a report version directory already exists (it is never overwritten)."""


# --------------------------------------------------------------------------- loading


def _to_bool(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return pd.NA
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "y", "on"):
        return True
    if text in ("false", "0", "no", "n", "off"):
        return False
    return pd.NA


def _read_table(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    """Read a CSV as strings (so ids/commits are never mangled), then type known columns.

    Only empty cells become missing; ints become nullable Int64, bools nullable boolean.
    """
    df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    for col in required:
        if col not in df.columns:
            df[col] = pd.NA
    for col in df.columns:
        if col in INT_COLUMNS:
            df[col] = pd.to_numeric(df[col], errors="coerce").round().astype("Int64")
        elif col in FLOAT_COLUMNS:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
        elif col in BOOL_COLUMNS:
            df[col] = df[col].map(_to_bool).astype("boolean")
        else:
            df[col] = df[col].astype(object).where(df[col].notna(), None)
    if "topology" in df.columns and {"nodes", "devices_per_node"} <= set(df.columns):
        missing = df["topology"].isna() & df["nodes"].notna() & df["devices_per_node"].notna()
        df.loc[missing, "topology"] = (
            df.loc[missing, "nodes"].astype(str) + "x" + df.loc[missing, "devices_per_node"].astype(str)
        )
    return df


def _load_environment(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        env = json.load(fh)
    return env if isinstance(env, dict) else {}


# --------------------------------------------------------------------------- formatting


def _missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _fmt_num(value: Any) -> str:
    """Throughput-style number: 1 decimal for large values, 3 significant digits for small."""
    if _missing(value):
        return DASH
    v = float(value)
    if abs(v) >= 100:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _fmt_speedup(value: Any) -> str:
    return DASH if _missing(value) else f"{float(value):.2f}×"


def _fmt_pct(value: Any, digits: int = 0) -> str:
    return DASH if _missing(value) else f"{float(value) * 100:.{digits}f}%"


def _fmt_int(value: Any) -> str:
    return DASH if _missing(value) else str(int(value))


def _fmt_text(value: Any) -> str:
    return "" if _missing(value) else str(value)


def _parse_statuses(text: Any) -> list[tuple[str, int]]:
    """'ok:2;oom:1' -> [('ok', 2), ('oom', 1)]; a bare 'oom' counts as 1."""
    out: list[tuple[str, int]] = []
    for part in _fmt_text(text).split(";"):
        part = part.strip()
        if not part:
            continue
        name, _, count = part.partition(":")
        try:
            n = int(count) if count else 1
        except ValueError:
            n = 1
        out.append((name.strip().lower(), n))
    return out


def _failure_text(row: pd.Series) -> str:
    """Human label for the failed repeats of a configuration, e.g. 'OOM (3/3)'."""
    n_total = row.get("n_total")
    failures = [(s, c) for s, c in _parse_statuses(row.get("statuses")) if s != "ok"]
    if _missing(n_total):
        n_total = sum(c for _, c in _parse_statuses(row.get("statuses"))) or None
    if not failures:
        n_failed = row.get("n_failed")
        count = 0 if _missing(n_failed) else int(n_failed)
        failures = [("failed", count or (int(n_total) if n_total else 1))]
    failures.sort(key=lambda sc: (-sc[1], sc[0]))
    parts = []
    for status, count in failures:
        if status == "unsupported":
            parts.append("unsupported")
        else:
            label = STATUS_LABELS.get(status, status)
            parts.append(f"{label} ({count}/{int(n_total)})" if n_total else label)
    return "; ".join(parts)


def _throughput_text(row: pd.Series) -> str:
    """'1234.5 [1220.0–1250.1]' (median [q25–q75]); just the median when q25 == q75."""
    med, q25, q75 = row.get("median"), row.get("q25"), row.get("q75")
    text = _fmt_num(med)
    if not _missing(q25) and not _missing(q75) and _fmt_num(q25) != _fmt_num(q75):
        text += f" [{_fmt_num(q25)}–{_fmt_num(q75)}]"
    return text


def _ok_counts(row: pd.Series) -> tuple[int, int]:
    n_ok, n_total = row.get("n_ok"), row.get("n_total")
    n_ok = 0 if _missing(n_ok) else int(n_ok)
    if _missing(n_total):
        n_total = n_ok + (0 if _missing(row.get("n_failed")) else int(row.get("n_failed")))
    return n_ok, int(n_total)


def _cell(row: pd.Series | None) -> dict[str, str]:
    """One framework cell of a DLPerf table. Failed cells always carry their status."""
    if row is None:
        return {"text": "not run", "css": "missing", "speedup": DASH, "efficiency": DASH,
                "tooltip": "no configuration for this topology"}
    n_ok, n_total = _ok_counts(row)
    tooltip = f"{_fmt_text(row.get('config_id'))}: {_fmt_text(row.get('statuses'))}".strip(": ")
    if n_ok == 0 or _missing(row.get("median")):
        text = _failure_text(row)
        css = "unsupported" if text == "unsupported" else "failed"
        return {"text": text, "css": css, "speedup": DASH, "efficiency": DASH, "tooltip": tooltip}
    text = _throughput_text(row)
    css = "ok"
    if n_ok < n_total:
        text += f" ({n_ok}/{n_total} ok)"
        css = "partial"
        tooltip += f" — failed: {_failure_text(row)}"
    return {"text": text, "css": css, "speedup": _fmt_speedup(row.get("speedup")),
            "efficiency": _fmt_pct(row.get("efficiency")), "tooltip": tooltip}


def _md_escape(text: str, limit: int | None = None, table: bool = True) -> str:
    """Make a string safe for Markdown: one line, no raw HTML, no pipes inside table cells."""
    text = " ".join(text.split())
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|") if table else text


def _input_label(image_size: Any, seq_length: Any, max_predictions: Any = None, optimizer: Any = None,
                 grad_clip: Any = None) -> str:
    parts = []
    if not _missing(image_size):
        parts.append(f"{int(image_size)}×{int(image_size)} px")
    if not _missing(seq_length):
        masked = "" if _missing(max_predictions) else f"/{int(max_predictions)} masked"
        parts.append(f"seq {int(seq_length)}{masked}")
    if not _missing(optimizer):
        parts.append(_fmt_text(optimizer))
    if not _missing(grad_clip):
        parts.append("clip" if bool(grad_clip) else "no clip")
    return ", ".join(parts) or DASH


def _compiler_label(value: Any) -> str:
    return DASH if _missing(value) else ("compiled" if bool(value) else "eager")


# --------------------------------------------------------------------------- tables


def _group_key(row: pd.Series) -> tuple[Any, ...]:
    return tuple(None if _missing(row.get(k)) else row.get(k) for k in GROUP_KEYS)


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    # Missing values sort first and are never compared with a value of another type.
    return tuple((v is not None, v if v is not None else 0) for v in key)


def _topology_sort(row: pd.Series) -> tuple[int, int, str]:
    nodes, dpn = row.get("nodes"), row.get("devices_per_node")
    return (10**9 if _missing(nodes) else int(nodes),
            10**9 if _missing(dpn) else int(dpn), _fmt_text(row.get("topology")))


def _build_groups(summary: pd.DataFrame) -> list[dict[str, Any]]:
    """One DLPerf-style table per (model, precision, batch, compiler, data, input size)."""
    frameworks = sorted({_fmt_text(f) for f in summary["framework"]})
    keyed: dict[tuple[Any, ...], list[pd.Series]] = {}
    for _, row in summary.iterrows():
        keyed.setdefault(_group_key(row), []).append(row)

    groups = []
    for key in sorted(keyed, key=_sort_key):
        rows = keyed[key]
        model, precision, batch, compiler, data, *inputs = key
        group_fws = [f for f in frameworks if any(_fmt_text(r["framework"]) == f for r in rows)]
        units = sorted({_fmt_text(r.get("unit")) for r in rows} - {""})
        by_topo: dict[str, dict[str, pd.Series]] = {}
        topo_rows: dict[str, pd.Series] = {}
        for r in sorted(rows, key=_topology_sort):
            topo = _fmt_text(r.get("topology"))
            topo_rows.setdefault(topo, r)
            by_topo.setdefault(topo, {}).setdefault(_fmt_text(r["framework"]), r)

        table_rows = []
        for topo, first in topo_rows.items():
            cells = [_cell(by_topo[topo].get(fw)) for fw in group_fws]
            table_rows.append({
                "topology": topo, "nodes": _fmt_int(first.get("nodes")),
                "devices_per_node": _fmt_int(first.get("devices_per_node")),
                "devices": _fmt_int(first.get("devices")), "cells": cells,
            })

        title_parts = [
            _fmt_text(model) or "?", _fmt_text(precision) or "?",
            f"batch {_fmt_int(batch)}/device", _compiler_label(compiler),
            f"{_fmt_text(data) or '?'} data", _input_label(*inputs),
        ]
        unit = ", ".join(units) or "samples/s"
        groups.append({
            "title": " · ".join(title_parts),
            "unit": unit,
            "caption": (f"Throughput in {unit}: median [q25–q75] over successful repeats; "
                        "speedup vs. 1×1 of the same framework; efficiency = speedup / devices."),
            "frameworks": group_fws,
            "rows": table_rows,
        })
    return groups


def _group_markdown(group: dict[str, Any]) -> str:
    records = []
    for row in group["rows"]:
        rec = {"Topology": _md_escape(row["topology"]), "Nodes": row["nodes"],
               "Devices/node": row["devices_per_node"], "Devices": row["devices"]}
        for fw, cell in zip(group["frameworks"], row["cells"], strict=True):
            name = _md_escape(fw)
            rec[f"{name} throughput"] = _md_escape(cell["text"])
            rec[f"{name} speedup"] = cell["speedup"]
            rec[f"{name} efficiency"] = cell["efficiency"]
        records.append(rec)
    return pd.DataFrame(records).to_markdown(index=False, disable_numparse=True)


def _detail_rows(summary: pd.DataFrame) -> list[dict[str, str]]:
    """All summary columns, formatted, sorted like the DLPerf tables."""
    rows = []
    ordered = sorted(
        (r for _, r in summary.iterrows()),
        key=lambda r: (_sort_key(_group_key(r)), _fmt_text(r.get("framework")), _topology_sort(r)),
    )
    for r in ordered:
        n_ok, n_total = _ok_counts(r)
        rows.append({
            "Config": _fmt_text(r.get("config_id")),
            "Framework": _fmt_text(r.get("framework")),
            "Model": _fmt_text(r.get("model")),
            "Topology": _fmt_text(r.get("topology")),
            "Devices": _fmt_int(r.get("devices")),
            "Batch/device": _fmt_int(r.get("batch_size")),
            "Precision": _fmt_text(r.get("precision")),
            "Compiler": _compiler_label(r.get("compiler")),
            "Data": _fmt_text(r.get("data")),
            "Input": _input_label(*(r.get(k) for k in INPUT_KEYS)),
            "OK": f"{n_ok}/{n_total}",
            "Statuses": _fmt_text(r.get("statuses")),
            "Median": _fmt_num(r.get("median")),
            "Min": _fmt_num(r.get("min")),
            "Max": _fmt_num(r.get("max")),
            "Q25": _fmt_num(r.get("q25")),
            "Q75": _fmt_num(r.get("q75")),
            "IQR": _fmt_num(r.get("iqr")),
            "CV%": _fmt_pct(r.get("cv"), 1),
            "Speedup": _fmt_speedup(r.get("speedup")),
            "Efficiency": _fmt_pct(r.get("efficiency")),
            "TFLOP/s": _fmt_num(r.get("tflops")),
            "Unit": _fmt_text(r.get("unit")),
        })
    return rows


def _failure_rows(summary: pd.DataFrame, records: pd.DataFrame) -> list[dict[str, str]]:
    """Configurations with at least one failed repeat, with the first failure message."""
    logs: dict[str, str] = {}
    failed_runs = records[records["status"].map(lambda s: _fmt_text(s).lower() not in ("", "ok"))]
    for _, rec in failed_runs.iterrows():
        logs.setdefault(_fmt_text(rec.get("config_id")), _fmt_text(rec.get("log_path")))
    rows = []
    for _, r in summary.iterrows():
        n_ok, n_total = _ok_counts(r)
        if n_ok >= n_total and all(s == "ok" for s, _ in _parse_statuses(r.get("statuses"))):
            continue
        cid = _fmt_text(r.get("config_id"))
        rows.append({
            "Config": cid,
            "Status": _failure_text(r),
            "Message": _fmt_text(r.get("error")) or DASH,
            "Log": logs.get(cid, "") or DASH,
        })
    rows.sort(key=lambda x: x["Config"])
    return rows


def _rows_markdown(rows: list[dict[str, str]], limit: int | None = None) -> str:
    if not rows:
        return "_None._"
    df = pd.DataFrame([{k: _md_escape(v, limit) for k, v in row.items()} for row in rows])
    return df.to_markdown(index=False, disable_numparse=True)


# --------------------------------------------------------------------------- plots


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)  # explicit Agg canvas: no pyplot state, no GUI backend
    return fig


def _placeholder_png(path: Path, title: str, message: str) -> None:
    fig = _new_figure(6, 3)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(f"{title} — {message}")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=14, color="0.35",
            transform=ax.transAxes)
    fig.savefig(path, format="png")
    fig.clear()


def _log2_devices_axis(ax: Any, devices: list[int]) -> None:
    if len(devices) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(devices)
    ax.set_xticklabels([str(d) for d in devices])
    ax.xaxis.set_minor_locator(NullLocator())


def _log2_speedup_axis(ax: Any, values: list[float]) -> None:
    """Log2 y axis (so ideal speedup y = x is a straight diagonal) with plain tick labels."""
    lo = math.floor(math.log2(max(min(values), 1e-3)))
    hi = math.ceil(math.log2(max(values)))
    hi = max(hi, lo + 1)
    ax.set_yscale("log", base=2)
    ticks = [2.0**e for e in range(lo, hi + 1)]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylim(ticks[0] / 1.15, ticks[-1] * 1.15)


def _plot_data(summary: pd.DataFrame, value: str) -> pd.DataFrame:
    df = summary[summary[value].notna() & summary["devices"].notna()].copy()
    if df.empty:
        return df
    df["devices"] = df["devices"].astype(int)
    df[value] = df[value].astype(float)
    df["framework"] = df["framework"].map(_fmt_text)
    df["precision"] = df["precision"].map(lambda p: _fmt_text(p) or "?")
    df["model"] = df["model"].map(lambda m: _fmt_text(m) or "?")
    # One line per configuration series, so batch sizes etc. are never averaged together.
    df["series"] = [f"{_group_key(r)}|{r['framework']}" for _, r in df.iterrows()]
    return df.sort_values(["series", "devices"])


def _faceted_plot(path: Path, df: pd.DataFrame, value: str, ylabel: str, title: str,
                  palette: dict[str, Any], ideal: bool) -> None:
    models = sorted(df["model"].unique())
    ncols = min(len(models), 3)
    nrows = math.ceil(len(models) / ncols)
    fig = _new_figure(4.6 * ncols + 1.6, 3.6 * nrows + 0.4)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    precisions = sorted(df["precision"].unique())
    for i, (ax, model) in enumerate(zip(axes, models, strict=False)):
        sub = df[df["model"] == model]
        devices = sorted(sub["devices"].unique().tolist())
        if ideal:
            xs = np.geomspace(1, max(devices + [1]), 64)
            ax.plot(xs, xs, linestyle="--", color="0.4", linewidth=1.2, label="ideal (linear)")
        sns.lineplot(data=sub, x="devices", y=value, hue="framework", style="precision",
                     hue_order=sorted(palette), style_order=precisions, palette=palette,
                     units="series", estimator=None, markers=True, dashes=False,
                     legend=i == 0, ax=ax)
        _log2_devices_axis(ax, sorted(set(devices) | ({1} if ideal else set())))
        ax.set_title(model)
        ax.set_xlabel("devices")
        units = sorted({_fmt_text(u) for u in sub["unit"]} - {""})
        ax.set_ylabel(ylabel.format(unit=" or ".join(units) or "samples/s"))
        ax.grid(True, which="major", alpha=0.3)
        if ideal:
            _log2_speedup_axis(ax, sub[value].tolist() + [1.0, float(max(devices))])
        else:
            ax.set_ylim(bottom=0)
    for ax in axes[len(models):]:
        ax.set_visible(False)
    legend = axes[0].get_legend()
    if legend is not None:  # one shared legend outside the facets
        handles, labels = axes[0].get_legend_handles_labels()
        legend.remove()
        fig.legend(handles, labels, loc="outside right center", fontsize="small", frameon=False)
    fig.suptitle(title)
    fig.savefig(path, format="png")
    fig.clear()


def _write_plots(summary: pd.DataFrame, out_dir: Path) -> None:
    frameworks = sorted({_fmt_text(f) for f in summary["framework"]} - {""})
    palette = dict(zip(frameworks, sns.color_palette("tab10", max(len(frameworks), 1)), strict=False))

    thr = _plot_data(summary, "median")
    with sns.axes_style("whitegrid"):
        if thr.empty:
            _placeholder_png(out_dir / "throughput.png", "Throughput", "no successful runs")
        else:
            _faceted_plot(out_dir / "throughput.png", thr, "median",
                          "median throughput ({unit})", "Training throughput vs. devices",
                          palette, ideal=False)
        spd = _plot_data(summary, "speedup")
        if spd.empty:
            message = "no successful runs" if thr.empty else "no speedup data (no 1×1 baseline)"
            _placeholder_png(out_dir / "speedup.png", "Speedup", message)
        else:
            _faceted_plot(out_dir / "speedup.png", spd, "speedup", "speedup vs. 1×1",
                          "Scaling: speedup vs. devices (dashed: ideal linear)",
                          palette, ideal=True)


# --------------------------------------------------------------------------- environment


def _environment_view(env: dict[str, Any]) -> dict[str, Any]:
    frameworks = []
    for name, info in sorted((env.get("frameworks") or {}).items()):
        info = info if isinstance(info, dict) else {"version": info}
        frameworks.append({
            "name": str(name),
            "version": _fmt_text(info.get("version")) or DASH,
            "python": _fmt_text(info.get("python")) or DASH,
            "cuda": _fmt_text(info.get("cuda")) or DASH,
            "cudnn": _fmt_text(info.get("cudnn")) or DASH,
            "packages": [str(p) for p in info.get("packages") or []],
        })

    def as_list(value: Any) -> list[str]:
        if value is None:
            return []
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]

    config = env.get("config")
    return {
        "hosts": as_list(env.get("hosts")),
        "cpu_models": as_list(env.get("cpu_models")),
        "devices": as_list(env.get("devices")),
        "frameworks": frameworks,
        "config_yaml": yaml.safe_dump(config, sort_keys=False, allow_unicode=True,
                                      default_flow_style=False) if config else "",
    }


def _overview(summary: pd.DataFrame, records: pd.DataFrame) -> dict[str, int]:
    counts = [_ok_counts(r) for _, r in summary.iterrows()]
    statuses = records["status"].map(lambda s: _fmt_text(s).lower())
    return {
        "configs": len(counts),
        "configs_ok": sum(1 for ok, total in counts if total and ok == total),
        "configs_partial": sum(1 for ok, total in counts if 0 < ok < total),
        "configs_failed": sum(1 for ok, _ in counts if ok == 0),
        "runs": len(records),
        "runs_ok": int((statuses == "ok").sum()),
    }


# --------------------------------------------------------------------------- rendering


def _markdown(ctx: dict[str, Any]) -> str:
    lines = [f"# {_md_escape(ctx['title'], table=False)}", ""]
    meta = [f"- Generated: {ctx['generated_at']}", f"- Git commit: `{ctx['git_commit']}`"]
    if ctx["version"]:
        meta.insert(0, f"- Report version: {ctx['version']}")
    lines += meta + [""]
    for note in ctx["notes"]:
        lines += [f"> **Note:** {_md_escape(note, table=False)}", ">"]
    if ctx["notes"]:
        lines[-1] = ""
    o = ctx["overview"]
    lines += [
        (f"{o['configs']} configurations: {o['configs_ok']} fully successful, "
         f"{o['configs_partial']} partially failed, {o['configs_failed']} failed; "
         f"{o['runs_ok']}/{o['runs']} runs ok."), "",
        "## Throughput", "",
    ]
    if not ctx["groups"]:
        lines += ["_No configurations._", ""]
    for group in ctx["groups"]:
        lines += [f"### {_md_escape(group['title'], table=False)}", "",
                  f"_{_md_escape(group['caption'], table=False)}_", "",
                  group["markdown"], ""]
    lines += ["## Plots", "", "![Throughput vs. devices](throughput.png)", "",
              "![Speedup vs. devices](speedup.png)", "",
              "## Failures", "", _rows_markdown(ctx["failures"], limit=300), "",
              "## Per-configuration details", "", _rows_markdown(ctx["details"]), ""]
    env = ctx["env"]
    lines += ["## Environment", "",
              f"- Hosts: {_md_escape(', '.join(env['hosts']), table=False) or DASH}",
              f"- CPU models: {_md_escape('; '.join(env['cpu_models']), table=False) or DASH}",
              f"- Devices: {_md_escape('; '.join(env['devices']), table=False) or DASH}",
              f"- Git commit: `{ctx['git_commit']}`", ""]
    if env["frameworks"]:
        fw_rows = [{"Framework": f["name"], "Version": f["version"], "Python": f["python"],
                    "CUDA": f["cuda"], "cuDNN": f["cudnn"],
                    "Packages": ", ".join(f["packages"]) or DASH} for f in env["frameworks"]]
        lines += [_rows_markdown(fw_rows), ""]
    if env["config_yaml"]:
        lines += ["### Study configuration", "", "```yaml", env["config_yaml"].rstrip(), "```", ""]
    lines += ["## Data files", "", ", ".join(f"[{f}]({f})" for f in DATA_FILES), ""]
    return "\n".join(lines)


def render_report(records_csv: Path, summary_csv: Path, environment_json: Path,
                  out_dir: Path, version: str | None = None) -> None:
    """Write into out_dir (created; must not exist yet or be empty): index.html, README.md,
    records.csv, summary.csv, records.parquet, summary.parquet, environment.json (copies),
    throughput.png, speedup.png. `version` is only shown in the page header."""
    records_csv, summary_csv = Path(records_csv), Path(summary_csv)
    environment_json, out_dir = Path(environment_json), Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"report directory {out_dir} exists and is not empty")

    records = _read_table(records_csv, RECORD_COLUMNS)
    summary = _read_table(summary_csv, SUMMARY_COLUMNS)
    env = _load_environment(environment_json)
    out_dir.mkdir(parents=True, exist_ok=True)

    # Raw copies (byte-identical) plus typed Parquet versions.
    shutil.copyfile(records_csv, out_dir / "records.csv")
    shutil.copyfile(summary_csv, out_dir / "summary.csv")
    shutil.copyfile(environment_json, out_dir / "environment.json")
    records.to_parquet(out_dir / "records.parquet", index=False)
    summary.to_parquet(out_dir / "summary.parquet", index=False)

    _write_plots(summary, out_dir)

    groups = _build_groups(summary)
    for group in groups:
        group["markdown"] = _group_markdown(group)
    study = _fmt_text(env.get("study")) or "dlbench"
    notes = env.get("notes") or []
    ctx: dict[str, Any] = {
        "title": f"{study} — training throughput report",
        "study": study,
        "version": version or "",
        "generated_at": _fmt_text(env.get("generated_at"))
        or datetime.now(UTC).isoformat(timespec="seconds"),
        "rendered_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": _fmt_text(env.get("git_commit")) or "unknown",
        "notes": [str(n) for n in (notes if isinstance(notes, list) else [notes])],
        "overview": _overview(summary, records),
        "groups": groups,
        "failures": _failure_rows(summary, records),
        "details": _detail_rows(summary),
        "env": _environment_view(env),
        "data_files": DATA_FILES,
    }

    jenv = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)
    html = jenv.get_template(TEMPLATE_NAME).render(**ctx)
    (out_dir / "index.html").write_text(html, encoding="utf-8")
    (out_dir / "README.md").write_text(_markdown(ctx), encoding="utf-8")


# --------------------------------------------------------------------------- publishing


def _validate_version(version: str) -> None:
    if (not version or not VERSION_RE.match(version) or version == "latest"
            or version.startswith(".")):
        raise ValueError(
            f"invalid report.version {version!r}: use letters, digits, '.', '_' and '-' "
            "(not starting with '.'), not 'latest', or 'auto'")


def _next_auto_version(reports_dir: Path) -> str:
    numbers = [int(m.group(1)) for p in reports_dir.iterdir()
               if (m := AUTO_VERSION_RE.match(p.name))]
    return f"v{max(numbers, default=0) + 1}"


def _exists_error(target: Path) -> ReportVersionExists:
    return ReportVersionExists(
        f"report version directory {target} already exists and is never overwritten; "
        "pick another report.version (or 'auto') or remove that directory")


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def publish_report(records_csv: Path, summary_csv: Path, environment_json: Path,
                   reports_dir: Path, version: str) -> Path:
    """Render a new report version under reports_dir and return its directory.

    version == "auto" picks v<N+1> for the highest existing vN. Existing versions are never
    overwritten (ReportVersionExists). Rendering happens in reports_dir/.tmp-* and is renamed
    into place; then reports_dir/latest (relative symlink) and latest.json are updated."""
    reports_dir = Path(reports_dir)
    reports_dir.mkdir(parents=True, exist_ok=True)
    if version == "auto":
        version = _next_auto_version(reports_dir)
    else:
        _validate_version(version)
    target = reports_dir / version
    if target.exists() or target.is_symlink():
        raise _exists_error(target)

    tmp_dir = Path(tempfile.mkdtemp(prefix=".tmp-", dir=reports_dir))
    try:
        os.chmod(tmp_dir, 0o755)  # mkdtemp makes it 0700; reports are meant to be shared
        render_report(records_csv, summary_csv, environment_json, tmp_dir, version=version)
        if target.exists() or target.is_symlink():  # appeared while rendering
            raise _exists_error(target)
        try:
            os.rename(tmp_dir, target)  # fails on a non-empty existing directory
        except OSError as exc:
            if target.exists():
                raise _exists_error(target) from exc
            raise
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise

    latest = reports_dir / "latest"
    if latest.exists() and not latest.is_symlink():
        raise RuntimeError(f"{latest} exists and is not a symlink; refusing to replace it")
    tmp_link = reports_dir / f".latest.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.symlink(version, tmp_link)
    os.replace(tmp_link, latest)

    info = {"version": version, "path": str(target), "index": str(target / "index.html"),
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds")}
    _atomic_write_text(reports_dir / "latest.json", json.dumps(info, indent=2) + "\n")
    return target
