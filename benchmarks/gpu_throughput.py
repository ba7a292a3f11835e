"""The harness on one GPU: ResNet-50 v1.5 and BERT-Base throughput with the DLPerf protocol, against the GPU's
peak and the published per-GPU figures.

Run from the repository root with an interpreter that has PyTorch with CUDA (and pandas + PyYAML, for the
published figures in workflow/references/published.yaml and the peaks in workflow/references/device_peaks.yaml):
    PYTHONPATH=workflow python3 benchmarks/gpu_throughput.py --compiler off

Each configuration runs as a study would run it: `python -m dlbench.harness` (its own processes, 20 warm-up and
100 measured steps, synthetic data, 1x1), `--repeats` times; the table gives the median of the repeats, MFU, the
peak device memory, and the published figures for that framework, model and precision with our median ÷ theirs
(hardware differs where the device column says so). MFU's peak is the table's (dlbench.vocabulary.devices) for the
device the runs name and the math they used (AMP: its dtype; fp32: TF32 when on), as the report's; a device the
table lacks has no MFU. `--peak-gflops` (with `--peak-source`) overrides it with one peak for every configuration,
labelled as an override in the table and the notes. One configuration with a batch far beyond the GPU's memory must
end `oom` with CUDA's message: the failure path, checked for real.
Writes benchmarks/results/gpu_throughput-compiler-<off|on>.json (figures.py renders it into the docs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import resultfile

from dlbench.collect import references
from dlbench.vocabulary import devices


@dataclass(frozen=True)
class Config:
    model: str
    precision: str
    batch_size: int

    @property
    def label(self) -> str:
        shape = "224²" if self.model == "resnet50" else "seq 128/20"
        return f"{self.model} {shape} {self.precision} batch {self.batch_size}"


# DLPerf's and DeepLearningExamples' per-GPU batches (RN50: 256 AMP, 128 TF32; BERT: 64-128)
CONFIGS = (
    Config("resnet50", "amp", 256),
    Config("resnet50", "fp32", 128),
    Config("bert_base", "amp", 128),
    Config("bert_base", "fp32", 64),
)
OOM_CONFIG = Config("resnet50", "fp32", 4096)  # ~30x what fits on an 80 GB GPU


def run_harness(
    python: str, config: Config, compiler: str, repeat: int, workdir: Path, steps: tuple[int, int], timeout_s: float
) -> dict:
    """One harness run; returns its summary line, with the environment line under `environment`."""
    log = workdir / f"{config.model}-{config.precision}-{config.batch_size}-{compiler}-{repeat}.jsonl"
    warmup, measured = steps
    cmd = [
        python,
        "-m",
        "dlbench.harness",
        "--framework",
        "pytorch",
        "--model",
        config.model,
        "--topology",
        "1x1",
        "--batch-size",
        str(config.batch_size),
        "--precision",
        config.precision,
        "--compiler",
        compiler,
        "--device",
        "cuda",
        "--warmup-steps",
        str(warmup),
        "--measured-steps",
        str(measured),
        "--repeat",
        str(repeat),
        "--timeout-s",
        str(timeout_s),
        "--log",
        str(log),
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    summary = next(line for line in reversed(lines) if line["type"] == "summary")
    summary["environment"] = next((line for line in lines if line["type"] == "environment"), {})
    return summary


def versus_published(config: Config, compiler: str, median: float, figures: pd.DataFrame) -> str:
    """The published figures this configuration matches (dlbench.collect.references' matching: every key a figure gives;
    any GPU, the device says which), each with ours ÷ theirs."""
    ours = pd.DataFrame(
        [
            {
                "config_id": config.label,
                "framework": "pytorch",
                "model": config.model,
                "topology": "1x1",
                "precision": config.precision,
                "batch_size": config.batch_size,
                "compiler": compiler == "on",
                "data": "synthetic",
                "median": median,
            }
        ]
    )
    return (
        "; ".join(
            f"{f['label']} on {f['device']}: {f['published_low']:,.0f}"
            + (f"–{f['published_high']:,.0f}" if f["published_high"] != f["published_low"] else "")
            + f" (ours ÷ theirs {f['ratio']:.2f})"
            for f in references.match_references(ours, figures).to_dict("records")
        )
        or "none published"
    )


def peak_of(
    config: Config, environment: dict, override_gflops: float | None, override_source: str | None
) -> tuple[float | None, str]:
    """(peak TFLOP/s, its label) MFU divides by: the override where given, else the device table's for the device
    and math the run's environment line names (dlbench.vocabulary.devices)."""
    if override_gflops is not None:
        return override_gflops / 1e3, f"override (--peak-gflops): {override_source}"
    math = devices.run_math(config.precision, environment)
    return devices.peak_for_run(environment.get("device_name"), config.precision, math)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--peak-gflops",
        type=float,
        help="override: one dense peak for every configuration (default: workflow/references/"
        "device_peaks.yaml for the device and the run's math)",
    )
    p.add_argument("--peak-source", help="where --peak-gflops comes from (required with it)")
    p.add_argument("--compiler", choices=("off", "on"), default="off")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--measured-steps", type=int, default=100)
    p.add_argument("--timeout-s", type=float, default=600.0, help="per harness run")
    p.add_argument("--only", help="models to run, comma-separated (default: all)")
    p.add_argument("--python", default=sys.executable, help="the harness's interpreter (PyTorch with CUDA)")
    p.add_argument("--keep-logs", help="copy the harness logs into this directory")
    args = p.parse_args()
    if args.peak_gflops is not None and not args.peak_source:
        p.error("--peak-gflops needs --peak-source (where the figure comes from)")
    record = resultfile.Recorder(__file__)
    configs = [c for c in CONFIGS if not args.only or c.model in args.only.split(",")]
    steps = (args.warmup_steps, args.measured_steps)
    rows, notes, environment, peaks = [], [], {}, []
    figures = references.load_references()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep_logs or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for config in configs:
            runs = [
                run_harness(args.python, config, args.compiler, r, workdir, steps, args.timeout_s)
                for r in range(1, args.repeats + 1)
            ]
            failed = [r for r in runs if r["status"] != "ok"]
            if failed:
                rows.append([config.label, f"{failed[0]['status']}: {failed[0].get('error', '')[:160]}"] + [None] * 8)
                print(rows[-1], flush=True)
                continue
            environment = environment or runs[0]["environment"]
            values = [r["throughput"] for r in runs]
            median = statistics.median(values)
            peak, peak_label = peak_of(config, runs[0]["environment"], args.peak_gflops, args.peak_source)
            peaks.append(f"{config.label}: {peak_label}")
            mfu = f"{median * runs[0]['train_flops_per_sample'] / (peak * 1e12):.1%}" if peak else None
            memory = max(rank["peak_memory_bytes"] for r in runs for rank in r["ranks"]) / 2**30
            rows.append(
                [
                    config.label,
                    "ok",
                    round(median, 1),
                    f"{min(values):,.1f}–{max(values):,.1f}",
                    runs[0]["unit"],
                    mfu,
                    peak,
                    round(memory, 1),
                    runs[0]["environment"].get("settings", {}).get("summary"),
                    versus_published(config, args.compiler, median, figures),
                ]
            )
            print(rows[-1], flush=True)
        oom = run_harness(args.python, OOM_CONFIG, args.compiler, 1, workdir, (1, 1), args.timeout_s)
    error = (oom.get("error") or "").splitlines()[0][:200] if oom.get("error") else ""
    notes.append(f"failure path: {OOM_CONFIG.label} ended `{oom['status']}` ({error})")
    if oom["status"] != "oom":
        notes.append("WARNING: the out-of-memory batch did not end as oom")
    env = environment
    notes.append(
        f"{env.get('device_name')}, driver {env.get('driver')}, PyTorch {env.get('framework_version')}, "
        f"CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, NCCL {env.get('nccl')}"
    )
    notes += [f"MFU peak, {line}" for line in peaks]
    title = (
        f"pytorch harness on CUDA, 1x1, synthetic data, {args.warmup_steps} warm-up + {args.measured_steps} "
        f"measured steps, compiler {args.compiler}, median of {args.repeats} runs"
    )
    record.write(
        [
            resultfile.table(
                title,
                [
                    "configuration",
                    "status",
                    "median",
                    "runs (min–max)",
                    "unit",
                    "MFU",
                    "peak (TFLOP/s)" if args.peak_gflops is None else "peak (TFLOP/s, --peak-gflops override)",
                    "peak device memory (GiB)",
                    "settings",
                    "published (ours ÷ theirs)",
                ],
                rows,
            )
        ],
        notes=notes,
        variant=f"compiler-{args.compiler}",
    )


if __name__ == "__main__":
    main()
