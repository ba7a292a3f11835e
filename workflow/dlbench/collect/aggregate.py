"""Aggregate run records per configuration: median and dispersion, speedup, scaling efficiency.

Speedup = median throughput at a topology / median at 1x1 of the same model, framework, precision,
batch size per device, compiler, data and input shape; scaling efficiency = speedup / devices. Every
gradient-exchange strategy is compared with the same 1x1 run, the auto one (one rank exchanges nothing).
Intervals, steady-state counts and plausibility flags come from dlbench.collect.stats, at the study's
report.confidence level. MFU = achieved model TFLOP/s per device / the device's dense peak for the run's math
(dlbench.vocabulary.devices: workflow/references/device_peaks.yaml); a device without a known peak has none, and
says why.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import __version__, logformats
from ..harness import nospace, sysinfo
from ..imports import read_records
from ..logformats import mlperf
from ..logformats.runlogs import read_header
from ..vocabulary import identity
from ..vocabulary.axes import INPUTS, NAMED_AWAY
from ..vocabulary.devices import Device, describe, find_device, peak_for_run, with_measured_cpus
from . import stats
from .records import FIELDS

CONFIG_COLUMNS = [
    "config_id",
    "framework",
    "model",
    "topology",
    "nodes",
    "devices_per_node",
    "devices",
    "batch_size",
    "precision",
    "compiler",
    "compiler_mode",
    "data",
    *INPUTS,
    *NAMED_AWAY,
]
# Configurations whose speedups are comparable: everything but the topology and the strategy (every strategy's
# speedup is over the same single-device auto run: one device exchanges no gradients); a build's over its own.
BASELINE_KEY = [
    "build",
    "framework",
    "model",
    "batch_size",
    "precision",
    "compiler",
    "compiler_mode",
    "data",
    *INPUTS,
    "metric",
]
SUMMARY_COLUMNS = [
    *CONFIG_COLUMNS,
    "strategy_in_effect",  # how the ranks exchanged gradients (read back)
    "unit",
    "metric",
    "n_total",
    "n_ok",
    "n_failed",
    "statuses",
    "error",
    "median",
    "reported_median",  # imported logs: the median of the tool's own final figure (throughput_reported)
    "min",
    "max",
    "q25",
    "q75",
    "iqr",
    "cv",
    "ci_low",
    "ci_high",
    "ci_level",
    "ci_coverage",
    "ci_note",  # the median's interval
    "speedup",
    "efficiency",
    "speedup_low",
    "speedup_high",
    "efficiency_low",
    "efficiency_high",
    "tflops",
    # MFU: tflops / devices / peak_tflops (dlbench.vocabulary.devices); mfu_note: the peak's source, or why none
    "mfu",
    "peak_tflops",
    "mfu_note",
    "peak_memory_gb",  # median over ok runs of the highest rank's peak memory (GiB; the device's)
    "steady_runs",
    "nonsteady_runs",
    "warmup_unstable_runs",
    # telemetry (dlbench.telemetry): medians over the ok runs; energy per sample with its interval
    "energy_per_sample_j",
    "energy_ci_low",
    "energy_ci_high",
    "samples_per_j",
    "power_mean_w",
    "gpu_util_mean",
    "cpu_run_cores",
    "cpu_node_util",
    "contention_cores",
    "contended_runs",
    "throttled_runs",
    "energy_scope",
    "flags",
    # time to train (MLPerf logs, time_to_quality runs): median/min/max/ci are minutes, a failed run
    # counting as infinitely slow; the set's olympic score (MLPerf's result summarizer)
    "target_accuracy",
    "score_min",
    "samples_to_converge",
    "eval_share",
    "batch_label",
]  # "max (96)": the size a batch_size max search found (batch_labels)


def _true_count(values: list[Any]) -> tuple[int, int]:
    """(True, False) counts of a boolean column's values, also when read back from CSV as text."""
    text = [str(v).lower() for v in values]
    return sum(t in ("true", "1", "1.0") for t in text), sum(t in ("false", "0", "0.0") for t in text)


def records_frame(log_paths: list[str], import_paths: Sequence[str] = ()) -> pd.DataFrame:
    """The study's run logs parsed, then the imported records (results/imports/*.jsonl), one row each."""
    # time_to_quality runs are scored per configuration as MLPerf scores a result directory
    rows = mlperf.score_records([logformats.parse(p) for p in log_paths]) + read_records(list(import_paths))
    return pd.DataFrame(rows, columns=FIELDS)


