"""Workflow overhead: `snakemake -n` on DLPerf-size studies (~2,000 and ~10,000 runs), and the start-up scan of
the run logs already there.

    .venv/bin/python benchmarks/workflow_overhead.py [--profile]
Targets: <= 10 s for ~2,000 runs, <= 30 s for ~10,000, and <= 30 s for a sweep of 1,000 nodes x 3 configurations
x 3 repeats (9,000 runs: each run a configuration of its own, the node part of its identity). The baseline is the
same dry run of a one-run study (Snakemake's fixed start-up cost), measured in the same invocation. --profile:
the sweep's dry run under cProfile, its time split between dlbench's code (the study, the plan, the rules' input
functions and params) and Snakemake's own (the DAG, the jobs), with dlbench's largest functions.

Every Snakemake start asks each run log whether it is whole (its header, its measured steps and its summary agree;
one damaged after its run is redone: dlbench.plan.problems, dlbench.harness.runlog.incomplete), reading its head
up to its window line and its last line. With the ~2,000 runs' logs present (fixture logs of 10 measured steps, a
window line and a minute of telemetry samples, ~100 KB each, as a run writes them), the scan is timed in
this process beside the least any scan of those files does, one os.stat each; and the dry run again with the
logs there.

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

from dlbench.logformats.run_log_fixtures import write_run_log
from dlbench.plan.problems import damaged_run_logs
from dlbench.plan.study import load_study

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


def sweep_study(nodes: int, repeats: int) -> dict:
    """Accepting a partition: three short configurations on every node (docs/nodes.md)."""
    return {
        "study": "overhead-sweep",
        "defaults": {"repeats": repeats},
        "sweep": {"nodes": [f"gpu[0001-{nodes:04d}]"]},
        "matrix": {
            "framework": ["pytorch"],
            "model": ["resnet50"],
            "topology": ["1x1"],
            "precision": ["fp32", "amp"],
            "batch_size": [256],
        },
        "include": [{"framework": "pytorch", "model": "bert_base", "topology": "1x1", "batch_size": 128}],
    }


def dry_run(config: dict, work: Path, profile: Path | None = None) -> tuple[float, int]:
    path = work / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    started = time.perf_counter()
    profiler = ["-m", "cProfile", "-o", str(profile)] if profile else []
    result = subprocess.run(
        [
            sys.executable,
            *profiler,
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


def write_logs(config: dict, work: Path) -> int:
    """A complete fixture log at every run log path of the study; the number written."""
    study = load_study(config, REPO / "workflow" / "schemas" / "config.schema.yaml", REPO / "envs", work)
    count = 0
    for c in study.configurations.values():
        for repeat, log in enumerate(c.run_logs(), start=1):
            path = write_run_log(
                work / log,
                framework=c.framework,
                topology=c.topology,
                batch_size=c.batch_size,
                precision=c.precision,
                compiler=bool(c.compiler),
                repeat=repeat,
            )
            lines = path.read_text().splitlines(keepends=True)  # a run's shape: window, telemetry, summary
            path.write_text("".join([*lines[:-1], WINDOW_LINE, TELEMETRY_LINE * TELEMETRY_SAMPLES, lines[-1]]))
            count += 1
    return count


WINDOW_LINE = '{"type":"window","warmup_start":0.0,"warmup_end":1.0,"measure_start":1.0,"measure_end":61.0}\n'
TELEMETRY_SAMPLES = 600  # a minute's samples at 100 ms, as a run's telemetry lines sit between its window and summary
TELEMETRY_LINE = (
    '{"type":"telemetry","kind":"sample","t":1.0,"cpu":{"busy":[0.98,0.97],"run_cores":1.96},'
    '"gpu":null,"power_w":null}\n'
)


def scan_times(work: Path, rounds: int = 5) -> tuple[float, float]:
    """Best of `rounds`: dlbench's damaged-log scan of results/runs, and one os.stat per log (the baseline)."""
    logs = sorted((work / "results" / "runs").rglob("rep*.jsonl"))
    scan, stat = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        damaged = damaged_run_logs(work / "results" / "runs")
        scan.append(time.perf_counter() - started)
        started = time.perf_counter()
        for log in logs:
            os.stat(log)
        stat.append(time.perf_counter() - started)
        assert not damaged, damaged[:3]
    return min(scan), min(stat)


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


