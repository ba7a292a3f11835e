"""Hard faults on real tiny studies: SIGKILLed Snakemake and supervisors, a failing report, odd paths.

No mocks: real Snakemake, real harness processes (found in /proc by their working directory, so other
studies on the machine are never touched), the README's one resume command.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from conftest import REPO, VENV_DIR, harness_env, local_env, snakemake, tiny_config, write_config
from dlbench.run_log_fixtures import write_run_log


def harness_processes(workdir: Path) -> dict[int, tuple[int, str]]:
    """Live (not zombie) dlbench harness processes working in workdir: supervisors, guards, ranks;
    pid -> (parent pid, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "cwd") != str(workdir):
                continue
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # python -m dlbench.harness[.rank] (not the job's shell, whose one argument names it too)
        if {"dlbench.harness", "dlbench.harness.rank"} & set(argv) and stat[0] not in ("Z", "X"):
            found[int(entry.name)] = (int(stat[1]), " ".join(argv))
    return found


def supervisors(workdir: Path) -> list[int]:
    """Running supervisors (python -m dlbench.harness started by a job's shell; not the ranks, not the guard)."""
    procs = harness_processes(workdir)
    out = []
    for pid, (ppid, cmdline) in procs.items():
        if "dlbench.harness.rank" in cmdline or ppid in procs:
            continue
        try:
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"bash" in parent:
            out.append(pid)
    return out


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def finished_logs(work: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(work)): p.read_bytes()
        for p in sorted((work / "results/runs").rglob("rep*.jsonl"))
        if not p.name.endswith(".attempts.jsonl")
    }