def format_statuses(statuses: Counter) -> str:
    """The summary's `statuses` cell: {'ok': 2, 'oom': 1} -> 'ok:2;oom:1' (parse_statuses reads it back)."""
    return ";".join(f"{status}:{n}" for status, n in sorted(statuses.items()))


def parse_statuses(text: Any) -> list[tuple[str, int]]:
    """'ok:2;oom:1' -> [('ok', 2), ('oom', 1)]; a bare 'oom' counts as 1."""
    out: list[tuple[str, int]] = []
    for part in ("" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)).split(";"):
        name, _, count = part.strip().partition(":")
        if name.strip():
            out.append((name.strip().lower(), int(count) if count.strip().isdigit() else 1))
    return out


def _by_name(row: Mapping[Hashable, Any]) -> dict[str, Any]:
    """A row of a frame by column name (pandas types a label as any hashable; the columns here are names)."""
    return {str(column): value for column, value in row.items()}


# A configuration's runs as _summarise reads them: each of RUN_COLUMNS' values (a numpy array), in record order.
Runs = dict[str, np.ndarray]
RUN_COLUMNS = [
    "status",
    "error",
    "throughput",
    "time_to_train_min",
    "unit",
    "strategy_in_effect",
    "steady",
    "warmup_stable",
    "train_flops_per_sample",
    "throughput_reported",
    "peak_memory_bytes",
    "score_min",
    "device_name",
    "math_dtype",
    "telemetry",
    "energy_per_sample_j",
    "samples_per_j",
    "energy_scope",
    "power_mean_w",
    "gpu_util_mean",
    "cpu_run_cores",
    "cpu_node_util",
    "contention_cores",
    "contended",
    "throttled",
]


def _present(values: np.ndarray) -> np.ndarray:
    """The values that are not missing (Series.dropna)."""
    return values[~pd.isna(values)]


def _floats(values: np.ndarray) -> np.ndarray:
    """The values as floats, the missing ones left out (Series.astype(float).dropna())."""
    numbers = np.asarray(values, dtype=float)
    return numbers[~np.isnan(numbers)]


def _median(numbers: np.ndarray) -> float:
    """Series.median of floats without missing values: np.median, the same arithmetic as pandas' (NaN: none)."""
    return float(np.median(numbers)) if len(numbers) else math.nan


def _first_text(values: np.ndarray) -> str | None:
    return next((v for v in values if isinstance(v, str)), None)


def _by_time(group: Runs) -> bool:
    """A configuration measured by time to train (MLPerf): no throughput, a time."""
    return bool(pd.isna(group["throughput"]).all() and not pd.isna(group["time_to_train_min"]).all())