def _ours(file: str) -> bool:
    """dlbench's code: its package and its rules (the .smk files: the study's parsing, the input functions)."""
    return "/dlbench/" in file or file.endswith(".smk")


def profile_split(profile: Path) -> tuple[float, float, list[tuple[str, float]]]:
    """(the run's seconds, seconds spent in dlbench's code and what it calls, dlbench's largest entry points):
    the cumulative time of each of dlbench's functions that Snakemake called (not dlbench itself), so nothing is
    counted twice: a module's import counts inside the rules file that imports it (every dlbench import starts
    there), not again on its own."""
    import pstats

    table = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    total = max(ct for _, _, _, ct, _ in table.values())
    entries = {
        f"{Path(file).name}:{name}": ct
        for (file, _, name), (_, _, _, ct, callers) in table.items()
        if _ours(file)
        and not any(_ours(caller[0]) for caller in callers)
        and (name != "<module>" or file.endswith(".smk"))
    }
    return total, sum(entries.values()), sorted(entries.items(), key=lambda item: -item[1])[:8]


def main() -> None:
    profiling = "--profile" in sys.argv[1:]
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
        elapsed, jobs = dry_run(sweep_study(1000, 3), Path(tmp))
        per_job = 1000 * (elapsed - base) / jobs
        print(
            f"{jobs:6d} jobs (a sweep of 1,000 nodes): snakemake -n {elapsed:5.1f} s "
            f"(target <= 30 s; {per_job:.2f} ms/job)"
        )
        rows.append(
            [
                "a sweep: 1,000 nodes × 3 configurations × 3 repeats",
                jobs,
                round(elapsed, 1),
                round(per_job, 2),
                "<= 30 s",
            ]
        )
        split_notes = []
        if profiling:
            profile = Path(tmp) / "sweep.prof"
            dry_run(sweep_study(1000, 3), Path(tmp), profile)
            total, ours, top = profile_split(profile)
            said = ", ".join(f"{name} {own:.2f} s" for name, own in top)
            split_notes.append(
                f"the sweep's dry run under cProfile: {total:.1f} s, of which {ours:.1f} s ({ours / total:.0%}) in "
                f"dlbench's code and what it calls (the study, the plan, the rules' input functions and params), the "
                f"rest Snakemake's own (its DAG, jobs, file checks); dlbench's largest: {said}"
            )
            print(split_notes[-1])
        with tempfile.TemporaryDirectory() as logs_tmp:
            work = Path(logs_tmp)
            config = study(6, 7)
            count = write_logs(config, work)
            scan, stat = scan_times(work)
            elapsed, jobs = dry_run(config, work)
            print(
                f"{count} run logs present: the damaged-log scan {1000 * scan:.0f} ms, one os.stat each "
                f"{1000 * stat:.0f} ms ({scan / stat:.1f}x); snakemake -n {elapsed:.1f} s"
            )
            rows.append(
                [
                    f"the same ~2,000-run study with its {count} run logs present (fixtures, 10 measured steps)",
                    jobs,
                    round(elapsed, 1),
                    round(1000 * (elapsed - base) / jobs, 2),
                    "<= 10 s",
                ]
            )
            scan_rows = [
                [count, "dlbench's damaged-log scan (each log's head to its window, last line)", round(1000 * scan)],
                [count, "one os.stat per log (baseline: the least a scan of these files does)", round(1000 * stat)],
                [count, "ratio scan ÷ stat", round(scan / stat, 1)],
            ]
    columns = ["study", "jobs", "seconds", "ms per job over the baseline", "target"]
    probe = slurm_probe()
    print(probe)
    record.write(
        [
            resultfile.table("snakemake -n (dry run)", columns, rows),
            resultfile.table("Start-up scan of the run logs present (best of 5)", ["logs", "what", "ms"], scan_rows),
        ],
        notes=[
            probe,
            *split_notes,
            "the dry run with the logs present plans the environments' builds and so every run again (no env "
            "markers in the temporary directory): it times the DAG with the scan, not a rerun decision",
        ],
    )


if __name__ == "__main__":
    main()
