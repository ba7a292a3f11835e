"""The study on a real SLURM cluster (Debian's slurm packages, one node on localhost).

The cluster is started by tests/slurm/slurm-local.sh (needs root and apt) and stopped at the end.
Every workflow run is wrapped in a hard timeout, so a fault can never hang the suite.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, log_lines, slurm_snakemake, tiny_config, write_config

CLUSTER = REPO / "tests" / "slurm" / "slurm-local.sh"
RUN = "results/runs/resnet50/pytorch/{}/bs2-fp32-nocompile-synthetic-img32/rep{}.jsonl"
HARD_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def slurm_cluster():
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("the test cluster needs root and apt-get (Debian/Ubuntu) to install slurm")
    subprocess.run(["bash", str(CLUSTER), "start"], check=True, timeout=900)
    yield
    subprocess.run(["bash", str(CLUSTER), "stop"], check=False, timeout=300)


def submitted(result: subprocess.CompletedProcess) -> list[str]:
    """Log paths of the jobs Snakemake submitted to SLURM."""
    return re.findall(r"has been submitted with SLURM jobid \d+ \(log: (\S+?)\)", result.stdout + result.stderr)


def job_steps(job: str) -> list[tuple[str, int, str]]:
    """The numbered srun steps of a job as (step, tasks, state). The ranks' step and the telemetry sampler's
    one-task-per-node step start together, so which of them SLURM numbers 0 is a race."""
    out = subprocess.run(
        ["sacct", "-n", "-P", "-j", job, "-o", "JobID,NTasks,State"], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    return [(step, int(tasks), state) for step, tasks, state in rows if re.fullmatch(rf"{job}\.\d+", step) and tasks]


def ranks_step_completed(job: str, world_size: int) -> bool:
    """Exactly one step ran all the ranks as tasks, and it completed."""
    ranks = [s for s in job_steps(job) if s[1] == world_size]
    return len(ranks) == 1 and ranks[0][2] == "COMPLETED"


# Every timed run is submitted at once: SLURM's --exclusive still gives each its own node, one after another, and
# the node never idles until Snakemake's next status check (the profile's timed_run=1 would hold each submission
# back until the run before it is seen to end, up to tens of seconds later).
ALL_RUNS_QUEUED = ("--resources", "timed_run=100")
TF_MXNET_TEST = "test_tensorflow_and_mxnet_ranks_start_under_srun"
# The ResNet TensorFlow and MXNet run here: the test checks how their ranks start, not the model, so the small one
# where the framework has it (MXNet has no ResNet-Tiny).
OTHER_RESNETS = {"tensorflow": "resnet_tiny", "mxnet": "resnet50"}


def study_config(other_frameworks: bool, **overrides) -> dict:
    """The small study (PyTorch 1x1 and 1x2), one repeat; with `other_frameworks`, TensorFlow and MXNet at 1x2
    too (one study, one Snakemake run for all three frameworks)."""
    config = tiny_config(**overrides)
    config["defaults"]["repeats"] = 1
    if other_frameworks:
        config["include"] = [
            {"framework": f, "model": model, "topology": "1x2", "batch_size": 2} for f, model in OTHER_RESNETS.items()
        ]
    return config


@pytest.fixture(scope="module")
def slurm_study(request, slurm_cluster, torch_python, tmp_path_factory):
    """The study through the SLURM profile: TensorFlow's and MXNet's runs join it only where their (slow) test is
    selected, so that the fast tier stays PyTorch alone. (work, result, whether they joined)."""
    other_frameworks = any(item.originalname == TF_MXNET_TEST for item in request.session.items)
    work = tmp_path_factory.mktemp("slurm")
    config = study_config(other_frameworks)
    result = slurm_snakemake(work, write_config(work / "study.yaml", config), *ALL_RUNS_QUEUED)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    return work, result, other_frameworks


def test_profile_resolves_from_the_repository_root():
    """`--profile slurm` looks in ./slurm (not ./profiles/slurm): the checkout's link must lead there."""
    assert (REPO / "slurm").resolve() == (REPO / "profiles" / "slurm").resolve()
    assert (REPO / "slurm" / "config.yaml").exists()