def _summarise(
    config: dict[str, Any],
    group: Runs,
    level: float = stats.DEFAULT_LEVEL,
    frame: pd.DataFrame | None = None,
    peaks: tuple[Device, ...] | None = None,
) -> dict[str, Any]:
    """The summary row of one configuration (`config`: its CONFIG_COLUMNS) from its runs; `frame`: the same runs
    as a frame, where they are measured by time to train; `peaks`: what MFU is measured against (the GPU table
    where None)."""
    # A run measured by time to train (MLPerf) has no throughput: it counts as ok, not as a throughput.
    is_ok = np.asarray(group["status"] == "ok", dtype=bool)  # a missing status is not ok
    ok = _floats(group["throughput"][is_ok])
    errors = group["error"][~is_ok]
    by_time = _by_time(group)
    row = {
        **config,
        "unit": _first_text(group["unit"]),
        "strategy_in_effect": _first_text(group["strategy_in_effect"]),
        "metric": "time_to_train" if by_time else "throughput",
        "n_total": len(is_ok),
        "n_ok": int(is_ok.sum()),
        "n_failed": len(errors),
        "statuses": format_statuses(Counter(group["status"].tolist())),
        "error": errors[0] if len(errors) else "",
        "ci_level": level,
    }
    if "steady" in group:
        row["steady_runs"], row["nonsteady_runs"] = _true_count(group["steady"][is_ok].tolist())
    if "warmup_stable" in group:
        row["warmup_unstable_runs"] = _true_count(group["warmup_stable"][is_ok].tolist())[1]
    ok_runs = {column: values[is_ok] for column, values in group.items()}
    row |= _telemetry(ok_runs, level)
    if len(ok):
        ci = stats.median_ci(ok, level)
        row |= {"ci_low": ci.low, "ci_high": ci.high, "ci_coverage": ci.coverage, "ci_note": ci.note}
        # numpy's median, quantiles, mean and standard deviation: the arithmetic pandas' Series methods use
        q25, q75 = np.quantile(ok, 0.25), np.quantile(ok, 0.75)
        row |= {
            "median": _median(ok),
            "min": ok.min(),
            "max": ok.max(),
            "q25": q25,
            "q75": q75,
            "iqr": q75 - q25,
            "cv": np.std(ok, ddof=1) / np.mean(ok) if len(ok) > 1 else 0.0,
        }
        flops = _present(group["train_flops_per_sample"])
        if len(flops):  # achieved model TFLOP/s at the median throughput, all devices together
            row["tflops"] = row["median"] * float(flops[0]) / 1e12
        row |= _mfu(ok_runs, row, peaks)
    reported = _floats(ok_runs["throughput_reported"])
    if len(reported):
        row["reported_median"] = _median(reported)
    memory = _floats(ok_runs["peak_memory_bytes"])
    if len(memory):
        row["peak_memory_gb"] = _median(memory) / 2**30
    if by_time:
        assert frame is not None, "a configuration measured by time to train is summarised from its frame"
        row |= _time_to_train(frame, level)
    elif not pd.isna(group["score_min"]).all():  # an MLPerf set whose logs also give a throughput: its score too
        row["score_min"] = _present(group["score_min"])[0]
    return row


def _mfu(ok_runs: Runs, row: dict[str, Any], peaks: tuple[Device, ...] | None = None) -> dict[str, Any]:
    """MFU of a configuration: its achieved model TFLOP/s (all devices together) / devices / the dense peak of the
    device its ok runs name, for their precision and math (dlbench.vocabulary.devices.peak_for_run); on a CPU
    whose peak was measured, / nodes / that node's peak. None with the reason in mfu_note where there is no single
    known peak (no or several device names, runs differing in their math, a device or precision the table lacks)
    or no model FLOPs."""
    names = sorted({str(n) for n in _present(ok_runs["device_name"])})
    if len(names) != 1:
        return {
            "mfu_note": f"mixed devices ({'; '.join(names)}): no single peak" if names else "no device name recorded"
        }
    maths = sorted({str(m) for m in _present(ok_runs["math_dtype"])}) if "math_dtype" in ok_runs else []
    if len(maths) > 1:
        return {"mfu_note": f"runs differ in their math ({', '.join(maths)}): no single peak"}
    precision = row.get("precision")
    peak, note = peak_for_run(
        names[0], None if pd.isna(precision) else str(precision), maths[0] if maths else None, peaks
    )
    if peak is None:
        return {"mfu_note": note}
    device = find_device(names[0], peaks)
    tflops, count = row.get("tflops"), row.get("nodes" if device is not None and device.per_node else "devices")
    if tflops is None or not count or pd.isna(count):
        return {"peak_tflops": peak, "mfu_note": f"no model FLOPs or device count recorded; peak {note}"}
    return {"mfu": tflops / float(count) / peak, "peak_tflops": peak, "mfu_note": note}


def _mfu_flags(row: dict[str, Any]) -> list[stats.Flag]:
    """An MFU above 1 is not a finding: more model FLOP/s than the device can do."""
    mfu = row.get("mfu")
    if mfu is None or pd.isna(mfu) or mfu <= 1.0:
        return []
    return [
        stats.Flag(
            "mfu_above_peak",
            f"MFU {mfu:.2f} > 1, more model FLOP/s per device than its dense peak of "
            f"{row['peak_tflops']:g} TFLOP/s: model FLOPs or samples overcounted, or "
            "the device or its math misrecorded (a lower peak than it ran at)",
        )
    ]


REPORTED_TOLERANCE = 0.02  # dlbench's figure of an imported log and the tool's own: closer is the same figure


