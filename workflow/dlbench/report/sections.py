"""Report sections beyond the DLPerf tables: each a titled table built from the records and the summary.

A section is a function (ReportInputs) -> Section | None (None: nothing to show, e.g. no MLPerf logs in the
study). SECTIONS lists them in report order; render.py shows each one in index.html (one shared table
template) and README.md. A new section = a function here and a line in SECTIONS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import pandas as pd

from ..collect import builds as build_comparison
from ..collect import expectations as expected
from ..collect import fleet, stats
from ..collect.aggregate import across_nodes, real_vs_synthetic
from ..collect.compare import compare
from ..collect.references import match_references, study_references
from ..logformats import mlperf
from .format import DASH, fmt_factor, fmt_minutes, fmt_num, fmt_text, missing


@dataclass(frozen=True)
class ReportInputs:
    """What a section may read: this version's records and summary, environment.json (the study's config is
    in it), and the records of the set it is compared with (report.compare_to), if any."""

    records: pd.DataFrame
    summary: pd.DataFrame
    env: dict[str, Any]
    baseline: pd.DataFrame | None = None
    baseline_label: str = ""
    # this version against the newest earlier published version of each configuration (dlbench.collect.history),
    # and how many earlier versions there are
    history: pd.DataFrame | None = None
    earlier_versions: int = 0
    judgements: tuple[dict[str, Any], ...] = ()  # the study's expectations judged (dlbench.collect.expectations)
    # every build's configurations against the first build's (dlbench.collect.builds; computed once per report:
    # the headline and the builds section read it); None: computed from the records where a section needs it
    builds: pd.DataFrame | None = None
    fleet: pd.DataFrame | None = None  # a sweep's nodes against the fleet (dlbench.collect.fleet), once per report

    def builds_compared(self) -> pd.DataFrame:
        if self.builds is not None:
            return self.builds
        baseline = build_comparison.baseline_build(self.records, self.env.get("config") or {})
        return build_comparison.compare_builds(self.records, baseline, confidence_level(self.env))


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    caption: str
    rows: list[dict[str, str]]


def time_to_train(inputs: ReportInputs) -> Section | None:
    """MLPerf sets: each run's time to train and the set's score, as mlperf_logging's result summarizer
    computes it (olympic mean; a failed run counts among the dropped slowest; scaling.json's factor)."""
    records = inputs.records
    if "time_to_train_min" not in records or records["time_to_train_min"].isna().all():
        return None
    rows = []
    runs = records[records["time_to_train_min"].notna() | (records["source"] == "mlperf")]
    for run_set, group in runs.groupby(runs["run_set"].fillna(runs["config_id"]), sort=True):
        first = group.iloc[0]
        times = ", ".join(
            f"{fmt_minutes(t)}{'' if s == 'ok' else f' ({s})'}"
            for t, s in zip(group["time_to_train_min"], group["status"], strict=True)
        )
        score = fmt_minutes(first.get("score_min"))
        unreadable = mlperf.unreadable_runs(group["status"])
        if unreadable and score != DASH:  # not a finding: an unreadable log counted as a failed run
            score += f" ⚑ ({unreadable} unreadable run log{'s' if unreadable > 1 else ''} counted as failed)"
        rows.append(
            {
                "Set": PurePath(run_set).name if PurePath(run_set).is_absolute() else str(run_set),
                "Benchmark": fmt_text(first.get("benchmark")) or DASH,
                "Organization": fmt_text(first.get("organization")) or DASH,
                "Platform": fmt_text(first.get("platform")) or DASH,
                "Framework": fmt_text(first.get("framework")),
                "Runs": f"{int((group['status'] == 'ok').sum())}/{len(group)} ok",
                "Time to train (min), per run": times,
                "Score (min)": score,
                "Scaling factor": fmt_factor(first.get("scaling_factor")),
            }
        )
    return Section(
        "time-to-train",
        "Time to train (MLPerf)",
        "Time to train = first run_stop - first run_start. Score = MLPerf's: sort the runs, drop the "
        "fastest and the slowest (a failed run counts among the dropped slowest), average the rest, "
        "times scaling.json's factor where the result directory has one. Minutes to 3 decimals, as MLPerf "
        "publishes them; a score marked ⚑ counts a run log that could not be read as a failed run.",
        rows,
    )


def time_to_quality(inputs: ReportInputs) -> Section | None:
    """dlbench's time-to-quality configurations, per topology: MLPerf's score (olympic mean of the times to train;
    a run that did not converge within its budget counts as failed, i.e. infinitely slow), the median time with its
    interval, how many runs converged, samples to converge, the share of time spent evaluating."""
    summary = inputs.summary
    if "target_accuracy" not in summary:
        return None
    rows_in = summary[summary["target_accuracy"].notna()].copy()
    if rows_in.empty:
        return None
    rows = []
    for _, r in rows_in.sort_values(["nodes", "devices_per_node", "model", "framework", "batch_size"]).iterrows():
        converged, total = int(r["n_ok"]), int(r["n_total"])
        if not missing(r.get("score_min")):
            score = fmt_minutes(r["score_min"])
        elif converged == 0:
            score = f"did not converge ({converged}/{total})"
        else:
            score = f"no score ({total - converged} of {total} did not converge; MLPerf drops at most 1, needs 3 runs)"
        median = fmt_minutes(r.get("median"))
        if not missing(r.get("ci_low")):
            median += f" [{fmt_minutes(r['ci_low'])}–{fmt_minutes(r['ci_high'])}]"
        samples: Any = r.get("samples_to_converge")
        rows.append(
            {
                "Topology": fmt_text(r["topology"]),
                "Model": fmt_text(r["model"]),
                "Framework": fmt_text(r["framework"]),
                "Batch (global)": str(int(r["batch_size"]) * int(r["devices"])),
                "Target": f"{float(r['target_accuracy']):.3g}",
                "Converged": f"{converged}/{total}",
                "Score (min)": score,
                "Median (min) [interval]": median,
                "Samples to converge (median)": DASH if missing(samples) else f"{float(samples):,.0f}",
                "Evaluation share": DASH if missing(r.get("eval_share")) else f"{float(r['eval_share']):.0%}",
                "Config": fmt_text(r["config_id"]),
            }
        )
    return Section(
        "time-to-quality",
        "Time to quality",
        "Time to train = run_stop − run_start (initialisation excluded, evaluation included), until the "
        "held-out accuracy reaches the target. Score = MLPerf's result summarizer: drop the fastest and the "
        "slowest run, average the rest; a run that did not reach the target within its budget is failed "
        "(infinitely slow) and counts among the dropped slowest. Median and its interval count failed "
        "runs as ∞.",
        rows,
    )


def throughput_definitions(inputs: ReportInputs) -> Section | None:
    """Which definition of throughput each framework column uses: sources differ (dlbench: samples over the
    measured wall time; DLLogger: a mean of per-step rates; tf_cnn: its own average), so the report says."""
    records = inputs.records
    if "throughput_definition" not in records or "source" not in records:
        return None
    known = records[records["throughput_definition"].notna()]
    if known.empty or set(known["source"]) == {"dlbench"}:
        return None  # our own definition is stated in the notes
    rows = [
        {"Framework": fmt_text(fw), "Source": fmt_text(src), "Throughput means": fmt_text(definition)}
        for (fw, src, definition), _ in known.groupby(["framework", "source", "throughput_definition"])
    ]
    return Section(
        "definitions",
        "What each throughput means",
        "Figures from other tools keep their own definition; where a log has per-step lines, dlbench "
        "re-derives its own and keeps the tool's final figure as throughput_reported (both side by side in "
        "'Other tools' logs').",
        rows,
    )


def _figure(values: pd.Series) -> str:
    """The median of an imported figure, to 2 decimals as the tools' tables print throughput (5889.05)."""
    values = values.astype(float).dropna()
    return DASH if values.empty else f"{values.median():,.2f}"


def imported_figures(inputs: ReportInputs) -> Section | None:
    """Imported configurations whose logs print a figure of their own: dlbench's throughput (by the import's rule,
    `throughput_definition`) beside the tool's own final figure (`throughput_reported`, read where
    `throughput_reported_key` says), each with its definition: a published table may use either, or neither."""
    records = inputs.records
    if "throughput_reported" not in records or "source" not in records:
        return None
    imported = records[records["source"].notna() & (records["source"] != "dlbench")]
    rows = []
    for config, group in imported.groupby("config_id", sort=True):
        ok = group[group["status"] == "ok"]
        if ok["throughput_reported"].isna().all():
            continue
        keys = sorted({fmt_text(k).split(" (line")[0] for k in ok["throughput_reported_key"].dropna()})
        rows.append(
            {
                "Config": fmt_text(config),
                "Runs": f"{len(ok)}/{len(group)} ok",
                "Throughput (median)": _figure(ok["throughput"]),
                "Its definition": "; ".join(sorted({fmt_text(d) for d in ok["throughput_definition"].dropna()})),
                "Tool's own figure (median)": _figure(ok["throughput_reported"]),
                "Where the tool prints it": ", ".join(keys) or DASH,
                "Unit": fmt_text(ok["unit"].dropna().iloc[0]) if ok["unit"].notna().any() else DASH,
            }
        )
    if not rows:
        return None
    return Section(
        "imported-figures",
        "Other tools' logs: dlbench's figure and the tool's own",
        "Throughput is the import's rule over the log's per-step values (the tables and plots use it); the tool's "
        "own figure is the final figure its script printed. A published table may use either, or another rule: "
        "e.g. PaddlePaddle/Perf's tables of NVIDIA's logs average the per-step values after a warm-up window "
        "(an import's labels `statistic: mean_of_steps` and `skip_steps`).",
        rows,
    )


def flags(inputs: ReportInputs) -> Section | None:
    """Configurations whose numbers should not be read as findings, each with the likely cause (stats.py)."""
    summary = inputs.summary
    if "flags" not in summary:
        return None
    flagged = summary[summary["flags"].map(lambda f: bool(fmt_text(f)))]
    if flagged.empty:
        return None
    rows = [
        {"Config": fmt_text(r["config_id"]), "Flag": code.strip(), "Why it matters, likely cause": why.strip()}
        for _, r in flagged.iterrows()
        for flag in fmt_text(r["flags"]).split("; ")
        for code, _, why in [flag.partition(":")]
    ]
    return Section(
        "flags",
        "Flagged results",
        "Results that are not findings as they stand: too few repeats for an interval, a spread too wide, "
        "a speedup beyond what the devices allow, runs not in steady state, an MFU above the device's "
        "peak. Cells with a flag are marked ⚑.",
        rows,
    )


def _comparison_cells(row: pd.Series) -> dict[str, str]:
    """A comparison's ratio with its interval and its test's p (dlbench.collect.stats.Comparison.columns)."""
    return {
        "Ratio [interval]": _ratio(row),
        "p": DASH if missing(row.get("p_value")) else f"{float(row['p_value']):.3g}",
    }


def _ratio(row: pd.Series) -> str:
    if missing(row.get("ratio")):
        return DASH
    if missing(row.get("ratio_low")):
        return f"{float(row['ratio']):.3f}"
    return f"{float(row['ratio']):.3f} [{float(row['ratio_low']):.3f}–{float(row['ratio_high']):.3f}]"


def supported_ratios(pairs: pd.DataFrame, counts: tuple[str, str], level: float) -> pd.DataFrame:
    """The pairs with the interval of each ratio kept only where both sides have the repeats an interval of their
    median needs (stats.min_repeats); otherwise the ratio alone, and its note says why."""
    if pairs.empty:
        return pairs
    need = stats.min_repeats(level)
    too_few = pairs[list(counts)].min(axis=1) < need
    pairs = pairs.copy()
    pairs.loc[too_few, ["ratio_low", "ratio_high"]] = float("nan")
    pairs.loc[too_few, "ratio_note"] = [
        f"no interval: {int(a)} and {int(b)} ok repeats, a {level:.0%} interval needs {need} each"
        for a, b in pairs.loc[too_few, list(counts)].itertuples(index=False)
    ]
    return pairs


def confidence_level(env: dict[str, Any]) -> float:
    """The study's report.confidence (environment.json carries the config), else stats' default."""
    return float((env.get("config") or {}).get("report", {}).get("confidence", stats.DEFAULT_LEVEL))


def pair_label(row: pd.Series | dict[str, Any]) -> str:
    """A real/synthetic pair in a few words: framework, model, topology, precision, batch, strategy if not auto."""
    parts = [
        fmt_text(row.get("framework")),
        fmt_text(row.get("model")),
        fmt_text(row.get("topology")),
        fmt_text(row.get("precision")),
        f"bs{fmt_text(row.get('batch_size'))}",
    ]
    if fmt_text(row.get("strategy")) not in ("", "auto"):
        parts.append(fmt_text(row.get("strategy")))
    return " ".join(p for p in parts if p)


def real_synthetic(inputs: ReportInputs) -> Section | None:
    """Per configuration run on both real and synthetic data: median(real) / median(synthetic), the input
    pipeline's cost (aggregate.real_vs_synthetic), with its bootstrap interval."""
    level = confidence_level(inputs.env)
    pairs = supported_ratios(real_vs_synthetic(inputs.records, level), ("n_real", "n_synthetic"), level)
    if pairs.empty:
        return None
    rows = [
        {
            "Configuration": pair_label(r),
            "Synthetic median": fmt_num(r["median_synthetic"]),
            "Real median": fmt_num(r["median_real"]),
            "Unit": fmt_text(r["unit"]) or DASH,
            "Real ÷ synthetic [interval]": _ratio(r),
            "Runs ok (real, synthetic)": f"{r['n_real']}, {r['n_synthetic']}",
            "Note": fmt_text(r["ratio_note"]),
        }
        for _, r in pairs.iterrows()
    ]
    return Section(
        "real-vs-synthetic",
        "Real ÷ synthetic data",
        f"Median throughput on real data / on synthetic data, everything else the same, with its "
        f"{level:.0%} percentile-bootstrap interval: the cost of the input pipeline (reading, decoding, "
        "augmenting in the step). 1 = free; 0.5 = training runs at half speed on real data. Plot: "
        "real_vs_synthetic.png.",
        rows,
    )


def interconnect(inputs: ReportInputs) -> Section | None:
    """Per configuration run with the same devices on one node and on several (1x2 and 2x1): median(several nodes)
    / median(one node), the cost of the interconnect (aggregate.across_nodes), with its bootstrap interval."""
    level = confidence_level(inputs.env)
    pairs = supported_ratios(across_nodes(inputs.records, level), ("n_one_node", "n_nodes"), level)
    if pairs.empty:
        return None
    rows = [
        {
            "Configuration": f"{pair_label({**r, 'topology': ''})}, {r['devices']} devices",
            "One node": f"{r['topology_one_node']}: {fmt_num(r['median_one_node'])}",
            "Several nodes": f"{r['topology_nodes']}: {fmt_num(r['median_nodes'])}",
            "Unit": fmt_text(r["unit"]) or DASH,
            "Nodes ÷ one node [interval]": _ratio(r),
            "Runs ok (one, several)": f"{r['n_one_node']}, {r['n_nodes']}",
            "Note": fmt_text(r["ratio_note"]),
        }
        for _, r in pairs.iterrows()
    ]
    return Section(
        "interconnect",
        "Across nodes ÷ within one node",
        f"The same devices on several nodes / on one node (e.g. 2x1 / 1x2), everything else the same: "
        f"median throughput ratio with its {level:.0%} percentile-bootstrap interval. Below 1: the gradient "
        "exchange between nodes (their network) is slower than within one node. Each run's hosts and "
        "every rank's host are in records.csv (hosts, rank_hosts).",
        rows,
    )


def comparison(inputs: ReportInputs) -> Section | None:
    """This version against the result set report.compare_to names: ratio of medians with its interval and a
    verdict per configuration present in both (dlbench.collect.compare); configurations in one side only listed."""
    if inputs.baseline is None:
        return None
    level = confidence_level(inputs.env)
    result = compare(inputs.baseline, inputs.records, level=level)
    rows = [
        {
            "Config": fmt_text(r["config_id"]),
            "Verdict": fmt_text(r["verdict"]),
            f"{inputs.baseline_label} median": fmt_num(r.get("median_a")),
            "this median": fmt_num(r.get("median_b")),
            **_comparison_cells(r),
        }
        for _, r in result.iterrows()
    ]
    return Section(
        "comparison",
        f"Compared with {inputs.baseline_label}",
        f"Ratio = this version's median / {inputs.baseline_label}'s, with its {level:.0%} bootstrap "
        "interval; verdict from an exact rank test on log throughput at that level (docs/statistics.md)"
        ". Configurations present in one side only say so.",
        rows,
    )


def fleet_section(inputs: ReportInputs) -> Section | None:
    """A sweep's fleet table: per configuration, every node (slowest first) with its median and interval, its
    ratio to the rest of the fleet with its interval, the verdict and why, and the hardware its runs reported."""
    table = inputs.fleet
    if table is None or table.empty:
        return None
    level = confidence_level(inputs.env)
    tolerance = ((inputs.env.get("config") or {}).get("sweep") or {}).get("tolerance", fleet.DEFAULT_TOLERANCE)
    rows = [
        {
            "Config": fmt_text(r["configuration"]),
            "Node": fmt_text(r["node"]),
            "Verdict": str(r["verdict"]) if r["verdict"] == fleet.WITHIN else str(r["verdict"]).upper(),
            "Median [interval]": _interval(r.get("median"), r.get("ci_low"), r.get("ci_high")),
            "n": f"{int(r['n_ok'])}/{int(r['n_total'])}",
            "÷ fleet [interval]": _interval(r.get("ratio"), r.get("ratio_low"), r.get("ratio_high"), digits=3),
            "Hardware (telemetry)": fleet.hardware_words(r) or DASH,
            "Why": fmt_text(r["why"]),
        }
        for r in table.to_dict(orient="records")
    ]
    nodes = ((inputs.env.get("sweep") or {}).get("source")) or "the study"
    return Section(
        "fleet",
        "Fleet: every node against the rest",
        f"Nodes from {nodes}. Ratio = the node's median ÷ the median of the other nodes' runs, with its {level:.0%} "
        f"bootstrap interval; within when the interval lies at or above {tolerance:g}, slow when below it; an "
        f"interval containing it is unstable when wider than {2 * (1 - tolerance):.2g} (the repeats too spread to "
        "judge), else undecided; "
        "down: SLURM's state when the sweep was planned (no job). Only within passes. Hardware: what the node's "
        "runs' telemetry saw (docs/nodes.md).",
        rows,
    )


def _interval(value: Any, low: Any, high: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return DASH
    text = f"{value:,.{digits}f}" if digits else fmt_num(value)
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return text
    return f"{text} [{low:,.{digits}f}, {high:,.{digits}f}]" if digits else f"{text} [{fmt_num(low)}, {fmt_num(high)}]"


def expectations(inputs: ReportInputs) -> Section | None:
    """The study's expectations, one row per expectation and configuration it matches: pass, fail or cannot be
    judged, with the figure and the interval it was judged on (dlbench.collect.expectations)."""
    if not inputs.judgements:
        return None
    level = confidence_level(inputs.env)
    rows = [
        {
            "Verdict": str(j["verdict"]).upper() if j["verdict"] != expected.PASS else "pass",
            "Expectation": fmt_text(j["expectation"]),
            "Config": fmt_text(j["configuration"]) or DASH,
            "Judged on": fmt_text(j["reason"]),
        }
        for j in inputs.judgements
    ]
    return Section(
        "expectations",
        f"Expectations: {expected.summary_line(inputs.judgements)}",
        f"Each expectation judged on a {level:.0%} interval: a floor passes when the median's interval lies at or "
        "above it and fails when it lies below; a factor of another set (a build, the previous version) likewise "
        "with the ratio of medians' bootstrap interval. An interval that contains the bound, too few repeats or "
        "nothing to compare with cannot be judged, which is not a pass (snakemake exits 1).",
        rows,
    )


def builds(inputs: ReportInputs) -> Section | None:
    """Each configuration in another build against the same configuration in the study's first build: ratio of
    medians with its interval and the verdict (dlbench.collect.builds), and what differs between the two."""
    result = inputs.builds_compared()
    if result.empty:
        return None
    baseline, level = str(result["baseline"].iloc[0]), confidence_level(inputs.env)
    rows = [
        {
            "Config": fmt_text(r["configuration"]),
            "Build": f"{r['build']} vs {r['baseline']}",
            "Verdict": fmt_text(r["verdict"]),
            f"{baseline} median": fmt_num(r["median_baseline"]),
            "build median": fmt_num(r["median_build"]),
            "Ratio [interval]": _ratio(r),
            "n": f"{int(r['n_baseline'])}/{int(r['n_build'])}",
            "What differs": build_comparison.differences(inputs.env, str(r["framework"]), baseline, str(r["build"])),
        }
        for _, r in result.iterrows()
    ]
    return Section(
        "builds",
        f"Builds compared with {baseline}",
        f"Ratio = the build's median / build {baseline}'s for the same configuration, with its {level:.0%} "
        "bootstrap interval; verdict from an exact rank test on log throughput (docs/statistics.md). What differs: "
        "the package versions each build's runs recorded, and the variables the study sets.",
        rows,
    )


def history(inputs: ReportInputs) -> Section | None:
    """Each configuration across the study's published versions: this version against the newest earlier one
    that has it (dlbench.collect.history), the medians of every version in history.png."""
    changes = inputs.history
    if changes is None or changes.empty:
        return None
    level = confidence_level(inputs.env)
    rows = [
        {
            "Config": fmt_text(r["configuration"]),
            "Since": fmt_text(r["since"]),
            "Verdict": fmt_text(r["verdict"]),
            "then": fmt_num(r["median_then"]),
            "now": fmt_num(r["median_now"]),
            **_comparison_cells(r),
        }
        for _, r in changes.iterrows()
    ]
    return Section(
        "history",
        f"History across {inputs.earlier_versions} earlier version{'s' if inputs.earlier_versions > 1 else ''}",
        f"This version's median / the newest earlier version's that has the configuration, with its {level:.0%} "
        "bootstrap interval and a rank-test verdict; every version's median in history.png. A figure an import "
        "gives once is a point without an interval: its change is 'too few repeats'.",
        rows,
    )


def references(inputs: ReportInputs) -> Section | None:
    """Our median / published figures (the study's `references:` files) for the configurations they match.
    Published figures are at 224x224: configurations at another image size are not compared."""
    config = inputs.env.get("config") or {}
    if not config.get("references"):
        return None
    summary = inputs.summary
    summary = summary[summary["image_size"].isna() | (summary["image_size"] == 224)]
    published = study_references(config)
    matched = match_references(summary, published)
    rows = [
        {
            "Config": fmt_text(r["config_id"]),
            "Published": f"{fmt_text(r['label'])} ({fmt_text(r['device'])})",
            "Published figure": fmt_num(r["published"]),
            "Our median": fmt_num(r["median"]),
            "Ours / published": f"{float(r['ratio']):.3g}",
            "Compared on": fmt_text(r["compared_on"]),
            "Source": fmt_text(r["url"]),
        }
        for _, r in matched.iterrows()
    ]
    if not rows:
        rows = [
            {
                "Config": DASH,
                "Published": "no published figure matches a configuration of this study "
                "(framework, model, topology, precision, batch size, at 224x224)",
                "Source": ", ".join(config["references"]),
            }
        ]
    return Section(
        "references",
        "Against published figures",
        "Our median / the published figure, for the configurations a published figure matches on every "
        "key it gives (the rest were not published). Different hardware: a ratio, not a verdict.",
        rows,
    )


def _energy(row: pd.Series) -> str:
    if missing(row.get("energy_per_sample_j")):
        return DASH
    text = f"{float(row['energy_per_sample_j']):.4g}"
    if not missing(row.get("energy_ci_low")):
        text += f" [{float(row['energy_ci_low']):.4g}–{float(row['energy_ci_high']):.4g}]"
    return text


def _reasons(group: pd.DataFrame, column: str) -> str:
    """A telemetry source's state over a configuration's runs: readable, or why not (distinct texts)."""
    return "; ".join(dict.fromkeys(fmt_text(v) for v in group[column] if fmt_text(v))) or DASH


def telemetry(inputs: ReportInputs) -> Section | None:
    """Per configuration, what the hardware did in the measured windows (dlbench.telemetry): utilisation,
    contention, energy per sample, throttling; a contended or throttled configuration is flagged (⚑)."""
    records = inputs.records
    if "telemetry" not in records or not (records["telemetry"] == "ok").any():
        return None
    summary = inputs.summary.set_index("config_id")
    rows = []
    for key, group in records[records["telemetry"] == "ok"].groupby("config_id", sort=False):
        config = str(key)  # a config_id
        s = summary.loc[config] if config in summary.index else pd.Series(dtype=object)
        assert isinstance(s, pd.Series)  # one summary row per configuration
        contended = int(s.get("contended_runs") or 0) if not missing(s.get("contended_runs")) else 0
        throttled = int(s.get("throttled_runs") or 0) if not missing(s.get("throttled_runs")) else 0
        rows.append(
            {
                "Config": fmt_text(config),
                "Runs sampled": str(len(group)),
                "Run CPU (cores)": fmt_num(s.get("cpu_run_cores")),
                "Node CPU": DASH if missing(s.get("cpu_node_util")) else f"{float(s['cpu_node_util']):.0%}",
                "Others (cores, max)": fmt_num(s.get("contention_cores"))
                + (f" ⚑ {contended} run(s)" if contended else ""),
                "GPU util %": fmt_num(s.get("gpu_util_mean")),
                "J/sample [interval]": _energy(s),
                "Samples/J": fmt_num(s.get("samples_per_j")),
                "Mean power (W)": fmt_num(s.get("power_mean_w")),
                "Throttled": f"⚑ {throttled} run(s)"
                if throttled
                else ("no" if "throttled" in group and group["throttled"].notna().any() else DASH),
                "GPU": _reasons(group, "gpu_telemetry"),
                "RAPL": _reasons(group, "rapl"),
            }
        )
    return Section(
        "telemetry",
        "What the hardware did",
        "Medians over the ok runs of each configuration, measured window only (dlbench.telemetry). Others = "
        "CPU used by processes outside the run; ⚑ above 0.10 cores. Energy = what energy_scope says "
        "(NVML GPU counter or integrated power, RAPL package + DRAM); a dash: no source readable here.",
        rows,
    )


def _mib(value: Any) -> str:
    return DASH if missing(value) else f"{float(value) / 2**20:.0f}"


def batch_searches(inputs: ReportInputs) -> Section | None:
    """batch_size max: each search's outcome and its probes in order, with the memory each one reached
    (environment.json's batch_searches, from results/search/)."""
    searches = inputs.env.get("batch_searches") or []
    if not searches:
        return None
    rows = []
    for search in searches:
        probes = search.get("probes") or []
        found = search.get("batch_size")
        rows.append(
            {
                "Search": fmt_text(search.get("search_id")),
                "Result": f"max ({found})"
                if search.get("status") == "ok"
                else f"no max: {fmt_text(search.get('status'))}",
                "Why": fmt_text(search.get("reason")),
                "Multiple, cap": f"{search.get('multiple')}, {search.get('max_batch_size') or 'none'}",
                "Budget (GiB/rank)": fmt_text(search.get("memory_limit_gb")) or "device",
                "Probes: size status (peak MiB, peak address space MiB)": "; ".join(
                    f"{p['batch_size']} {p['status']} "
                    f"({_mib(p.get('peak_memory_bytes'))}, {_mib(p.get('vm_peak_bytes'))})"
                    for p in probes
                ),
            }
        )
    return Section(
        "batch-searches",
        "Batch-size searches (batch_size: max)",
        "Each search doubles the batch size per device from its multiple until a probe (a short real run) "
        "runs out of memory, then bisects; 'max (N)' in the tables is the largest size seen to fit. A probe "
        "that fails otherwise stops the search with its status, and the configuration has no runs. On CPU "
        "the budget is an address-space limit per rank above its size once the framework is loaded "
        "(docs/batch-size-search.md).",
        rows,
    )


SECTIONS: tuple[Callable[[ReportInputs], Section | None], ...] = (
    fleet_section,
    expectations,
    flags,
    real_synthetic,
    interconnect,
    comparison,
    builds,
    history,
    references,
    time_to_quality,
    time_to_train,
    throughput_definitions,
    imported_figures,
    telemetry,
    batch_searches,
)


def build_sections(inputs: ReportInputs) -> list[Section]:
    return [s for make in SECTIONS if (s := make(inputs)) is not None]
