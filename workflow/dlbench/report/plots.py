"""The report's plots (seaborn on an explicit Agg canvas): throughput and speedup vs. devices, real ÷ synthetic;
for time-to-quality runs the convergence curves and samples to converge vs. batch size."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from ..vocabulary.axes import BY_NAME, MODEL_AXES, NAMED_AWAY
from .format import fmt_text, unit_text
from .tables import group_key


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)  # explicit Agg canvas: no pyplot state, no GUI backend
    return fig


def placeholder_png(path: Path, title: str, message: str) -> None:
    fig = new_figure(6, 3)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(f"{title} — {message}")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=14, color="0.35", transform=ax.transAxes)
    fig.savefig(path, format="png")
    fig.clear()


def log2_devices_axis(ax: Any, devices: list[int]) -> None:
    if len(devices) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(devices)
    ax.set_xticklabels([str(d) for d in devices])
    ax.xaxis.set_minor_locator(NullLocator())


def log2_speedup_axis(ax: Any, values: list[float]) -> None:
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


def plot_data(summary: pd.DataFrame, value: str) -> pd.DataFrame:
    if "metric" in summary:  # times to train are plotted by write_quality_plots
        summary = summary[summary["metric"].fillna("throughput") != "time_to_train"]
    df = summary[summary[value].notna() & summary["devices"].notna()].copy()
    if df.empty:
        return df
    df["devices"] = df["devices"].astype(int)
    df[value] = df[value].astype(float)
    df["framework"] = df["framework"].map(fmt_text)
    df["precision"] = df["precision"].map(lambda p: fmt_text(p) or "?")
    df["model"] = df["model"].map(lambda m: fmt_text(m) or "?")
    # One line per configuration series, so batch sizes etc. are never averaged together.
    df["series"] = [f"{group_key(r)}|{r['framework']}" for _, r in df.iterrows()]
    df["line style"] = variant_labels(df)
    return df.sort_values(["series", "devices"])


# The axes of a series a plot's line style and marker say (colour says the framework, the x axis the topology).
VARIANT_AXES = (
    ("data", "{} data"),
    ("precision", "{}"),
    ("batch_size", "bs {}"),
    ("compiler", "compiler {}"),
    *((axis.name, axis.legend) for axis in MODEL_AXES if axis.legend),
    *((name, BY_NAME[name].legend or "{}") for name in NAMED_AWAY),  # strategy, build
)


def variant_labels(df: pd.DataFrame) -> list[str]:
    """Each row's values of the axes that vary within a model's panel, e.g. 'real data, fp32': one line style and
    marker per label, so two lines of one framework in a panel never look the same."""
    models = df["model"].map(fmt_text)
    varying = [
        (k, text) for k, text in VARIANT_AXES if k in df and df[k].map(fmt_text).groupby(models).nunique().max() > 1
    ]
    if not varying:
        varying = [("precision", "{}")]
    return [", ".join(text.format(fmt_text(r[k]) or "?") for k, text in varying) for _, r in df.iterrows()]


def has_intervals(df: pd.DataFrame, interval: tuple[str, str]) -> bool:
    low, high = interval
    return low in df and high in df and bool((df[low].notna() & df[high].notna()).any())


def error_bars(ax: Any, df: pd.DataFrame, value: str, interval: tuple[str, str], palette: dict[str, Any]) -> None:
    """The confidence interval of each point as an error bar, in its framework's colour."""
    low, high = interval
    if low not in df or high not in df:
        return
    has = df[df[low].notna() & df[high].notna()]
    for framework, points in has.groupby("framework"):
        y = points[value].astype(float)
        ax.errorbar(
            points["devices"],
            y,
            yerr=[(y - points[low].astype(float)).clip(lower=0), (points[high].astype(float) - y).clip(lower=0)],
            fmt="none",
            ecolor=palette.get(str(framework)),  # a framework's name
            capsize=3,
            linewidth=1,
        )


def label_strategies(ax: Any, df: pd.DataFrame, value: str, palette: dict[str, Any]) -> None:
    """Name the points of a gradient-exchange strategy other than auto (series of their own, without a 1x1)."""
    if "strategy" not in df:
        return
    for _, row in df[df["strategy"].fillna("auto") != "auto"].iterrows():
        ax.annotate(
            fmt_text(row["strategy"]),
            (row["devices"], row[value]),
            textcoords="offset points",
            xytext=(5, -3),
            fontsize="x-small",
            color=palette.get(row["framework"]),
        )


