"""Workflow overhead: `snakemake -n` on DLPerf-size studies (~2,000 and ~10,000 runs).

    .venv/bin/python benchmarks/workflow_overhead.py
Targets: <= 10 s for ~2,000 runs, <= 30 s for ~10,000. The baseline is the same dry run of a one-run
study (Snakemake's fixed start-up cost), measured in the same invocation.

Snakemake imports every executor plugin at start, and the SLURM one runs `scontrol show config` then; where SLURM
is installed and its controller does not answer, that waits ~9 s in every start, which is the machine, not the
workflow. The dry runs here use a SLURM configuration without a controller (tests/slurm/no-controller.conf), and
the script reports what the probe costs on this machine beside them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import resultfile
import yaml

REPO = Path(__file__).resolve().parents[1]
NO_SLURM = dict(os.environ, SLURM_CONF=str(REPO / "tests" / "slurm" / "no-controller.conf"))


def study(batch_sizes: int, repeats: int) -> dict:
    # The DLPerf matrix: 3 frameworks x 2 models x 3 batch sizes; with one model implemented so far,
    # 6 batch sizes stand in for 2 models x 3.
    return {
        "study": "overhead",
        "defaults": {"repeats": repeats},
        "matrix": {
            "framework": ["pytorch", "tensorflow", "mxnet"],
            "model": ["resnet50"],
            "topology": ["1x1", "1x8", "2x8", "4x8"],
            "precision": ["fp32", "amp"],
            "compiler": [False, True],
            "batch_size": list(range(16, 16 * (batch_sizes + 1), 16)),
        },
    }


def dry_run(config: dict, work: Path) -> tuple[float, int]:
    path = work / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    started = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "-n",
            "--directory",
            str(work),
            "--configfile",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=NO_SLURM,
    )
    elapsed = time.perf_counter() - started
    jobs = next((int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("total")), 0)
    return elapsed, jobs


def slurm_probe() -> str:
    """What the SLURM plugin's probe costs each Snakemake start on this machine, with its own configuration."""
    if not shutil.which("scontrol"):
        return "no SLURM installed here: the SLURM executor plugin probes nothing"
    started = time.perf_counter()
    answered = subprocess.run(["scontrol", "show", "config"], capture_output=True, timeout=60).returncode == 0
    return (
        f"the SLURM executor plugin's probe (`scontrol show config`) took {time.perf_counter() - started:.1f} s "
        f"here ({'controller answered' if answered else 'no controller answered'}); not counted above "
        "(SLURM_CONF=tests/slurm/no-controller.conf)"
    )


def main() -> None:
    record = resultfile.Recorder(__file__)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base, _ = dry_run(
            {
                **study(1, 1),
                "matrix": {**study(1, 1)["matrix"], "topology": ["1x1"], "precision": ["fp32"], "compiler": [False]},
            },
            Path(tmp),
        )
        print(f"baseline: 1-run study dry run {base:.1f} s")
        rows.append(["1-run study (baseline)", 1, round(base, 1), "–", "–"])
        for batch_sizes, repeats, target in ((6, 7, 10.0), (6, 35, 30.0)):
            elapsed, jobs = dry_run(study(batch_sizes, repeats), Path(tmp))
            per_job = 1000 * (elapsed - base) / jobs
            print(
                f"{jobs:6d} jobs: snakemake -n {elapsed:5.1f} s (target <= {target:.0f} s; "
                f"{elapsed / base:.1f}x the 1-run baseline, {per_job:.2f} ms/job)"
            )
            rows.append(
                [
                    f"3 frameworks × 4 topologies × 2 precisions × 2 compiler × 6 batch sizes × {repeats} repeats",
                    jobs,
                    round(elapsed, 1),
                    round(per_job, 2),
                    f"<= {target:.0f} s",
                ]
            )
    columns = ["study", "jobs", "seconds", "ms per job over the baseline", "target"]
    probe = slurm_probe()
    print(probe)
    record.write([resultfile.table("snakemake -n (dry run)", columns, rows)], notes=[probe])


if __name__ == "__main__":
    main()
