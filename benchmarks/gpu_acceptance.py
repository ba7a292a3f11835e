"""The checks of benchmarks/gpu_acceptance.sh: every configuration of a report is plausible, one table.

    PYTHONPATH=workflow .venv/bin/python benchmarks/gpu_acceptance.py --report results/reports/latest
    ... --check-study FILE [--cpu]        write workflow/studies/gpu-check.yaml (for a CPU rehearsal: --cpu)
    ... --stage-study STAGE FILE [--cpu]  write workflow/studies/gpu.yaml narrowed to one stage of --full

A configuration passes when every run is `ok`, every run is steady (no trend over the measured steps), every
automatic warm-up settled before its limit (`max_warmup_steps`), its MFU (against the peak of
workflow/references/device_peaks.yaml: no MFU is a failure here, since a GPU node's device must be in the table)
lies inside the band real training reaches for its model on a datacenter GPU (PLAUSIBLE_MFU: its throughput inside
the device's known range), no flag says the MFU is over the peak, its energy per sample was measured and its peak
device memory read. A CPU rehearsal (--cpu) has no device peak, no GPU energy and no device memory: those checks
are the GPU's and are left out, saying so. Exit status 1 when any check fails or the command took longer than its
budget; the table says which and why.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from pathlib import Path

import pandas as pd
import yaml
from tabulate import tabulate

STAGE_BUDGET_S = 300  # one stage of gpu_acceptance.sh --full, on one H100
# gpu_acceptance.sh, setup included: a lent GPU machine runs one command for at most 10 minutes, and its start and
# the transfers of the repository and the wheelhouse take part of them.
CHECK_BUDGET_S = 480
STUDIES = Path(__file__).resolve().parents[1] / "workflow" / "studies"
GPU_STUDY = STUDIES / "gpu.yaml"
CHECK_STUDY = STUDIES / "gpu-check.yaml"

# The MFU that training of each model kind reaches on one datacenter GPU (against the dense peak of the math it
# uses), wide on purpose: a figure outside it is a broken measurement (a clock that stops early, work that ran on
# the CPU, a step that did not run on the GPU at all), not a slow GPU. Published figures, with dlbench's FLOPs per
# sample (3 x forward): ResNet-50 v1.5 AMP 6.5-6.9% on an H100 SXM (Lambda, 2,616-2,800 images/s), 17% (MLPerf
# Training v3.0, about 7,000 images/s a GPU), 19% on an A100 80 GB (DLE 21.03, 2,470 images/s); BERT-Base AMP 27%
# on a V100 (DLPerf, 4x8, 491 sequences/s a GPU); Llama 3 dense pretraining 38-45% on H100s (torchtitan). The
# lower ends are half the lowest published MFU or less, the upper ends twice the highest or more.
PLAUSIBLE_MFU = {"resnet": (0.03, 0.40), "bert": (0.05, 0.60), "llama": (0.10, 0.75)}

# The CPU rehearsal of the check: the same five configurations on their tiny models, small shapes, a fixed warm-up
# (an automatic one on a busy 2-core machine may not settle) and a few measured steps: every path through setup,
# Snakemake, the runs, the report and this checker in a few minutes.
CPU_MODELS = {"resnet50": "resnet_tiny", "bert_base": "bert_tiny", "llama3_1b": "llama_tiny"}
CPU_BATCH = {"resnet_tiny": 8, "bert_tiny": 4, "llama_tiny": 2}
CPU_SEQ_LENGTH = {"bert_tiny": 128, "llama_tiny": 128}
CPU_DEFAULTS = {"warmup_steps": 2, "measured_steps": 5, "image_size": 32, "timeout_minutes": 10}


def stage_study(study: dict, stage: str) -> dict:
    """gpu.yaml narrowed to one stage of gpu_acceptance.sh --full: `eager-MODEL` (compiler off),
    `compiled-MODEL-PRECISION` (compiler on) or `checks` (the whole study). The runs keep their identities, so a
    run done in a stage is not repeated by the `checks` stage."""
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


def cpu_rehearsal(study: dict) -> dict:
    """The check study for this machine's CPU: device cpu, each model its tiny counterpart at a small shape."""
    rehearsal = copy.deepcopy(study)
    rehearsal["study"] = f"{study['study']}-cpu-rehearsal"
    rehearsal["platform"] = dict(study["platform"], device="cpu")
    rehearsal["defaults"] = dict(study["defaults"], **CPU_DEFAULTS)
    rehearsal["defaults"].pop("max_warmup_steps", None)
    matrix = rehearsal["matrix"]
    matrix["model"] = [CPU_MODELS[model] for model in matrix["model"]]
    matrix["batch_size"] = sorted({CPU_BATCH[model] for model in matrix["model"]})
    for entry in rehearsal.get("include", []):
        entry["model"] = CPU_MODELS[entry["model"]]
        entry["batch_size"] = CPU_BATCH[entry["model"]]
        if entry["model"] in CPU_SEQ_LENGTH:
            entry["seq_length"] = CPU_SEQ_LENGTH[entry["model"]]
        entry.pop("measured_steps", None)
    return rehearsal


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _text(value: object) -> str:
    """A cell as text: "-" where it is empty (NaN in a frame read from CSV)."""
    return value if isinstance(value, str) and value else "-" if _number(value) is None else str(value)