def faceted_plot(
    path: Path,
    df: pd.DataFrame,
    value: str,
    ylabel: str,
    title: str,
    palette: dict[str, Any],
    ideal: bool,
    interval: tuple[str, str],
) -> None:
    models = sorted(df["model"].unique())
    ncols = min(len(models), 3)
    nrows = math.ceil(len(models) / ncols)
    fig = new_figure(4.6 * ncols + 1.6, 3.6 * nrows + 0.4)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    variants = sorted(df["line style"].unique())
    for ax, model in zip(axes, models, strict=False):
        sub = df[df["model"] == model]
        devices = sorted(sub["devices"].unique().tolist())
        if ideal:
            xs = np.geomspace(1, max(devices + [1]), 64)
            ax.plot(xs, xs, linestyle="--", color="0.4", linewidth=1.2, label="ideal (linear)")
        sns.lineplot(
            data=sub,
            x="devices",
            y=value,
            hue="framework",
            style="line style",
            hue_order=sorted(palette),
            style_order=variants,
            palette=palette,
            units="series",
            estimator=None,
            markers=True,
            dashes=True,
            legend=True,
            ax=ax,
        )
        error_bars(ax, sub, value, interval, palette)
        label_strategies(ax, sub, value, palette)
        log2_devices_axis(ax, sorted(set(devices) | ({1} if ideal else set())))
        ax.set_title(model)
        ax.set_xlabel("devices")
        ax.set_ylabel(ylabel.format(unit=unit_text(sub["unit"], model, joiner=" or ")))
        ax.grid(True, which="major", alpha=0.3)
        if ideal:
            log2_speedup_axis(ax, sub[value].tolist() + [1.0, float(max(devices))])
        else:
            ax.set_ylim(bottom=0)
    for ax in axes[len(models) :]:
        ax.set_visible(False)
    shared: dict[str, Any] = {}  # one legend outside the facets, with every panel's entries
    for ax in axes[: len(models)]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            shared.setdefault(label, handle)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if shared:
        fig.legend(list(shared.values()), list(shared), loc="outside right center", fontsize="small", frameon=False)
    bars = "bars: confidence interval" if has_intervals(df, interval) else "no interval bars: too few repeats"
    fig.suptitle(title.format(bars=bars))
    fig.savefig(path, format="png")
    fig.clear()


def write_plots(summary: pd.DataFrame, out_dir: Path, nothing: str = "no successful runs") -> bool:
    """throughput.png, speedup.png, and energy.png where some configuration has energy (telemetry): True then.
    `nothing`: what an empty plot says."""
    frameworks = sorted({fmt_text(f) for f in summary["framework"]} - {""})
    palette = dict(zip(frameworks, sns.color_palette("tab10", max(len(frameworks), 1)), strict=False))

    thr = plot_data(summary, "median")
    with sns.axes_style("whitegrid"):
        if thr.empty:
            placeholder_png(out_dir / "throughput.png", "Throughput", nothing)
        else:
            faceted_plot(
                out_dir / "throughput.png",
                thr,
                "median",
                "median throughput ({unit})",
                "Training throughput vs. devices ({bars})",
                palette,
                ideal=False,
                interval=("ci_low", "ci_high"),
            )
        spd = plot_data(summary, "speedup")
        if not spd.empty and "ci_low" in spd:  # a ratio's interval only where the median has one (tables.py)
            spd.loc[spd["ci_low"].isna(), ["speedup_low", "speedup_high"]] = float("nan")
        if spd.empty:
            message = nothing if thr.empty else "no speedup data (no 1×1 baseline)"
            placeholder_png(out_dir / "speedup.png", "Speedup", message)
        else:
            faceted_plot(
                out_dir / "speedup.png",
                spd,
                "speedup",
                "speedup vs. 1×1",
                "Scaling: speedup vs. devices (grey dashed: ideal linear; {bars})",
                palette,
                ideal=True,
                interval=("speedup_low", "speedup_high"),
            )
        energy = plot_data(summary, "samples_per_j") if "samples_per_j" in summary else pd.DataFrame()
        (out_dir / "energy.png").unlink(missing_ok=True)
        if not energy.empty:
            faceted_plot(
                out_dir / "energy.png",
                energy,
                "samples_per_j",
                "samples per joule (median)",
                "Energy efficiency vs. devices (energy_scope in the data files says what was measured)",
                palette,
                ideal=False,
                interval=("", ""),
            )
    return not energy.empty