def _reported_flags(row: dict[str, Any]) -> list[stats.Flag]:
    """An imported configuration whose figure (the import's rule over the per-step values) and the tool's own
    (throughput_reported) differ is not a finding until the reader knows which one a comparison needs."""
    median, reported = row.get("median"), row.get("reported_median")
    if median is None or reported is None or pd.isna(median) or pd.isna(reported) or not reported:
        return []
    gap = median / reported - 1
    if abs(gap) <= REPORTED_TOLERANCE:
        return []
    return [
        stats.Flag(
            "differs_from_reported",
            f"the median {median:,.2f} by the import's rule differs by {gap:+.1%} from the tool's own figure "
            f"{reported:,.2f}: warm-up steps inside the window, or another statistic; see 'Other tools' logs' and "
            "set the import's skip_steps / statistic to the rule a comparison needs",
        )
    ]


def _keys(summary: pd.DataFrame, columns: list[str]) -> list[str]:
    """Each row's values of `columns` as one string: rows alike in them have the same key."""
    return ["|".join(map(str, row)) for row in summary[columns].itertuples(index=False)]


# An AMP configuration's fp32 twin: every column of its identity but the precision (and its id) the same.
AMP_TWIN_KEY = [column for column in CONFIG_COLUMNS if column not in ("config_id", "precision")]


def _amp_slower_flags(summary: pd.DataFrame, devices: Sequence[str | None]) -> list[list[stats.Flag]]:
    """Per row: AMP slower than its fp32 twin is not a finding as it stands (AMP exists to be faster); the reason
    where the device's words say it (a CPU without native bf16: emulated). `devices`: each row's device name."""
    key = _keys(summary, AMP_TWIN_KEY)
    fp32 = {k: m for k, p, m in zip(key, summary["precision"], summary["median"], strict=True) if p == "fp32"}
    flags: list[list[stats.Flag]] = []
    for k, precision, median, unit, device in zip(
        key, summary["precision"], summary["median"], summary["unit"], devices, strict=True
    ):
        twin = fp32.get(k)
        if precision != "amp" or pd.isna(median) or twin is None or pd.isna(twin) or median >= twin:
            flags.append([])
            continue
        why = (
            f": {sysinfo.EMULATED_BF16} ({device})"
            if device and sysinfo.model_native_bf16(str(device)) is False
            else ": the device's AMP math is slower here, or its casts cost more than they save at this size"
        )
        unit_words = f" {unit}" if isinstance(unit, str) else ""
        text = f"AMP {median:,.3g} against fp32 {twin:,.3g}{unit_words} ({median / twin:.2f}x) otherwise alike{why}"
        flags.append([stats.Flag("amp_slower_than_fp32", text)])
    return flags


def _score_flags(row: dict[str, Any]) -> list[stats.Flag]:
    """A set's score that counts an unreadable run log as a failed run is not a finding: read, the run might
    have been one of those averaged (mlperf.unreadable_runs)."""
    unreadable = mlperf.unreadable_runs(s for s, n in parse_statuses(row.get("statuses")) for _ in range(n))
    if not unreadable or row.get("score_min") is None or pd.isna(row["score_min"]):
        return []
    return [
        stats.Flag(
            "score_unreadable_run",
            f"the score counts {unreadable} of {row['n_total']} run logs that could not be read as failed runs: "
            "mend or remove those logs (their errors name file and line) before reading the score",
        )
    ]


def _time_to_train(group: pd.DataFrame, level: float) -> dict[str, Any]:
    """Minutes to train, as MLPerf counts them: a run that failed (time_to_quality: did not converge within its
    budget) is infinitely slow. Median and its interval over every run (stats.time_to_train_ci), the fastest and
    slowest, the set's score (the records' score_min: mlperf.score_records), the median samples to converge and the
    share of the time spent evaluating."""
    ok = group["status"] == "ok"
    times = group.loc[ok, "time_to_train_min"].astype(float).dropna()
    ci = stats.time_to_train_ci(times, len(group) - len(times), level)
    row = {
        "unit": "min (time to train)",
        "median": ci.median,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "ci_coverage": ci.coverage,
        "ci_note": ci.note,
        "min": times.min() if len(times) else None,
        "max": times.max() if len(times) == len(group) else np.inf,
        "score_min": next(iter(group["score_min"].dropna()), None),
        "target_accuracy": next(iter(group["target_accuracy"].dropna()), None),
    }
    samples = group.loc[ok, "samples_to_converge"].astype(float).dropna()
    if len(samples):
        row["samples_to_converge"] = samples.median()
    evals = group.loc[ok, "eval_seconds"].astype(float)
    if evals.notna().any():
        row["eval_share"] = float((evals / (group.loc[ok, "time_to_train_min"].astype(float) * 60)).median())
    return row


