"""The checks of benchmarks/gpu_acceptance.sh: every configuration of a report is plausible, one table.

    PYTHONPATH=workflow .venv/bin/python benchmarks/gpu_acceptance.py --report results/reports/latest

A configuration passes when every run is `ok`, every run is steady (no trend over the measured steps), every
automatic warm-up settled before its limit (`max_warmup_steps`), its MFU is
inside (0, 1) (a peak from workflow/references/device_peaks.yaml: no MFU is a failure here, since a GPU node's
device must be in the table), its energy per sample was measured and its peak device memory read. Exit status 1
when any check fails or the stage took longer than its budget; the table says which and why.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd
import yaml
from tabulate import tabulate

STAGE_BUDGET_S = 300  # one stage of gpu_acceptance.sh, on one H100
GPU_STUDY = Path(__file__).resolve().parents[1] / "workflow" / "studies" / "gpu.yaml"


def stage_study(study: dict, stage: str) -> dict:
    """gpu.yaml narrowed to one stage of gpu_acceptance.sh: `eager-MODEL` (compiler off), `compiled-MODEL-PRECISION`
    (compiler on) or `checks` (the whole study). The runs keep their identities, so a run done in a stage is
    not repeated by the `checks` stage."""
    narrowed = dict(study, matrix=dict(study["matrix"]))
    matrix = narrowed["matrix"]
    kind, _, rest = stage.partition("-")
    if kind == "checks":
        return narrowed
    if kind == "eager":
        models, precisions, compiler = [rest], matrix["precision"], False
    elif kind == "compiled":
        model, _, precision = rest.rpartition("-")
        models, precisions, compiler = [model], [precision], True
    else:
        raise ValueError(f"unknown stage {stage!r} (eager-MODEL, compiled-MODEL-PRECISION or checks)")
    matrix.update(model=models, precision=precisions, compiler=[compiler])
    matrix["batch_size"] = {
        model: {precision: matrix["batch_size"][model][precision] for precision in precisions} for model in models
    }
    return narrowed


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _text(value: object) -> str:
    """A cell as text: "-" where it is empty (NaN in a frame read from CSV)."""
    return value if isinstance(value, str) and value else "-" if _number(value) is None else str(value)


def problems_of(row: pd.Series) -> list[str]:
    """Why a configuration's result is not plausible (empty: it is)."""
    problems = []
    if row["n_ok"] != row["n_total"]:
        error = row.get("error")  # NaN where summary.csv's cell is empty
        problems.append(
            f"{row['n_total'] - row['n_ok']} of {row['n_total']} runs not ok ({row['statuses']})"
            + (f": {error}" if isinstance(error, str) and error else "")
        )
    if (_number(row.get("nonsteady_runs")) or 0) > 0:
        problems.append(f"{int(row['nonsteady_runs'])} run(s) not steady")
    if (unstable := _number(row.get("warmup_unstable_runs")) or 0) > 0:
        problems.append(f"{int(unstable)} run(s) hit the warm-up limit (max_warmup_steps) before settling")
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
    p.add_argument(
        "--stage-study",
        nargs=2,
        metavar=("STAGE", "FILE"),
        help="write gpu.yaml narrowed to STAGE to FILE, and nothing else",
    )
    p.add_argument("--cpu", action="store_true", help="with --stage-study: platform.device cpu (a dry run here)")
    p.add_argument("--stage-s", type=float, default=0.0, help="the stage's time, held to STAGE_BUDGET_S")
    p.add_argument("--snakemake-exit", type=int, default=0)
    args = p.parse_args(argv)
    if args.stage_study:
        stage, path = args.stage_study
        study = stage_study(yaml.safe_load(GPU_STUDY.read_text()), stage)
        if args.cpu:
            study["platform"] = dict(study["platform"], device="cpu")
        Path(path).write_text(yaml.safe_dump(study, sort_keys=False))
        return 0
    summary_path = args.report / "summary.csv"
    if not summary_path.exists():
        print(f"gpu_acceptance: no report at {args.report} (snakemake exit {args.snakemake_exit})", file=sys.stderr)
        return 1
    summary = pd.read_csv(summary_path)
    records = pd.read_csv(args.report / "records.csv")
    rows, failed = table(summary)
    first = records.iloc[0]
    facts = [_text(first.get(key)) for key in ("device_name", "framework", "framework_version", "cuda_version")]
    more = [_text(first.get(key)) for key in ("cudnn_version", "nccl_version", "interpreter")]
    print(
        f"device: {facts[0]}; {facts[1]} {facts[2]}, CUDA {facts[3]}, cuDNN {more[0]}, NCCL {more[1]}; "
        f"interpreter {more[2]}"
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
    within = args.stage_s <= STAGE_BUDGET_S
    print(
        f"time: {args.stage_s:.0f} s ({'within' if within else 'OVER'} the stage's {STAGE_BUDGET_S} s budget); "
        f"snakemake exit {args.snakemake_exit}; {len(rows) - failed} of {len(rows)} configurations pass"
    )
    return 0 if failed == 0 and within and args.snakemake_exit == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