def model_kind(model: str) -> str:
    return next(kind for kind in PLAUSIBLE_MFU if model.startswith(kind))


def plausible_throughput(row: pd.Series) -> tuple[float, float] | None:
    """The throughput range that PLAUSIBLE_MFU gives on the run's device (None without an MFU)."""
    mfu, median = _number(row.get("mfu")), _number(row.get("median"))
    if not mfu or not median:
        return None
    low, high = PLAUSIBLE_MFU[model_kind(row["model"])]
    return median * low / mfu, median * high / mfu


def problems_of(row: pd.Series, gpu: bool = True) -> list[str]:
    """Why a configuration's result is not plausible (empty: it is). gpu False: the GPU's checks left out."""
    problems = []
    if row["n_ok"] != row["n_total"]:
        error = row.get("error")  # NaN where summary.csv's cell is empty
        problems.append(
            f"{row['n_total'] - row['n_ok']} of {row['n_total']} runs not ok ({row['statuses']})"
            + (f": {error}" if isinstance(error, str) and error else "")
        )
    if not gpu:  # a CPU rehearsal on a shared machine: whether a run settles is the machine's, not the workflow's
        return problems
    if (_number(row.get("nonsteady_runs")) or 0) > 0:
        problems.append(f"{int(row['nonsteady_runs'])} run(s) not steady")
    if (unstable := _number(row.get("warmup_unstable_runs")) or 0) > 0:
        problems.append(f"{int(unstable)} run(s) hit the warm-up limit (max_warmup_steps) before settling")
    mfu = _number(row.get("mfu"))
    low, high = PLAUSIBLE_MFU[model_kind(row["model"])]
    if mfu is None:
        if row["n_ok"]:
            problems.append(f"no MFU ({row.get('mfu_note') or 'no peak'})")
    elif not low <= mfu <= high:
        problems.append(f"MFU {mfu:.1%} outside {low:.0%}-{high:.0%}, the band real training of it reaches")
    if "mfu_above_peak" in _text(row.get("flags")):
        problems.append("flagged mfu_above_peak")
    if row["n_ok"] and not (_number(row.get("energy_per_sample_j")) or 0) > 0:
        problems.append("no energy per sample")
    if row["n_ok"] and not (_number(row.get("peak_memory_gb")) or 0) > 0:
        problems.append("no peak device memory")
    return problems


def table(summary: pd.DataFrame, gpu: bool = True) -> tuple[list[list[object]], int]:
    """The summary table's rows and the number of configurations that failed a check."""
    rows, failed = [], 0
    for _, row in summary.iterrows():
        problems = problems_of(row, gpu)
        failed += bool(problems)
        mfu, energy, memory = (_number(row.get(k)) for k in ("mfu", "energy_per_sample_j", "peak_memory_gb"))
        plausible = plausible_throughput(row)
        rows.append(
            [
                row["framework"],
                row["model"],
                row["precision"],
                "on" if row["compiler"] else "off",
                row["batch_size"],
                f"{row['n_ok']}/{row['n_total']}",
                f"{row['median']:,.0f}" if _number(row["median"]) else "-",
                f"{plausible[0]:,.0f}-{plausible[1]:,.0f}" if plausible else "-",
                row["unit"],
                f"{mfu:.1%}" if mfu is not None else "-",
                f"{energy:.3f}" if energy is not None else "-",
                f"{memory:.1f}" if memory is not None else "-",
                "; ".join(problems) or "ok",
            ]
        )
    return rows, failed


