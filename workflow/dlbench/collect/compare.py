"""Compare two result sets, configuration by configuration: is B faster or slower than A, beyond the noise?

    PYTHONPATH=workflow .venv/bin/python -m dlbench.collect.compare A B [--tolerance 0.05] [--level 0.95]

A and B are report directories (results/reports/v3/), aggregate directories, or records.csv files. For each
configuration in both: the ratio of medians B/A with its bootstrap interval and a verdict from a rank test
(dlbench.collect.stats.compare_repeats); configurations in one side only are listed as such. Exit status 1 when any
configuration is significantly slower by more than the tolerance (a regression gate for CI, like ReFrame's
--performance-compare), 2 when an input cannot be read, else 0. `compare` and `plot_comparison` serve the report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from . import stats

KEY = "config_id"
# Shown with each configuration (taken from whichever side has it).
DESCRIBE = ["framework", "model", "topology", "batch_size", "precision", "compiler", "data", "unit"]
COLUMNS = [
    KEY,
    *DESCRIBE,
    "present",
    "n_a",
    "n_b",
    "median_a",
    "median_b",
    "ratio",
    "ratio_low",
    "ratio_high",
    "p_value",
    "verdict",
    "level",
    "tolerance",
    "note",
]
NOISE_MODEL = (
    "Noise model: the repeats of a configuration are independent draws from one distribution of unknown shape "
    "(no normality assumed); a change is a multiplicative shift of that distribution. The ratio is median(B) / "
    "median(A) with a percentile-bootstrap interval over the repeats (fixed seed). The verdict comes from a "
    "Mann-Whitney rank test on log throughput (exact for small sets), two-sided at threshold 1 - level: 'slower' "
    "means B is significantly below (1 - tolerance) x A, 'faster' above (1 + tolerance) x A, 'within tolerance' "
    "a significant change smaller than the tolerance. With 3 vs 3 repeats no rank test reaches p < 0.05."
)


class InputError(ValueError):
    """A result set that cannot be read (named in the message)."""


def load_records(path: str | Path) -> pd.DataFrame:
    """records.csv, or the records.csv of a report or aggregate directory."""
    path = Path(path)
    candidates = [path] if path.is_file() else [path / "records.csv", path / "aggregate" / "records.csv"]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise InputError(f"{path}: no records.csv (give a report directory, an aggregate directory or a records.csv)")
    records = pd.read_csv(found)
    missing = {KEY, "status", "throughput"} - set(records.columns)
    if missing:
        raise InputError(f"{found}: not a dlbench records file (no {', '.join(sorted(missing))} column)")
    return records


def ok_throughputs(records: pd.DataFrame) -> dict[str, np.ndarray]:
    ok = records[records["status"].astype(str) == "ok"]
    values = pd.to_numeric(ok["throughput"], errors="coerce")
    return {str(k): v.dropna().to_numpy(float) for k, v in values.groupby(ok[KEY], sort=False)}


def _descriptions(records: pd.DataFrame) -> dict[str, dict]:
    present = [c for c in DESCRIBE if c in records.columns]
    first = records.drop_duplicates(KEY).set_index(KEY)[present]
    return {str(k): row for k, row in first.to_dict(orient="index").items()}


def compare(
    records_a: pd.DataFrame,
    records_b: pd.DataFrame,
    level: float = stats.DEFAULT_LEVEL,
    tolerance: float = 0.0,
    resamples: int = stats.DEFAULT_RESAMPLES,
) -> pd.DataFrame:
    """One row per configuration of either set: B against A where both have it (verdict per
    dlbench.collect.stats.compare_repeats), `present` = both | A only | B only. Configurations in both come first, in
    A's order, then those of A only, then those of B only."""
    runs_a, runs_b = ok_throughputs(records_a), ok_throughputs(records_b)
    about = _descriptions(records_b) | _descriptions(records_a)
    keys_a = list(dict.fromkeys(map(str, records_a[KEY])))
    keys_b = list(dict.fromkeys(map(str, records_b[KEY])))
    in_a, in_b = set(keys_a), set(keys_b)
    rows = []
    for key in [k for k in keys_a if k in in_b]:
        a, b = runs_a.get(key, np.array([])), runs_b.get(key, np.array([]))
        result = stats.compare_repeats(a, b, level, tolerance, resamples)
        rows.append(
            {
                KEY: key,
                **about.get(key, {}),
                "present": "both",
                "n_a": len(a),
                "n_b": len(b),
                "median_a": np.median(a) if len(a) else None,
                "median_b": np.median(b) if len(b) else None,
                **result.columns(),
            }
        )
    for key, side, runs in [
        *((k, "A only", runs_a) for k in keys_a if k not in in_b),
        *((k, "B only", runs_b) for k in keys_b if k not in in_a),
    ]:
        values = runs.get(key, np.array([]))
        median = np.median(values) if len(values) else None
        rows.append(
            {
                KEY: key,
                **about.get(key, {}),
                "present": side,
                "verdict": f"only in {side[0]}",
                "n_a" if side == "A only" else "n_b": len(values),
                "median_a" if side == "A only" else "median_b": median,
            }
        )
    out = pd.DataFrame(rows).reindex(columns=COLUMNS)
    out["level"], out["tolerance"] = level, tolerance
    return out