def resume_command(work: Path, configfile: Path) -> list[str]:
    """The README's command after a crash, `snakemake --cores all`, for this study."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(work),
        "--cores",
        "all",
        "--configfile",
        str(configfile),
    ]


def start(work: Path, configfile: Path) -> tuple[subprocess.Popen, Path]:
    """The command in the background (its own session), and the file its output goes to."""
    out = work / f"snakemake-{time.monotonic_ns()}.out"
    with open(out, "w") as stream:
        return subprocess.Popen(
            resume_command(work, configfile),
            cwd=work,
            stdout=stream,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=local_env(),
        ), out


def no_orphans(work: Path) -> None:
    wait_for(lambda: not harness_processes(work), 20, "the harness processes to end")


def test_hard_kills_leave_no_orphans_and_one_command_resumes(tmp_path, torch_python):
    """SIGKILL Snakemake mid-run, resume; SIGKILL a supervisor mid-run, resume: no process outlives its owner,
    no finished run is redone, none is lost."""
    config = write_config(tmp_path / "study.yaml", tiny_config())  # 2 topologies x 2 repeats: 4 runs
    expected = {
        f"results/runs/resnet50/pytorch/{t}/bs2-fp32-nocompile-synthetic-img32/rep{r}.jsonl"
        for t in ("1x1", "1x2")
        for r in (1, 2)
    }

    # 1. Snakemake killed while a run is in flight (one run finished before it).
    workflow, _ = start(tmp_path, config)
    in_flight = lambda: list((tmp_path / "results/runs").rglob("*.partial")) and supervisors(tmp_path)  # noqa: E731
    wait_for(lambda: finished_logs(tmp_path) and in_flight(), 300, "a second run to start")
    os.kill(workflow.pid, signal.SIGKILL)
    workflow.wait()
    no_orphans(tmp_path)
    before = finished_logs(tmp_path)
    assert before and all(json.loads(log.splitlines()[-1])["type"] == "summary" for log in before.values())
    assert list((tmp_path / ".snakemake" / "locks").glob("*.lock")), "expected Snakemake's stale lock"

    # 2. The same command resumes (stale lock, half-done job); this time the supervisor alone is killed.
    workflow, output = start(tmp_path, config)
    new_run = lambda: len(finished_logs(tmp_path)) > len(before) and supervisors(tmp_path)  # noqa: E731
    victim = wait_for(new_run, 300, "a run after the resumed one")[0]
    os.kill(victim, signal.SIGKILL)
    assert workflow.wait(timeout=300) != 0  # its job failed: the study stops, the run is not recorded
    no_orphans(tmp_path)
    assert "dlbench: removed the lock of a Snakemake that no longer runs" in output.read_text()
    middle = finished_logs(tmp_path)

    # 3. The same command again completes the study.
    result = subprocess.run(
        resume_command(tmp_path, config), cwd=tmp_path, capture_output=True, text=True, timeout=600, env=local_env()
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "dlbench: removed the lock" not in result.stderr  # the failed job's Snakemake ended cleanly
    after = finished_logs(tmp_path)
    assert set(after) == expected  # none lost
    redone = [path for path, data in middle.items() if after[path] != data]
    assert redone == [] and all(middle[p] == before[p] for p in before)  # none redone
    assert all(json.loads(data.splitlines()[-1])["status"] == "ok" for data in after.values())
    assert not list((tmp_path / "results/runs").rglob("*.partial"))


def test_two_supervisors_never_write_one_run(tmp_path, torch_python):
    """A second try of a run while the first still runs (e.g. restarted at once) waits for it to end; a SIGKILLed
    supervisor's ranks die, then the second try writes the log alone."""
    log = tmp_path / "run.jsonl"

    def harness(*steps: str) -> subprocess.Popen:
        cmd = [
            str(torch_python),
            "-m",
            "dlbench.harness",
            "--framework",
            "pytorch",
            "--model",
            "resnet50",
            "--log",
            str(log),
            "--topology",
            "1x2",
            "--image-size",
            "32",
            "--batch-size",
            "2",
            "--device",
            "cpu",
            *steps,
        ]
        return subprocess.Popen(
            cmd, cwd=tmp_path, env=harness_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    first = harness("--warmup-steps", "100000", "--measured-steps", "1")
    partial = log.with_name(log.name + ".partial")
    wait_for(lambda: partial.exists() and '"phase":"warmup"' in partial.read_text(), 120, "the first run's steps")
    second = harness("--warmup-steps", "1", "--measured-steps", "2")
    time.sleep(3)
    assert second.poll() is None and partial.read_text().count('"type":"header"') == 1  # waiting, not writing
    os.kill(first.pid, signal.SIGKILL)
    assert second.wait(timeout=300) == 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["type"] for e in lines].count("header") == 1 and lines[-1]["status"] == "ok"
    assert sum(e["type"] == "step" and e["phase"] == "warmup" for e in lines) == 1
    first.wait()
    no_orphans(tmp_path)