def software_lines(records: pd.DataFrame, taken: Path | None) -> list[str]:
    """The device, each framework's version and interpreter, and the core packages taken from the node."""
    first = records.iloc[0]
    facts = {key: _text(first.get(key)) for key in ("device_name", "cuda_version", "cudnn_version", "nccl_version")}
    lines = [
        f"device: {facts['device_name']}; CUDA {facts['cuda_version']}, cuDNN {facts['cudnn_version']}, "
        f"NCCL {facts['nccl_version']}"
    ]
    for framework, runs in records.groupby("framework", sort=True):
        run = runs.iloc[0]
        lines.append(f"{framework} {_text(run.get('framework_version'))}: interpreter {_text(run.get('interpreter'))}")
    if taken is not None and taken.is_file():
        packages = [line.replace("==", " ") for line in taken.read_text().split()]
        lines.append(f"core environment, taken from the interpreter's site-packages: {', '.join(packages) or '-'}")
    return lines


def write_study(source: Path, path: Path, stage: str | None, cpu: bool) -> None:
    study = yaml.safe_load(source.read_text())
    if stage is not None:
        study = stage_study(study, stage)
    if cpu:
        study = cpu_rehearsal(study) if stage is None else dict(study, platform=dict(study["platform"], device="cpu"))
    path.write_text(yaml.safe_dump(study, sort_keys=False))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--report", type=Path, default=Path("results/reports/latest"))
    p.add_argument("--check-study", type=Path, metavar="FILE", help="write the check's study to FILE, nothing else")
    p.add_argument(
        "--stage-study",
        nargs=2,
        metavar=("STAGE", "FILE"),
        help="write gpu.yaml narrowed to STAGE to FILE, and nothing else",
    )
    p.add_argument(
        "--cpu", action="store_true", help="a rehearsal on this machine's CPU: device cpu (the check: tiny models)"
    )
    p.add_argument("--stage-s", type=float, default=0.0, help="the command's (or the stage's) time so far")
    p.add_argument(
        "--budget",
        choices=("stage", "check"),
        default="stage",
        help=f"the time it is held to: a stage of --full ({STAGE_BUDGET_S} s) or the whole check ({CHECK_BUDGET_S} s)",
    )
    p.add_argument("--snakemake-exit", type=int, default=0)
    p.add_argument("--taken", type=Path, help="bootstrap.sh's list of core packages taken from the interpreter")
    args = p.parse_args(argv)
    if args.check_study:
        write_study(CHECK_STUDY, args.check_study, None, args.cpu)
        return 0
    if args.stage_study:
        stage, path = args.stage_study
        write_study(GPU_STUDY, Path(path), stage, args.cpu)
        return 0
    summary_path = args.report / "summary.csv"
    if not summary_path.exists():
        print(f"gpu_acceptance: no report at {args.report} (snakemake exit {args.snakemake_exit})", file=sys.stderr)
        return 1
    summary = pd.read_csv(summary_path)
    records = pd.read_csv(args.report / "records.csv")
    rows, failed = table(summary, gpu=not args.cpu)
    print("\n".join(software_lines(records, args.taken)))
    headers = ["framework", "model", "precision", "compiler", "batch", "ok", "median", "plausible", "unit", "MFU"]
    print(tabulate(rows, headers=[*headers, "J/sample", "peak GB", "checks"]))
    if args.cpu:
        print("CPU rehearsal: MFU, energy per sample, device memory and steadiness are the GPU's checks, left out here")
    budget_s = CHECK_BUDGET_S if args.budget == "check" else STAGE_BUDGET_S
    within = args.stage_s <= budget_s or args.cpu
    budget = "no budget on a CPU" if args.cpu else f"{'within' if within else 'OVER'} its {budget_s} s"
    print(
        f"time: {args.stage_s:.0f} s ({budget}); snakemake exit {args.snakemake_exit}; "
        f"{len(rows) - failed} of {len(rows)} configurations pass"
    )
    return 0 if failed == 0 and within and args.snakemake_exit == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