def _telemetry(ok_runs: Runs, level: float) -> dict[str, Any]:
    """Per configuration: median energy per sample (median_ci, like throughput), median power and utilisation,
    the highest contention and how many runs were contended or throttled."""
    row: dict[str, Any] = {}
    if "telemetry" not in ok_runs or not (ok_runs["telemetry"] == "ok").any():
        return row
    energy = _floats(ok_runs["energy_per_sample_j"])
    if len(energy):
        ci = stats.median_ci(energy, level)
        row |= {
            "energy_per_sample_j": _median(energy),
            "energy_ci_low": ci.low,
            "energy_ci_high": ci.high,
            "samples_per_j": _median(_floats(ok_runs["samples_per_j"])),
            "energy_scope": next(iter(_present(ok_runs["energy_scope"])), None),
        }
    for column in ("power_mean_w", "gpu_util_mean", "cpu_run_cores", "cpu_node_util"):
        values = _floats(ok_runs[column])
        if len(values):
            row[column] = _median(values)
    contention = _floats(ok_runs["contention_cores"])
    row["contention_cores"] = contention.max() if len(contention) else math.nan  # Series.max: NaN when none
    row["contended_runs"] = _true_count(ok_runs["contended"].tolist())[0]
    row["throttled_runs"] = _true_count(ok_runs["throttled"].tolist())[0]
    return row


def summarise(
    records: pd.DataFrame, level: float = stats.DEFAULT_LEVEL, peaks: tuple[Device, ...] | None = None
) -> pd.DataFrame:
    """One row per configuration, in the order the configurations first appear; intervals at `level`; MFU against
    `peaks` (the GPU table where None)."""
    if records.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    # Each configuration's rows (positions), configurations in order of first appearance, as groupby(sort=False).
    positions = sorted(records.groupby("config_id", sort=False).indices.values(), key=lambda rows: rows[0])
    columns = {name: records[name].to_numpy() for name in RUN_COLUMNS if name in records}
    firsts = records.iloc[[rows[0] for rows in positions]][CONFIG_COLUMNS].to_dict(orient="records")
    rows = []
    for first, at in zip(firsts, positions, strict=True):
        group = {name: values[at] for name, values in columns.items()}
        rows.append(_summarise(_by_name(first), group, level, records.iloc[at] if _by_time(group) else None, peaks))
    summary = pd.DataFrame(rows).reindex(columns=SUMMARY_COLUMNS)
    key = pd.Series(_keys(summary, BASELINE_KEY), index=summary.index)
    single = (summary["topology"] == "1x1") & summary["strategy"].fillna("auto").eq("auto")  # imports: null
    baseline = dict(zip(key[single], summary.loc[single, "median"], strict=True))
    summary["speedup"] = summary["median"] / key.map(baseline).astype(float)
    summary.loc[summary["metric"] == "time_to_train", "speedup"] = np.nan  # minutes: no speedup of times
    summary["efficiency"] = summary["speedup"] / summary["devices"]
    # Speedup interval: bootstrap of the ratio of medians, this configuration's repeats over its 1x1 baseline's.
    ok = [np.asarray(columns["throughput"][at][columns["status"][at] == "ok"], dtype=float) for at in positions]
    baseline_runs = {key[i]: ok[i] for i in summary.index[single]}
    lows, highs = np.full(len(summary), np.nan), np.full(len(summary), np.nan)
    for i in summary.index:
        if single[i] and len(ok[i]):
            lows[i] = highs[i] = 1.0  # the baseline itself: 1 by definition
        elif key[i] in baseline_runs:
            ci = stats.ratio_ci(ok[i], baseline_runs[key[i]], level)
            if ci.ok:
                lows[i], highs[i] = ci.low, ci.high
    devices = summary["devices"].astype(float).to_numpy()
    summary["speedup_low"], summary["speedup_high"] = lows, highs
    summary["efficiency_low"], summary["efficiency_high"] = lows / devices, highs / devices
    device_names = [_first_text(columns["device_name"][at]) if "device_name" in columns else None for at in positions]
    summary["flags"] = [
        stats.format_flags(
            [*stats.plausibility_flags(row), *_mfu_flags(row), *_score_flags(row), *_reported_flags(row), *amp]
        )
        for row, amp in zip(
            map(_by_name, summary.to_dict(orient="records")), _amp_slower_flags(summary, device_names), strict=True
        )
    ]
    return summary