def regressions(result: pd.DataFrame) -> pd.DataFrame:
    """The configurations significantly slower than the tolerance allows."""
    return result[result["verdict"] == "slower"]


VERDICT_COLOURS = {
    "slower": "#c0392b",
    "faster": "#1e8449",
    "within tolerance": "#b9770e",
    "no significant change": "#566573",
    "too few repeats": "#aab7b8",
}


def plot_comparison(result: pd.DataFrame, title: str | None = None) -> Figure:
    """Ratio B/A with its interval per configuration, sorted by ratio, coloured by verdict; the line at 1 and the
    tolerance band shaded. Takes compare()'s DataFrame, returns a Figure (save it with fig.savefig)."""
    rows = result[result["ratio"].notna()].sort_values("ratio")
    height = 1.2 + 0.28 * max(1, len(rows))
    fig = Figure(figsize=(8, height), layout="constrained")
    ax = fig.add_subplot()
    tolerance = float(result["tolerance"].iloc[0]) if len(result) else 0.0
    if tolerance:
        ax.axvspan(1 - tolerance, 1 + tolerance, color="#eaecee", label=f"tolerance ±{tolerance:.0%}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    y = np.arange(len(rows))
    for verdict, colour in VERDICT_COLOURS.items():
        pick = (rows["verdict"] == verdict).to_numpy()
        if not pick.any():
            continue
        part = rows[pick]
        ratio = part["ratio"].to_numpy(float)
        low = part["ratio_low"].to_numpy(float)
        high = part["ratio_high"].to_numpy(float)
        errors = np.vstack([np.where(np.isnan(low), 0, ratio - low), np.where(np.isnan(high), 0, high - ratio)])
        ax.errorbar(ratio, y[pick], xerr=errors, fmt="o", color=colour, capsize=3, label=verdict)
    ax.set_yticks(y, rows[KEY].tolist(), fontsize=7)
    level = float(result["level"].iloc[0]) if len(result) else stats.DEFAULT_LEVEL
    ax.set_xlabel(f"median B / median A ({level:.0%} interval)")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_title(title or "B against A, per configuration")
    if len(rows):
        ax.legend(fontsize=7, loc="best")
    return fig


def _fmt(value: object, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and np.isnan(value)) else format(value, spec)


def format_table(result: pd.DataFrame) -> str:
    """Plain-text table for the terminal: one line per configuration."""
    level = float(result["level"].iloc[0]) if len(result) else stats.DEFAULT_LEVEL
    header: list[object] = ["configuration", "n A/B", "median A", "median B", f"B/A [{level:.0%} interval]", "verdict"]
    lines: list[list[object]] = []
    for row in result.itertuples(index=False):
        n = f"{_fmt(row.n_a, '.0f')}/{_fmt(row.n_b, '.0f')}"
        interval = (
            f"{_fmt(row.ratio, '.3f')} [{_fmt(row.ratio_low, '.3f')}, {_fmt(row.ratio_high, '.3f')}]"
            if row.present == "both"
            else ""
        )
        lines.append([row.config_id, n, _fmt(row.median_a, ".4g"), _fmt(row.median_b, ".4g"), interval, row.verdict])
    widths = [max(len(str(r[i])) for r in [header, *lines]) for i in range(len(header))]
    text = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *lines]]
    return "\n".join([text[0], "  ".join("-" * w for w in widths), *text[1:]])


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text}")
    return value


def _level(text: str) -> float:
    value = float(text)
    if not 0.5 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a level in (0.5, 1), got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dlbench.collect.compare", description=__doc__.split("\n\n")[0], epilog=NOISE_MODEL
    )
    p.add_argument("a", help="baseline: report directory, aggregate directory or records.csv")
    p.add_argument("b", help="candidate, the same kinds")
    p.add_argument(
        "--tolerance",
        type=_fraction,
        default=0.0,
        help="relative change that does not matter, e.g. 0.05: only slower than 0.95 x A fails (default 0)",
    )
    p.add_argument(
        "--level",
        type=_level,
        default=stats.DEFAULT_LEVEL,
        help="interval level; the test's threshold is 1 - level (default 0.95)",
    )
    p.add_argument("--csv", type=Path, help="also write the table as CSV")
    p.add_argument("--plot", type=Path, help="also write the ratio plot (PNG, SVG, PDF by extension)")
    args = p.parse_args(argv)
    try:
        result = compare(load_records(args.a), load_records(args.b), args.level, args.tolerance)
    except (InputError, OSError, pd.errors.ParserError) as error:
        print(f"dlbench.collect.compare: {error}", file=sys.stderr)
        return 2
    print(
        f"B = {args.b} against A = {args.a}: ratio of medians B/A with {args.level:.0%} intervals; verdict at "
        f"two-sided p < {1 - args.level:.3g}" + (f", tolerance ±{args.tolerance:.1%}" if args.tolerance else "")
    )
    print(format_table(result))
    if args.csv:
        result.to_csv(args.csv, index=False)
    if args.plot:
        plot_comparison(result).savefig(args.plot, dpi=120)
    counts = result["verdict"].value_counts()
    print("\n" + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))
    slower = regressions(result)
    band = f" by more than {args.tolerance:.1%}" if args.tolerance else ""
    if len(slower):
        print(
            f"dlbench.collect.compare: {len(slower)} configuration(s) significantly slower{band} "
            f"(two-sided p < {1 - args.level:.3g})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