def write_real_vs_synthetic(pairs: pd.DataFrame, out_dir: Path, label: Any) -> bool:
    """real_vs_synthetic.png: one bar per configuration run on both kinds of data, its real ÷ synthetic ratio
    (aggregate.real_vs_synthetic) with the interval, a line at 1 (no input cost). False (and no file): no pair."""
    path = out_dir / "real_vs_synthetic.png"
    path.unlink(missing_ok=True)
    pairs = pairs[pairs["ratio"].notna()]
    if pairs.empty:
        return False
    labels = [label(r) for _, r in pairs.iterrows()]
    ratios = pairs["ratio"].astype(float).to_numpy()
    frameworks = sorted({fmt_text(f) for f in pairs["framework"]})
    colours = dict(zip(frameworks, sns.color_palette("tab10", max(len(frameworks), 1)), strict=False))
    fig = new_figure(7.5, 0.45 * len(pairs) + 1.6)
    ax = fig.add_subplot()
    y = np.arange(len(pairs))
    ax.barh(y, ratios, color=[colours[fmt_text(f)] for f in pairs["framework"]])
    has = pairs["ratio_low"].notna().to_numpy()
    if has.any():
        low, high = pairs["ratio_low"].astype(float).to_numpy(), pairs["ratio_high"].astype(float).to_numpy()
        ax.errorbar(
            ratios[has],
            y[has],
            xerr=[(ratios - low)[has].clip(min=0), (high - ratios)[has].clip(min=0)],
            fmt="none",
            ecolor="0.2",
            capsize=3,
            linewidth=1,
        )
    ax.axvline(1.0, linestyle="--", color="0.4", linewidth=1.2)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel(
        "median throughput, real ÷ synthetic data "
        + ("(bars: interval)" if has.any() else "(no interval bars: too few repeats)")
    )
    ax.set_title("Input pipeline cost: real vs. synthetic data (dashed: no cost)")
    ax.grid(True, axis="x", alpha=0.3)
    fig.savefig(path, format="png")
    fig.clear()
    return True


def _curves(records: pd.DataFrame) -> pd.DataFrame:
    """One row per evaluation of every time-to-quality run: run, configuration label, seconds, samples, accuracy."""
    rows = []
    runs = records[records["eval_curve"].notna()] if "eval_curve" in records else records.iloc[0:0]
    for _, run in runs.iterrows():
        label = f"{fmt_text(run['framework'])} {fmt_text(run['topology'])} global batch {int(run['global_batch_size'])}"
        for seconds, samples, accuracy in json.loads(run["eval_curve"]):
            rows.append(
                {
                    "run": run["run_id"],
                    "config": label,
                    "seconds": seconds,
                    "samples": samples,
                    "accuracy": accuracy,
                    "model": fmt_text(run["model"]),
                }
            )
    return pd.DataFrame(rows, columns=["run", "config", "seconds", "samples", "accuracy", "model"])


def write_quality_plots(records: pd.DataFrame, summary: pd.DataFrame, out_dir: Path) -> bool:
    """convergence.png (held-out accuracy vs. seconds since run_start and vs. training samples, one line per run,
    the target dashed) and samples_to_converge.png (median samples to converge vs. global batch size, every
    converged run a dot), where the study has time-to-quality runs: True then."""
    curves = _curves(records)
    for name in ("convergence.png", "samples_to_converge.png"):
        (out_dir / name).unlink(missing_ok=True)
    if curves.empty:
        return False
    targets = sorted(set(records["target_accuracy"].dropna().astype(float)))
    with sns.axes_style("whitegrid"):
        fig = new_figure(12, 4.2)
        for ax, x, label in zip(
            fig.subplots(1, 2),
            ("seconds", "samples"),
            ("seconds since run_start (evaluation included)", "training samples"),
            strict=True,
        ):
            sns.lineplot(
                data=curves,
                x=x,
                y="accuracy",
                hue="config",
                units="run",
                estimator=None,
                marker="o",
                ax=ax,
                legend=x == "seconds",
            )
            for target in targets:
                ax.axhline(target, linestyle="--", color="0.4", linewidth=1)
            ax.set_xlabel(label)
            ax.set_ylabel("held-out accuracy")
            ax.set_ylim(0, 1)
        fig.suptitle("Convergence: accuracy on the held-out split at each evaluation (dashed: target)")
        fig.savefig(out_dir / "convergence.png", format="png")
        fig.clear()
        runs = records[records["samples_to_converge"].notna()].copy()
        fig = new_figure(6.5, 4.2)
        ax = fig.add_subplot()
        if runs.empty:
            ax.set_axis_off()
            ax.text(
                0.5,
                0.5,
                "no run converged",
                ha="center",
                va="center",
                fontsize=14,
                color="0.35",
                transform=ax.transAxes,
            )
        else:
            runs["global batch"] = runs["global_batch_size"].astype(int)
            runs["samples to converge"] = runs["samples_to_converge"].astype(float)
            runs["framework"] = runs["framework"].map(fmt_text)
            sns.scatterplot(data=runs, x="global batch", y="samples to converge", hue="framework", ax=ax, alpha=0.6)
            sns.lineplot(
                data=runs,
                x="global batch",
                y="samples to converge",
                hue="framework",
                estimator="median",
                errorbar=None,
                ax=ax,
                legend=False,
            )
            ax.set_xscale("log", base=2)
            ax.set_ylim(bottom=0)
        fig.suptitle("Samples to converge vs. global batch size (line: median)")
        fig.savefig(out_dir / "samples_to_converge.png", format="png")
        fig.clear()
    return True