def test_failed_report_keeps_the_published_state(tmp_path, torch_python):
    config = tiny_config()
    config["defaults"]["repeats"] = 1
    config["matrix"]["topology"] = ["1x1"]
    path = write_config(tmp_path / "study.yaml", config)
    assert snakemake(tmp_path, "--cores", "all", "--configfile", str(path)).returncode == 0
    reports = tmp_path / "results/reports"
    published = {p: p.read_bytes() for p in [reports / "latest.json", *sorted((reports / "v1").iterdir())]}

    # The report job fails (an input it cannot read): nothing published changes.
    summary = tmp_path / "results/aggregate/summary.csv"
    good = summary.read_bytes()
    summary.write_text("")
    result = snakemake(tmp_path, "--cores", "all", "--configfile", str(path))
    assert result.returncode != 0 and "Error in rule report" in result.stdout + result.stderr
    assert {p: p.read_bytes() for p in published} == published
    assert os.readlink(reports / "latest") == "v1"
    assert sorted(p.name for p in reports.iterdir()) == ["latest", "latest.json", "v1"]

    # The next run, with the same results again: nothing is published anew.
    summary.write_bytes(good)
    result = snakemake(tmp_path, "--cores", "all", "--configfile", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dlbench: report v1: results/reports/v1/index.html" in result.stdout + result.stderr
    assert sorted(p.name for p in reports.iterdir()) == ["latest", "latest.json", "v1"]
    assert {p: p.read_bytes() for p in published} == published
    assert "unchanged results, already published as results/reports/v1" in (tmp_path / "logs/report.log").read_text()

    # Snakemake's own report carries dlbench's, and maintenance commands need no --cores.
    result = snakemake(tmp_path, "--report", "report.html", "--configfile", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    html = (tmp_path / "report.html").read_text()
    assert "throughput.png" in html and "speedup.png" in html and "Median training throughput" in html
    for args in (
        ["--unlock"],
        ["--list-rules"],
        ["--list-changes", "params"],
        ["--cleanup-metadata", "results/report/summary.csv"],
    ):
        result = snakemake(tmp_path, *args, "--configfile", str(path))
        assert result.returncode == 0, (args, result.stderr[-2000:])


ODD = "odd 'q' \"dq\" ; $(touch PWNED1) `touch PWNED2` ü"


def test_odd_paths_never_reach_a_shell(tmp_path, torch_python):
    """A working directory, environment directory, import and dataset paths with spaces, quotes, `;`, `$(...)`,
    backquotes and non-ASCII: the study runs, and nothing but the study is executed."""
    work = tmp_path / ODD
    work.mkdir()
    venvs = work / f"venvs {ODD}"
    venvs.symlink_to(VENV_DIR)  # the built environments, under an odd name
    imported = work / f"old {ODD}" / "run 1.jsonl"
    write_run_log(imported, framework="archive", image_size=32, batch_size=2, throughput=5.0)
    config = tiny_config(venv_dir=venvs)
    config["defaults"]["repeats"] = 1
    config["matrix"]["topology"] = ["1x1"]
    config["imports"] = [{"name": "old", "format": "dlbench", "paths": [str(imported.parent)]}]
    path = write_config(work / f"study {ODD}.yaml", config)
    result = snakemake(work, "--cores", "all", "--configfile", str(path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = pd.read_csv(work / "results/reports/v1/records.csv")
    assert sorted(records["framework"]) == ["archive", "pytorch"] and set(records["status"]) == {"ok"}

    # Commands that would run only with real data or a new environment: the dry run's commands keep each
    # odd path one word.
    raw = work / f"raw {ODD}"
    for directory in ("train", "validation"):
        (raw / directory).mkdir(parents=True)
    (raw / "synsets.txt").write_text("n01440764\n")
    config = tiny_config(venv_dir=work / f"new venvs {ODD}")
    config["matrix"].update(topology=["1x1"], data=["real"])
    config["datasets"] = {
        "imagenet": {
            "source": "raw",
            "train_dir": str(raw / "train"),
            "validation_dir": str(raw / "validation"),
            "synsets": str(raw / "synsets.txt"),
        }
    }
    dry = snakemake(work, "-n", "-p", "--configfile", str(write_config(work / "real.yaml", config)))
    assert dry.returncode == 0, dry.stderr[-3000:]
    commands = [
        shlex.split(line)
        for line in dry.stdout.splitlines()
        if "dlbench.dataprep.imagenet convert" in line or "dlbench.venvs build" in line
    ]
    convert = next(c for c in commands if "convert" in c)
    assert convert[convert.index("--train-dir") + 1] == str(raw / "train")
    assert convert[convert.index("--synsets") + 1] == str(raw / "synsets.txt")
    build = next(c for c in commands if "build" in c)
    assert build[build.index("--venv-dir") + 1] == str(work / f"new venvs {ODD}")

    assert not [p for p in tmp_path.rglob("PWNED*")] and not list(Path.cwd().glob("PWNED*"))
    shutil.rmtree(work / "results", ignore_errors=True)