def test_study_completes_through_the_slurm_profile(slurm_study):
    work, result, other_frameworks = slurm_study
    runs = 4 if other_frameworks else 2
    assert len(submitted(result)) == runs  # one SLURM job per run; aggregate and report run locally
    assert "dlbench: report v1" in result.stdout + result.stderr
    records = pd.read_csv(work / "results/aggregate/records.csv")
    assert set(records["status"]) == {"ok"} and len(records) == runs
    assert records["slurm_job_id"].notna().all()
    assert set(records["slurm_partition"]) == {"debug"} and set(records["slurm_nodelist"]) == {"localhost"}


@pytest.mark.slow
def test_two_device_run_is_one_job_with_two_tasks(slurm_study):
    work, _, _ = slurm_study
    lines = log_lines(work / RUN.format("1x2", 1))
    header, summary = lines[0], lines[-1]
    assert header["launcher"] == "srun" and header["threads_per_rank"] == 1
    assert summary["status"] == "ok" and summary["world_size"] == 2
    assert [r["rank"] for r in summary["ranks"]] == [0, 1] and len({r["pid"] for r in summary["ranks"]}) == 2
    job = header["slurm"]["job_id"]
    assert ranks_step_completed(job, 2), job_steps(job)  # the ranks: one srun step of 2 tasks inside the job


@pytest.mark.slow
def test_tensorflow_and_mxnet_ranks_start_under_srun(slurm_study):
    """TensorFlow (SLURM cluster resolver) and MXNet (dist_sync kvstore) ranks from one srun step."""
    work, _, other_frameworks = slurm_study
    assert other_frameworks, "the study runs TensorFlow and MXNet where this test is selected"
    for framework, model in OTHER_RESNETS.items():
        lines = log_lines(work / RUN.format("1x2", 1).replace("resnet50/pytorch/", f"{model}/{framework}/"))
        header, summary = lines[0], lines[-1]
        assert summary["status"] == "ok", (framework, summary)
        assert header["launcher"] == "srun" and summary["world_size"] == 2
        assert len({r["pid"] for r in summary["ranks"]}) == 2
        job = header["slurm"]["job_id"]
        assert ranks_step_completed(job, 2), (framework, job_steps(job))


@pytest.mark.slow
def test_changing_one_configuration_submits_only_its_jobs(slurm_study):
    work, _, other_frameworks = slurm_study
    changed = [{"match": {"framework": "pytorch", "topology": "1x2"}, "set": {"measured_steps": 3}}]
    config = study_config(other_frameworks, overrides=changed)
    result = slurm_snakemake(work, write_config(work / "changed.yaml", config), *ALL_RUNS_QUEUED)
    assert result.returncode == 0, result.stderr[-3000:]
    logs = submitted(result)
    assert len(logs) == 1 and "resnet50_pytorch_1x2_" in logs[0]
    assert (work / "results/reports/latest").resolve().name == "v2"


@pytest.mark.slow
def test_run_over_its_time_limit_is_retried_then_recorded_as_timeout(slurm_cluster, torch_python, tmp_path):
    config = tiny_config(matrix={**tiny_config()["matrix"], "topology": ["1x1"]})
    config["defaults"].update(repeats=1, measured_steps=10**6, timeout_minutes=0.1)
    result = slurm_snakemake(tmp_path, write_config(tmp_path / "slow.yaml", config))
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(submitted(result)) == 3  # two real tries (profile: retries 2), then the record
    summary = log_lines(tmp_path / RUN.format("1x1", 1))[-1]
    assert summary["status"] == "timeout"
    assert "none of 2 tries completed" in summary["error"] and "SLURM job" in summary["error"]
    assert "time limit of 6 s" in summary["error"]
    records = pd.read_csv(tmp_path / "results/aggregate/records.csv")
    assert list(records["status"]) == ["timeout"] and list(records["attempts"]) == [2]


