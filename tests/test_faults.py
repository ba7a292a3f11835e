"""Hard faults on real tiny studies: SIGKILLed Snakemake and supervisors, a failing report, odd paths.

No mocks: real Snakemake, real harness processes (found in /proc by their working directory, so other
studies on the machine are never touched), the README's one resume command.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, VENV_DIR, harness_command, harness_env, local_env, snakemake, tiny_config, write_config
from dlbench.logformats.run_log_fixtures import write_run_log


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_two_supervisors_never_write_one_run(tmp_path, torch_python):
    """A second try of a run while the first still runs (e.g. restarted at once) waits for it to end; a SIGKILLed
    supervisor's ranks die, then the second try writes the log alone."""
    log = tmp_path / "run.jsonl"

    def harness(*steps: str) -> subprocess.Popen:
        options = {"topology": "1x2", "image_size": 32, "batch_size": 2, "device": "cpu"}
        cmd = [*harness_command(torch_python, log, options), *steps]
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
    # Every try is noted, the killed one too (a start without an end), although both were a first try.
    notes = [json.loads(line) for line in (tmp_path / "run.attempts.jsonl").read_text().splitlines()]
    assert [(n["attempt"], n["event"], n.get("status")) for n in notes] == [
        (1, "start", None),
        (1, "start", None),
        (1, "end", "ok"),
    ]


def test_the_failure_record_counts_the_tries_of_its_own_series(tmp_path):
    """A series of tries begins at try 1: tries of an earlier series (killed with their Snakemake) stay in the
    notes but are not counted in the failure record of a later one."""
    from dlbench.harness.__main__ import Attempts

    attempts = Attempts(tmp_path / "rep1.jsonl")
    attempts.note(attempt=1, event="start")
    attempts.note(attempt=1, event="end", status="failed", error="first series")
    attempts.note(attempt=2, event="start")  # killed: no end
    attempts.note(attempt=1, event="start")
    attempts.note(attempt=1, event="end", status="timeout", error="second series")
    record = attempts.failure_record(1)
    assert record["status"] == "timeout" and record["attempts"] == 1
    assert "none of 1 tries completed: try 1 (local): TIMEOUT - second series" == record["error"]
    assert len(attempts.path.read_text().splitlines()) == 5


