"""The checks of benchmarks/gpu_acceptance.sh: every configuration of a finished report is plausible, one table.

    PYTHONPATH=workflow .venv/bin/python benchmarks/gpu_acceptance.py --report results/reports/latest

A configuration passes when every run is `ok`, every run is steady (no trend over the measured steps), its MFU is
inside (0, 1) (a peak from workflow/references/device_peaks.yaml: no MFU is a failure here, since a GPU node's
device must be in the table), its energy per sample was measured and its peak device memory read. Exit status 1
when any check fails or the time budget (setup + study) is exceeded; the table says which and why.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd
from tabulate import tabulate

BUDGET_S = 600  # setup included, on one H100


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def problems_of(row: pd.Series) -> list[str]:
    """Why a configuration's result is not plausible (empty: it is)."""
    problems = []
    if row["n_ok"] != row["n_total"]:
        problems.append(
            f"{row['n_total'] - row['n_ok']} of {row['n_total']} runs not ok ({row['statuses']}): "
            f"{row.get('error') or ''}".rstrip(": ")
        )
    if (_number(row.get("nonsteady_runs")) or 0) > 0:
        problems.append(f"{int(row['nonsteady_runs'])} run(s) not steady")
    mfu = _number(row.get("mfu"))
    if mfu is None:
        problems.append(f"no MFU ({row.get('mfu_note') or 'no peak'})")
    elif not 0 < mfu < 1:
        problems.append(f"MFU {mfu:.1%} outside (0, 1)")
    if not (_number(row.get("energy_per_sample_j")) or 0) > 0:
        problems.append("no energy per sample")
    if not (_number(row.get("peak_memory_gb")) or 0) > 0:
        problems.append("no peak device memory")
    return problems


def table(summary: pd.DataFrame) -> tuple[list[list[object]], int]:
    """The summary table's rows and the number of configurations that failed a check."""
    rows, failed = [], 0
    for _, row in summary.iterrows():
        problems = problems_of(row)
        failed += bool(problems)
        mfu, energy, memory = (_number(row.get(k)) for k in ("mfu", "energy_per_sample_j", "peak_memory_gb"))
        rows.append(
            [
                row["model"],
                row["precision"],
                "on" if row["compiler"] else "off",
                row["batch_size"],
                f"{row['n_ok']}/{row['n_total']}",
                f"{row['median']:,.0f}" if _number(row["median"]) else "-",
                row["unit"],
                f"{mfu:.1%}" if mfu is not None else "-",
                f"{energy:.3f}" if energy is not None else "-",
                f"{memory:.1f}" if memory is not None else "-",
                "; ".join(problems) or "ok",
            ]
        )
    return rows, failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--report", type=Path, default=Path("results/reports/latest"))
    p.add_argument("--setup-s", type=float, default=0.0)
    p.add_argument("--study-s", type=float, default=0.0)
    p.add_argument("--snakemake-exit", type=int, default=0)
    args = p.parse_args(argv)
    summary_path = args.report / "summary.csv"
    if not summary_path.exists():
        print(f"gpu_acceptance: no report at {args.report} (snakemake exit {args.snakemake_exit})", file=sys.stderr)
        return 1
    summary = pd.read_csv(summary_path)
    records = pd.read_csv(args.report / "records.csv")
    rows, failed = table(summary)
    first = records.iloc[0]
    print(
        f"device: {first.get('device_name')}; {first.get('framework')} {first.get('framework_version')}, CUDA "
        f"{first.get('cuda_version')}, cuDNN {first.get('cudnn_version')}, NCCL {first.get('nccl_version')}; "
        f"interpreter {first.get('interpreter')}"
    )
    print(
        tabulate(
            rows,
            headers=[
                "model",
                "precision",
                "compiler",
                "batch",
                "ok",
                "median",
                "unit",
                "MFU",
                "J/sample",
                "peak GB",
                "checks",
            ],
        )
    )
    total = args.setup_s + args.study_s
    within = total <= BUDGET_S
    print(
        f"time: setup {args.setup_s:.0f} s + study {args.study_s:.0f} s = {total:.0f} s "
        f"({'within' if within else 'OVER'} the {BUDGET_S} s budget); snakemake exit {args.snakemake_exit}; "
        f"{len(rows) - failed} of {len(rows)} configurations pass"
    )
    return 0 if failed == 0 and within and args.snakemake_exit == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