HISTORY_LINES = 12  # configurations drawn in history.png (the table lists them all)


def write_history(points: pd.DataFrame, out_dir: Path) -> bool:
    """history.png: each configuration's median in every published version that has it, relative to its first
    (1 = as then), with the median's interval where it has one; True when drawn. The configurations whose last
    change is largest are drawn when there are more than HISTORY_LINES."""
    if points.empty:
        return False
    order = list(dict.fromkeys(points["version"]))
    first = points.groupby("configuration", sort=False)["median"].transform("first").astype(float)
    data = points.assign(
        relative=points["median"].astype(float) / first,
        rel_low=points["low"].astype(float) / first,
        rel_high=points["high"].astype(float) / first,
        x=points["version"].map({v: i for i, v in enumerate(order)}),
    )
    change = data.groupby("configuration", sort=False)["relative"].last().sub(1).abs()
    shown = list(change.sort_values(ascending=False).index[:HISTORY_LINES])
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(8, 4.5), layout="constrained")
        ax = fig.add_subplot()
        for config in shown:
            line = data[data["configuration"] == config]
            has = line["rel_low"].notna()
            ax.plot(line["x"], line["relative"], marker="o", label=config)
            ax.errorbar(
                line.loc[has, "x"],
                line.loc[has, "relative"],
                yerr=[
                    line.loc[has, "relative"] - line.loc[has, "rel_low"],
                    line.loc[has, "rel_high"] - line.loc[has, "relative"],
                ],
                fmt="none",
                capsize=3,
                ecolor="#888888",
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(order)), order)
        ax.set_ylabel("median / the first version's median")
        more = len(change) - len(shown)
        ax.set_title(
            "Each configuration across the published versions" + (f" ({more} more in the table)" if more > 0 else "")
        )
        ax.legend(fontsize=6, loc="best")
        fig.savefig(out_dir / "history.png", dpi=110)
    return True


FLEET_CONFIGURATIONS = 6  # panels of fleet.png; the fleet section has every configuration


def write_fleet(table: pd.DataFrame, out_dir: Path, tolerance: float) -> bool:
    """fleet.png: per configuration of a sweep, every node's ratio to the rest of the fleet, sorted, with its
    interval, the tolerance dashed (an outlier stands apart at the left); True when drawn."""
    measured = table[table["ratio"].notna()] if not table.empty and "ratio" in table else pd.DataFrame()
    if measured.empty:
        return False
    configurations = list(dict.fromkeys(measured["configuration"]))[:FLEET_CONFIGURATIONS]
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(8, 2.6 * len(configurations)), layout="constrained")
        for i, configuration in enumerate(configurations):
            ax = fig.add_subplot(len(configurations), 1, i + 1)
            rows = measured[measured["configuration"] == configuration].sort_values("ratio")
            x = range(len(rows))
            slow = rows["verdict"] == "slow"
            colors = ["#c0392b" if s else "#2c7fb8" for s in slow]
            ax.scatter(x, rows["ratio"], c=colors, s=14, zorder=3)
            has = rows["ratio_low"].notna()
            ax.errorbar(
                [j for j, h in zip(x, has, strict=True) if h],
                rows.loc[has, "ratio"],
                yerr=[
                    rows.loc[has, "ratio"] - rows.loc[has, "ratio_low"],
                    rows.loc[has, "ratio_high"] - rows.loc[has, "ratio"],
                ],
                fmt="none",
                ecolor="#999999",
                capsize=2,
            )
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.axhline(tolerance, color="#c0392b", linewidth=0.8, linestyle="--")
            if len(rows) <= 40:
                ax.set_xticks(list(x), list(rows["node"]), rotation=90, fontsize=6)
            else:
                ax.set_xlabel(f"{len(rows)} nodes, slowest first")
            ax.set_ylabel("÷ the fleet")
            ax.set_title(configuration, fontsize=8)
        fig.savefig(out_dir / "fleet.png", dpi=110)
    return True