def read_searches(search_paths: list[str]) -> list[dict[str, Any]]:
    """The batch-size searches' results (harness/batchsearch.py), each with its file's path."""
    return [{**json.loads(Path(path).read_text()), "path": str(path)} for path in search_paths]


def batch_labels(summary: pd.DataFrame, searches: list[dict[str, Any]]) -> list[str | None]:
    """'max (96)' for a configuration at the size its search found (DLPerf's 'bsz=max'), else None."""
    found = {s["search_id"]: s["batch_size"] for s in searches if s.get("status") == "ok"}
    labels: list[str | None] = []
    for config, batch in zip(summary["config_id"], summary["batch_size"], strict=True):
        try:
            size = found.get(identity.search_id(str(config)))
        except identity.IdentityError:  # an import's id may follow another scheme
            size = None
        labels.append(f"max ({size})" if size is not None and size == batch else None)
    return labels


def _values(column: pd.Series) -> list[str]:
    """Distinct non-empty values of a column (hosts are ';'-joined per run)."""
    return sorted({v for cell in column.dropna() for v in str(cell).split(";") if v})


def environment(
    records: pd.DataFrame, env_markers: list[str], config: dict, peaks: tuple[Device, ...] | None = None
) -> dict:
    """Hosts, devices and commits come from the records; framework details from one log per framework; the peak
    MFU uses per device from `peaks` (the GPU table where None)."""
    frameworks: dict[str, Any] = {}
    for marker in env_markers:
        info = json.loads(Path(marker).read_text())
        frameworks[Path(marker).parent.name.rsplit("-", 1)[0]] = {
            "packages": info["packages"],
            "python": info["python"],
        }
    ordered = records.sort_values("status", key=lambda s: s != "ok", kind="stable")  # ok runs first
    header = functools.cache(read_header)  # a log is read (whole) once for both uses below
    # By node: its CPUs, memory and OS, from the header of a run it supervised (a run's header describes the node
    # its supervisor ran on; one header per set of hosts is read).
    machines: dict[str, dict[str, Any]] = {}
    asked: set[str] = set()
    for path, hosts in zip(ordered["log_path"], ordered["hosts"], strict=True):
        if not isinstance(hosts, str) or not isinstance(path, str) or hosts in asked:
            continue
        asked.add(hosts)
        if (head := header(path)) and head.get("machine") and head.get("hostname") not in machines:
            machines[head.get("hostname") or hosts] = {"cpu_model": head.get("cpu_model"), **head["machine"]}
    for name, runs in ordered.groupby("framework", sort=True):
        framework = str(name)  # a framework's name
        for path in runs["log_path"]:
            head = header(path)
            if head and head["environment"]:
                env = head["environment"]
                frameworks.setdefault(framework, {}).update(
                    {
                        k: env.get(k)
                        for k in (
                            "framework_version",
                            "cuda",
                            "cudnn",
                            "nccl",
                            "driver",
                            "threads",
                            "memory_format",
                            "amp_dtype",
                            "compiler",
                            "parameters",
                            "settings",
                            "interpreter",
                            "interpreter_identity",
                        )
                    }
                )
                frameworks[framework]["python_runtime"] = head.get("python")
                break
    commits = _values(records["git_commit"])
    return {
        "builds": builds_of(ordered, header),
        "study": config.get("study"),
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commits[-1] if commits else None,
        "git_commits": commits,
        "dlbench_version": __version__,  # the version that aggregated (and reports)
        "dlbench_versions": _values(records["dlbench_version"]),  # the versions that made the runs
        "config": config,
        "hosts": _values(records["hosts"]),
        "cpu_models": _values(records["cpu_model"]),
        "devices": _values(records["device_name"]),
        # the peaks MFU uses per device, or why a device has none (dlbench.vocabulary.devices)
        "device_peaks": {name: describe(name, peaks) for name in _values(records["device_name"])},
        "frameworks": frameworks,
        "machines": machines,
    }