@pytest.mark.slow
def test_cancelled_job_is_recorded_with_its_slurm_state(slurm_cluster, torch_python, tmp_path):
    config = tiny_config(matrix={**tiny_config()["matrix"], "topology": ["1x1"]})
    config["defaults"].update(repeats=1, measured_steps=10**6, timeout_minutes=10)
    path = write_config(tmp_path / "long.yaml", config)
    (tmp_path / "slurm").symlink_to(REPO / "profiles" / "slurm")
    cmd = [
        "timeout",
        "-k",
        "10",
        str(HARD_TIMEOUT_S),
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--profile",
        "slurm",
        "--cores",
        "all",
        "--retries",
        "1",
        "--configfile",
        str(path),
    ]
    workflow = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = tmp_path / RUN.format("1x1", 1)
    partial = log.with_name(log.name + ".partial")  # the log's name until the run is complete
    deadline = time.monotonic() + 300
    while '"phase":"warmup"' not in (partial.read_text() if partial.exists() else ""):
        assert time.monotonic() < deadline and workflow.poll() is None, "the run never started"
        time.sleep(1)
    job = log_lines(partial)[0]["slurm"]["job_id"]
    subprocess.run(["scancel", job], check=True)
    output, _ = workflow.communicate(timeout=HARD_TIMEOUT_S)
    assert workflow.returncode == 0, output[-3000:]
    summary = log_lines(log)[-1]
    assert summary["status"] == "failed"
    assert f"SLURM job {job}" in summary["error"] and "CANCELLED" in summary["error"]
    assert summary["slurm_states"] == ["CANCELLED"]


@pytest.mark.slow
def test_killed_supervisor_takes_its_srun_step_along(slurm_cluster, torch_python, tmp_path):
    """SIGKILL of the supervisor inside a job: srun gets SIGTERM (parent-death signal) and cancels the ranks' step."""
    log = tmp_path / "run.jsonl"
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/bash\nPYTHONPATH={REPO / 'workflow'} {torch_python} -m dlbench.harness"
        f" --framework pytorch --model resnet50 --log {log} --topology 1x2 --image-size 32"
        " --batch-size 2 --device cpu --warmup-steps 100000 --measured-steps 1\nsleep 120\n"
    )
    job = (
        subprocess.run(
            [
                "sbatch",
                "--parsable",
                "-p",
                "debug",
                "--nodes=1",
                "--ntasks=2",
                "--cpus-per-task=1",
                "--mem=1500",
                "-o",
                str(tmp_path / "slurm.out"),
                str(script),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .split(";")[0]
    )
    try:
        partial = log.with_name(log.name + ".partial")
        deadline = time.monotonic() + 300
        while '"phase":"warmup"' not in (partial.read_text() if partial.exists() else ""):
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(1)

        def ours(role: str) -> list[int]:
            """Processes of this run: python -m <role> ... --log <log>."""
            pids = []
            for proc in Path("/proc").iterdir():
                try:
                    argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
                    state = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if role in argv and any(str(log) in a for a in argv) and state[0] not in "ZX":
                    pids.append((int(proc.name), int(state[1])))
            return [pid for pid, ppid in pids if role != "dlbench.harness" or ppid != 1]  # not the guard

        os.kill(ours("dlbench.harness")[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        step = f"{job}.0"
        while (
            ours("dlbench.harness.rank")
            or step
            in subprocess.run(
                ["squeue", "-h", "-s", "-j", job, "-o", "%i"], capture_output=True, text=True
            ).stdout.split()
        ):
            assert time.monotonic() < deadline, "the ranks' step outlived its supervisor"
            time.sleep(0.5)
    finally:
        subprocess.run(["scancel", job], check=False)