@pytest.fixture(scope="module")
def finished_study(torch_python, tmp_path_factory) -> Path:
    """A working directory where the small study at 1x1 (one run) has run to its report v1, run once for the module;
    tests that change it work on a copy (copy_study)."""
    workdir = tmp_path_factory.mktemp("finished_study")
    config = tiny_config()
    config["defaults"]["repeats"] = 1
    config["matrix"]["topology"] = ["1x1"]
    path = write_config(workdir / "study.yaml", config)
    result = snakemake(workdir, "--cores", "all", "--configfile", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def copy_study(finished: Path, work: Path) -> Path:
    """A copy of the finished study's directory (modification times kept, so Snakemake finds it up to date, and
    relative links such as results/reports/latest kept as links) in `work`; its study.yaml."""
    shutil.copytree(finished, work, symlinks=True, dirs_exist_ok=True)
    return work / "study.yaml"


@pytest.mark.slow
def test_failed_report_keeps_the_published_state(tmp_path, finished_study):
    path = copy_study(finished_study, tmp_path)
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_damaged_run_log_is_set_aside_and_its_run_redone(tmp_path, finished_study):
    """A finished run's log replaced by its summary line alone (valid JSON, a line of the log, no run: its header
    and steps gone; a log cut inside its last line is runlog.incomplete's too, test_session): the next run keeps
    it as <log>.damaged and runs it again; a dry run only says so. One real tiny run (besides finished_study's)
    and two Snakemake starts."""
    path = copy_study(finished_study, tmp_path)
    (log,) = (tmp_path / "results/runs").rglob("rep1.jsonl")
    damaged = log.read_bytes().splitlines(keepends=True)[-1]
    log.write_bytes(damaged)
    relative = log.relative_to(tmp_path)

    dry = snakemake(tmp_path, "-n", "--cores", "all", "--configfile", str(path))
    assert dry.returncode == 0 and f"dlbench: {relative}: damaged" in dry.stderr
    assert log.read_bytes() == damaged  # a dry run changes nothing

    result = snakemake(tmp_path, "--cores", "all", "--configfile", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"dlbench: {relative}: its first line is not its header (damaged after the run)" in result.stderr
    assert log.with_name("rep1.jsonl.damaged").read_bytes() == damaged
    assert json.loads(log.read_text().splitlines()[-1])["status"] == "ok"  # run again, complete
    records = pd.read_csv(tmp_path / "results/aggregate/records.csv")
    assert list(records["status"]) == ["ok"]


def test_a_second_snakemake_names_the_live_one_rather_than_unlock(tmp_path, torch_python):
    """While a Snakemake runs the study, a second one in the directory is told which process holds the lock (and
    not to unlock it); the lock stays."""
    config = write_config(tmp_path / "study.yaml", tiny_config())  # 4 runs: the first Snakemake runs a while
    first, _ = start(tmp_path, config)
    locks = tmp_path / ".snakemake" / "locks"
    try:
        wait_for(lambda: list(locks.glob("*.lock")) and supervisors(tmp_path), 300, "the first Snakemake's runs")
        second = subprocess.run(
            resume_command(tmp_path, config), cwd=tmp_path, capture_output=True, text=True, timeout=300, env=local_env()
        )
        assert first.poll() is None, "the first Snakemake ended before the second asked"
        output = second.stdout + second.stderr
        assert second.returncode != 0, output[-3000:]
        named = f"a Snakemake is running in this directory and holds its lock (.snakemake/locks): pid {first.pid} ("
        assert named in second.stderr and "do not run `snakemake --unlock`" in second.stderr, second.stderr[-3000:]
        assert "-m snakemake" in second.stderr.split(named)[1].split(")")[0]  # its command line
        assert output.index(named) < output.index("Directory cannot be locked")
        assert "removed the lock" not in output and list(locks.glob("*.lock"))
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        first.wait(timeout=120)
    no_orphans(tmp_path)


@contextlib.contextmanager
def full_file_system(path: Path, keep: bool = True, free: int = 0) -> Iterator[None]:
    """A small tmpfs mounted over `path`, holding a copy of what was there (with keep), then filled to the last
    byte but `free` (its file `.fill`): a write under `path` that needs more fails with ENOSPC (Errno 28), until a
    file is deleted (Snakemake deletes a job's outputs before it runs). Root only (mount); unmounted after, `path`
    as it was."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    path.mkdir(parents=True, exist_ok=True)
    before = Path(tempfile.mkdtemp(dir=path.parent))
    shutil.copytree(path, before, symlinks=True, dirs_exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(path)], capture_output=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.decode()[-300:]}")
    try:
        if keep:
            shutil.copytree(before, path, symlinks=True, dirs_exist_ok=True)
        with open(path / ".fill", "wb", buffering=0) as fill, contextlib.suppress(OSError):
            while True:
                fill.write(b"\0" * 4096)
        os.truncate(path / ".fill", max(0, (path / ".fill").stat().st_size - free))
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)
        shutil.rmtree(before)


@pytest.mark.slow
def test_a_full_disk_after_publishing_says_once_what_was_published(tmp_path):
    """The report publishes a new version, then finds no space for its copy (results/report), and Snakemake cannot
    write its own log (.snakemake/log) either: no logging tracebacks bury the one dlbench line, which comes after
    Snakemake's report of the failed job and says that the new version is published and `latest` points at it.
    With space again, the same command makes the copy and publishes nothing new. An imports-only study: three
    Snakemake runs of a few seconds, no framework."""
    archive = tmp_path / "archive"
    for repeat, value in enumerate((100.0, 101.0, 99.0), start=1):
        write_run_log(archive / f"r{repeat}.log", repeat=repeat, throughput=value)
    entry = {"name": "archive", "format": "dlbench", "paths": [str(archive)]}
    config = write_config(tmp_path / "study.yaml", {"study": "imported", "imports": [entry]})
    first = snakemake(tmp_path, "--cores", "1", "--configfile", str(config))
    assert first.returncode == 0, first.stderr[-3000:]
    reports = tmp_path / "results/reports"
    version = sum(p.stat().st_size for p in (reports / "v1").iterdir())  # the copy takes about twice that
    write_run_log(archive / "r4.log", repeat=4, throughput=98.0)  # new results: a new version

    results = tmp_path / "results"
    with (
        full_file_system(results, free=version * 5 // 4 + 64 * 1024),
        full_file_system(tmp_path / ".snakemake/log", keep=False),
    ):
        failed = snakemake(tmp_path, "--cores", "1", "--configfile", str(config))
        said = failed.stdout + failed.stderr
        assert failed.returncode != 0 and os.readlink(reports / "latest") == "v2", said[-3000:]
        assert "Logging error" not in said and "Traceback" not in said, said[-3000:]
        lines = [line for line in said.splitlines() if line.startswith("dlbench: no space left")]
        assert len(lines) == 1 and said.index(lines[0]) > said.index("Error in rule report"), said[-3000:]
        assert lines[0].startswith("dlbench: no space left to write results/report/"), lines
        assert lines[0].endswith(
            "report v2 is published (results/reports/v2), `latest` points at it; results/report (the copy "
            "Snakemake's report carries) is empty"
        ), lines
        assert "unchanged" not in lines[0]
        (results / ".fill").unlink()  # space again
        again = snakemake(tmp_path, "--cores", "1", "--configfile", str(config))
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads((results / "report/published.json").read_text())["version"] == "v2"
        assert sorted(p.name for p in reports.iterdir()) == ["latest", "latest.json", "v1", "v2"]


@pytest.mark.slow
def test_a_full_disk_is_a_dlbench_message_naming_the_path_and_loses_nothing(tmp_path, torch_python):
    """Errno 28 in the aggregate, in publishing (results/report/ never half a copy) and in a run's log: each a
    dlbench message naming where, no traceback; what was computed and published before stays."""
    config = tiny_config(telemetry={"enabled": False})
    config["defaults"]["repeats"] = 1
    config["matrix"]["topology"] = ["1x1"]
    path = write_config(tmp_path / "study.yaml", config)
    assert snakemake(tmp_path, "--cores", "1", "--configfile", str(path)).returncode == 0
    version = tmp_path / "results/reports/v1"
    published = {p.name: p.read_bytes() for p in version.iterdir()}
    copy = tmp_path / "results/report"

    with full_file_system(tmp_path / "results/aggregate", keep=False):
        result = snakemake(tmp_path, "--cores", "1", "--forcerun", "aggregate", "--configfile", str(path))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "dlbench: no space left to write results/aggregate/" in output, output[-3000:]
    assert "Traceback" not in output and "the run logs are kept" in output

    # The whole of results/ full (Snakemake removes an output directory left empty: not a mount point).
    with full_file_system(tmp_path / "results"):
        result = snakemake(tmp_path, "--cores", "1", "--forcerun", "report", "--configfile", str(path))
        output = result.stdout + result.stderr
        assert result.returncode != 0 and "dlbench: no space left to write results/report/" in output, output[-3000:]
        assert "Traceback" not in output and "results/reports are unchanged" in output
        assert not copy.exists() or not list(copy.iterdir())  # no half copy, no staging left
    assert {p.name: p.read_bytes() for p in version.iterdir()} == published
    assert os.readlink(tmp_path / "results/reports/latest") == "v1"
    result = snakemake(tmp_path, "--cores", "1", "--forcerun", "report", "--configfile", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    # The copy is the version, but for its self-contained index.html (Snakemake's report embeds it alone).
    copied = {p.name: p.read_bytes() for p in copy.iterdir() if p.name not in ("published.json", "index.html")}
    assert copied == {name: data for name, data in published.items() if name != "index.html"}

    runs = tmp_path / "full-runs"
    with full_file_system(runs):
        run = subprocess.run(
            [str(torch_python), "-m", "dlbench.harness", "--framework", "pytorch", "--model", "resnet50"]
            + ["--log", str(runs / "rep1.jsonl"), "--topology", "1x1", "--image-size", "32", "--batch-size", "2"]
            + ["--device", "cpu", "--warmup-steps", "1", "--measured-steps", "1"],
            cwd=tmp_path,
            env=harness_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert run.returncode == 1 and f"no space left to write {runs}/rep1.jsonl.partial" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_a_run_finished_just_before_ctrl_c_is_kept_on_the_restart(tmp_path, torch_python):
    """Ctrl-C (SIGINT to Snakemake's process group) the moment a run's log is complete: Snakemake has not recorded
    the run's end and still marks it incomplete; the restart keeps the log (the same bytes) and runs no job for it,
    where `rerun-incomplete` ran it again ("Forced execution")."""
    from dlbench.plan.problems import finished_but_marked

    config = tiny_config()
    config["defaults"]["repeats"] = 1
    config["matrix"]["topology"] = ["1x1"]
    path = write_config(tmp_path / "study.yaml", config)
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
    command += ["--cores", "2", "--configfile", str(path)]
    first = subprocess.Popen(command, cwd=tmp_path, env=local_env(), start_new_session=True, stdout=subprocess.DEVNULL)
    runs = tmp_path / "results" / "runs"
    deadline = time.monotonic() + 300
    while not (logs := list(runs.rglob("rep1.jsonl")) if runs.is_dir() else []) and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(first.pid, signal.SIGINT)  # as Ctrl-C at a terminal: Snakemake and its jobs
    first.wait(timeout=120)
    (log,) = logs
    finished = log.read_bytes()
    marked = [found for found, _ in finished_but_marked(tmp_path / ".snakemake")]
    restart = subprocess.run(command, cwd=tmp_path, env=local_env(), capture_output=True, text=True, timeout=600)
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert log.read_bytes() == finished and "rule benchmark_run" not in restart.stdout + restart.stderr
    if marked:  # Snakemake was stopped before it recorded the run's end (the case this guards; usually so)
        assert marked == [log]
        assert f"{log.relative_to(tmp_path)}: finished before Snakemake was stopped" in restart.stderr