def builds_of(records: pd.DataFrame, header: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """Each framework's builds as their runs found them (framework -> build -> framework version, interpreter,
    packages by name), from the environment line of one run per build (ok runs first): what the report names
    when two builds differ."""
    builds: dict[str, dict[str, dict[str, Any]]] = {}
    if "build" not in records:
        return builds
    named = records[records["build"].notna()]
    for (framework, build), runs in named.groupby(["framework", "build"], sort=True):
        for path in runs["log_path"]:
            env = ((header(path) if isinstance(path, str) else None) or {}).get("environment") or {}
            if env.get("packages"):
                builds.setdefault(str(framework), {})[str(build)] = {
                    "framework_version": env.get("framework_version"),
                    "interpreter": env.get("interpreter"),
                    "interpreter_identity": env.get("interpreter_identity"),
                    "packages": env["packages"],
                }
                break
    return builds


def write_all(
    log_paths: list[str],
    env_markers: list[str],
    config: dict,
    records_csv: Path,
    summary_csv: Path,
    environment_json: Path,
    import_paths: Sequence[str] = (),
    search_paths: Sequence[str] = (),
    cpu_peak_paths: Sequence[str] = (),
    sweep_paths: Sequence[str] = (),
) -> None:
    records = records_frame(log_paths, import_paths)
    measured = [json.loads(Path(path).read_text()) for path in cpu_peak_paths]  # dlbench.harness.peak's records
    peaks = with_measured_cpus(measured) if measured else None
    summary = summarise(records, (config.get("report") or {}).get("confidence", stats.DEFAULT_LEVEL), peaks)
    searches = read_searches(list(search_paths))
    summary["batch_label"] = batch_labels(summary, searches) if len(summary) else []
    with nospace.writing(records_csv):
        records.to_csv(records_csv, index=False)
    with nospace.writing(summary_csv):
        summary.to_csv(summary_csv, index=False)
    env = environment(records, env_markers, config, peaks)
    if measured:  # every CPU peak measured, with the reason where one has no figure (a machine that stayed busy)
        env["cpu_peaks"] = measured
    if searches:  # the report's data: every probe, its outcome and memory (report/sections.py)
        env["batch_searches"] = searches
    for path in sweep_paths:  # a sweep's nodes and their states when it was planned (dlbench.plan.sweep)
        env["sweep"] = json.loads(Path(path).read_text())
    with nospace.writing(environment_json):
        Path(environment_json).write_text(json.dumps(env, indent=2, default=str) + "\n")


# Configurations that differ in their data only: real ÷ synthetic is the input pipeline's cost (reading, decoding,
# augmenting inside the step; dlbench.harness.backends.base).
PAIR_KEY = [c for c in CONFIG_COLUMNS if c not in ("config_id", "data")]
PAIR_COLUMNS = [
    *PAIR_KEY,
    "config_real",
    "config_synthetic",
    "unit",
    "n_real",
    "n_synthetic",
    "median_real",
    "median_synthetic",
    "ratio",
    "ratio_low",
    "ratio_high",
    "ratio_note",
]


def alike(records: pd.DataFrame, columns: list[str]) -> pd.Series:
    """A group key per record over `columns` (those present: records of older files may lack an axis), NaN-safe
    (pandas' groupby drops NaN keys; the text form keeps them)."""
    present = [c for c in columns if c in records]
    return pd.Series(["|".join(map(str, row)) for row in records[present].itertuples(index=False)], index=records.index)


def _alike_in_both(key: pd.Series, first: pd.Series, second: pd.Series) -> pd.Series:
    """Whether each record's key has records where `first` holds and records where `second` holds: the only
    groups that can give a pair (the others are left out before grouping, in the order they came)."""
    return key.isin(set(key[first]) & set(key[second]))


def _present_columns(records: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Those of `columns` the records have: a narrow frame, cheap to group and filter."""
    return records[[c for c in columns if c in records]]


def real_vs_synthetic(records: pd.DataFrame, level: float = stats.DEFAULT_LEVEL) -> pd.DataFrame:
    """One row per configuration run on both real and synthetic data (everything else the same): the medians of
    their ok runs and ratio = median(real) / median(synthetic) with its bootstrap interval (stats.ratio_ci), as the
    seed's synthetic-versus-real figure. Below 1: the input pipeline slows training down by that factor."""
    if records.empty or "data" not in records:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    key = alike(records, PAIR_KEY)
    paired = _alike_in_both(key, records["data"] == "real", records["data"] == "synthetic")
    runs_read = _present_columns(records, [*PAIR_KEY, "config_id", "data", "status", "throughput", "unit"])
    rows = []
    for _, group in runs_read[paired].groupby(key[paired], sort=False):
        sides = {data: group[group["data"] == data] for data in ("real", "synthetic")}  # both there: paired
        ok = {
            data: runs.loc[runs["status"] == "ok", "throughput"].astype(float).dropna().to_numpy()
            for data, runs in sides.items()
        }
        ci = stats.ratio_ci(ok["real"], ok["synthetic"], level)
        first = group.iloc[0]
        rows.append(
            {
                **{k: first.get(k) for k in PAIR_KEY},
                "config_real": sides["real"]["config_id"].iloc[0],
                "config_synthetic": sides["synthetic"]["config_id"].iloc[0],
                "unit": next((u for u in group["unit"] if isinstance(u, str)), None),
                "n_real": len(ok["real"]),
                "n_synthetic": len(ok["synthetic"]),
                "median_real": float(np.median(ok["real"])) if len(ok["real"]) else None,
                "median_synthetic": float(np.median(ok["synthetic"])) if len(ok["synthetic"]) else None,
                "ratio": ci.ratio,
                "ratio_low": ci.low,
                "ratio_high": ci.high,
                "ratio_note": ci.note,
            }
        )
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


# Configurations with the same devices split differently over nodes (1x2 against 2x1, 2x4 against 1x8): the ratio
# is what crossing the interconnect costs instead of the node's own links (DLPerf's 1n8g against 2n4g... cases).
NODES_KEY = [c for c in CONFIG_COLUMNS if c not in ("config_id", "topology", "nodes", "devices_per_node")]
NODES_COLUMNS = [
    *NODES_KEY,
    "topology_one_node",
    "topology_nodes",
    "config_one_node",
    "config_nodes",
    "unit",
    "n_one_node",
    "n_nodes",
    "median_one_node",
    "median_nodes",
    "ratio",
    "ratio_low",
    "ratio_high",
    "ratio_note",
]


def across_nodes(records: pd.DataFrame, level: float = stats.DEFAULT_LEVEL) -> pd.DataFrame:
    """One row per configuration run with the same devices on one node and on several (everything else the same):
    the medians of their ok runs and ratio = median(several nodes) / median(one node) with its bootstrap interval
    (stats.ratio_ci). Below 1: the interconnect between nodes is slower than the links within one."""
    if records.empty or "nodes" not in records:
        return pd.DataFrame(columns=NODES_COLUMNS)
    key = alike(records, NODES_KEY)
    paired = _alike_in_both(key, records["nodes"] == 1, records["nodes"] > 1)
    runs_read = _present_columns(
        records, [*NODES_KEY, "config_id", "topology", "nodes", "status", "throughput", "unit"]
    )
    rows = []
    for _, group in runs_read[paired].groupby(key[paired], sort=False):
        one = group[group["nodes"] == 1]  # there: paired
        for _, several in group[group["nodes"] > 1].groupby("nodes", sort=True):
            ok_one, ok_several = (
                runs.loc[runs["status"] == "ok", "throughput"].astype(float).dropna().to_numpy()
                for runs in (one, several)
            )
            ci = stats.ratio_ci(ok_several, ok_one, level)
            first = group.iloc[0]
            rows.append(
                {
                    **{k: first.get(k) for k in NODES_KEY},
                    "topology_one_node": one["topology"].iloc[0],
                    "topology_nodes": several["topology"].iloc[0],
                    "config_one_node": one["config_id"].iloc[0],
                    "config_nodes": several["config_id"].iloc[0],
                    "unit": next((u for u in group["unit"] if isinstance(u, str)), None),
                    "n_one_node": len(ok_one),
                    "n_nodes": len(ok_several),
                    "median_one_node": float(np.median(ok_one)) if len(ok_one) else None,
                    "median_nodes": float(np.median(ok_several)) if len(ok_several) else None,
                    "ratio": ci.ratio,
                    "ratio_low": ci.low,
                    "ratio_high": ci.high,
                    "ratio_note": ci.note,
                }
            )
    return pd.DataFrame(rows, columns=NODES_COLUMNS)
