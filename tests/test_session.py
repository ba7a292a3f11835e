"""What the Snakemake that plans a study does itself (dlbench.plan.session), step by step without Snakemake: real
files in a working directory of its own, real processes (a live Snakemake's lock held by another process, the
interpreters a study names probed by running them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from dlbench.harness.lifeline import OWNER_ENV
from dlbench.harness.spec import TELEMETRY_PYTHON_ENV
from dlbench.plan import interpreters, session, stale_lock

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
PACKAGE_DIR = str(REPO / "workflow")
MATRIX = """\
study: steps
matrix:
  framework: [pytorch]
  model: [resnet50]
  topology: ["1x1"]
  batch_size: [2]
"""


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the working directory, as with Snakemake: .snakemake/, results/ and the study


def invalid(error: pytest.ExceptionInfo) -> str:
    """The message a refusal ends the process with (SystemExit: printed without a traceback)."""
    assert isinstance(error.value.code, str)
    return error.value.code


def study_of(tmp_path: Path, text: str, name: str = "study.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return session.read_study(yaml.safe_load(path.read_text()), [name], SCHEMA, REPO / "envs", tmp_path)


# ---- config.yaml, the study, its warnings
def test_a_broken_config_yaml_is_refused_with_its_place(tmp_path):
    session.check_default_configfile("config.yaml")  # none here: Snakemake says so itself
    (tmp_path / "config.yaml").write_text(MATRIX)
    session.check_default_configfile("config.yaml")
    (tmp_path / "config.yaml").write_text(MATRIX.replace("[pytorch]", "[pytorch"))
    with pytest.raises(SystemExit) as error:
        session.check_default_configfile("config.yaml")
    assert invalid(error) == (
        "dlbench: invalid configuration:\n  config.yaml, line 4, column 8: expected ',' or ']', but got ':'"
        " (while parsing a flow sequence at line 3)"
    )


def test_a_configfile_replaces_the_default_study():
    config = {"study": "default", "matrix": {"precision": ["fp32", "amp"]}}
    session.replace_config(config, {"study": "mine"})
    assert config == {"study": "mine"}


def test_the_study_is_read_with_its_warnings_placed(tmp_path, capsys):
    study, files = study_of(tmp_path, MATRIX.replace("  batch_size", "  seq_length: [512]\n  batch_size"))
    assert list(study.configurations) == ["resnet50/pytorch/1x1/bs2-fp32-nocompile-synthetic"]
    assert [str(f.path) for f in files] == ["study.yaml"]
    assert capsys.readouterr().err == (
        "dlbench: warning: study.yaml, line 6: matrix.seq_length: applies to BERT and Llama models only, and "
        "matrix.model has none (resnet50); ignored\n"
    )


def test_a_wrong_study_is_refused_one_line_per_problem(tmp_path):
    with pytest.raises(SystemExit) as error:
        study_of(tmp_path, MATRIX + "platform: {device: gpu}\nreport: {version: ..}\n")
    lines = invalid(error).splitlines()
    assert lines[0] == "dlbench: invalid configuration:"
    assert len(lines) == 3 and all(line.startswith("  study.yaml, line ") for line in lines[1:]), lines
    assert "platform.device: 'gpu' is not allowed" in invalid(error)
    assert "report.version: '..' is not valid" in invalid(error)


# ---- the software a study brings
def test_an_image_without_apptainer_is_refused_unless_a_job_runs_it(tmp_path):
    study, files = study_of(tmp_path, MATRIX + "software: {container: {pytorch: docker://x/y:1}}\n")
    with pytest.raises(SystemExit) as error:
        session.check_software(study, files, PACKAGE_DIR, False, False, False)
    assert invalid(error) == (
        "dlbench: invalid configuration:\n  software.container.pytorch: an image runs only with --sdm apptainer "
        "(Snakemake's own container support); without it these runs would use another build. Add --sdm apptainer,"
        " or remove the entry"
    )
    assert session.check_software(study, files, PACKAGE_DIR, True, False, False) == ({}, [])
    assert session.check_software(study, files, PACKAGE_DIR, False, True, False) == ({}, [])  # a cluster job's


def test_an_interpreter_without_its_framework_is_refused_at_its_line(tmp_path):
    """The core environment's Python, probed for real, cannot import PyTorch."""
    study, files = study_of(tmp_path, MATRIX + f"software:\n  python:\n    pytorch: {sys.executable}\n")
    with pytest.raises(SystemExit) as error:
        session.check_software(study, files, PACKAGE_DIR, False, False, False)
    assert invalid(error) == (
        f"dlbench: invalid configuration:\n  study.yaml, line 9: software.python.pytorch: {sys.executable}: "
        "cannot import dlbench's pytorch backend: ModuleNotFoundError: No module named 'torch'"
    )
    # A job's own Snakemake (local or remote) probes nothing: the one that planned did.
    assert session.check_software(study, files, PACKAGE_DIR, False, False, True) == ({}, [])
    assert session.check_software(study, files, PACKAGE_DIR, False, True, False) == ({}, [])


FACTS = {"python_version": "3.11.9", "framework_version": "2.13.0+cu130", "cuda": "13.0", "cudnn": 91200}


def site_python(tmp_path: Path) -> Path:
    """A stand-in for a site's interpreter (building a PyTorch takes minutes): a real process that answers the
    probe's command line (`python -m dlbench.harness.probe --framework pytorch`) as a CUDA build of PyTorch on a
    node without a GPU would."""
    python = tmp_path / "site" / "python"
    python.parent.mkdir()
    facts = {"framework": "pytorch", "python": str(python), **FACTS, "nccl": "2.27.7", "gpus": []}
    python.write_text(f"#!/bin/sh\necho '{json.dumps(facts)}'\n")
    python.chmod(0o755)
    return python


def test_a_study_interpreter_is_said_and_with_cuda_its_missing_gpu_warned(tmp_path, capsys):
    python = site_python(tmp_path)
    text = MATRIX + f"software:\n  python:\n    pytorch: {python}\nplatform:\n  device: cuda\n"
    study, files = study_of(tmp_path, text)
    capsys.readouterr()
    found, no_gpu = session.check_software(study, files, PACKAGE_DIR, False, False, False)
    identity = "python_version=3.11.9;framework_version=2.13.0+cu130;cuda=13.0;cudnn=91200;nccl=2.27.7"
    assert list(found) == ["pytorch"] and found["pytorch"].python == str(python)
    assert found["pytorch"].identity == identity
    problem = (
        f"study.yaml, line 9: software.python.pytorch: platform.device is cuda but {python}'s pytorch "
        "2.13.0+cu130 sees no GPU here (its CUDA: 13.0)"
    )
    assert no_gpu == [problem]
    assert capsys.readouterr().err == (
        f"dlbench: pytorch runs with {python} ({identity})\n"
        f"dlbench: warning: {problem}; refused when the runs are on this machine, not when they go to other nodes "
        "(SLURM)\n"
    )


def test_cuda_on_this_machine_is_asked_for_the_frameworks_built_here(tmp_path, capsys):
    study, files = study_of(tmp_path, MATRIX + "platform: {device: cuda}\n")
    found, no_gpu = session.check_software(study, files, PACKAGE_DIR, False, False, False)
    assert found == {}
    absent = interpreters.no_gpu_here()  # NVML, CUDA_VISIBLE_DEVICES, the driver's device files
    if absent is None:
        assert no_gpu == [] and capsys.readouterr().err == ""
        return
    problem = (
        f"study.yaml, line 7: platform.device: cuda, but this machine has no GPU ({absent}): every run of pytorch "
        "here would be unsupported"
    )
    assert no_gpu == [problem]
    assert capsys.readouterr().err.endswith(
        f"dlbench: warning: {problem}; refused when the runs are on this "
        "machine, not when they go to other nodes (SLURM)\n"
    )
    # onstart: refused when the runs are local, not when they go to the nodes of a cluster
    session.refuse_cuda_without_a_gpu(no_gpu, local_exec=False)
    with pytest.raises(SystemExit) as error:
        session.refuse_cuda_without_a_gpu(no_gpu, local_exec=True)
    assert invalid(error) == f"dlbench: invalid configuration:\n  {problem}"


def test_a_cpu_study_asks_nothing(tmp_path, capsys):
    study, files = study_of(tmp_path, MATRIX)
    assert session.check_software(study, files, PACKAGE_DIR, False, False, False) == ({}, [])
    assert capsys.readouterr().err == ""
    session.refuse_cuda_without_a_gpu([], local_exec=True)


# ---- the process, its lock, the jobs' environment
def test_jobs_inherit_this_process_and_the_core_python(monkeypatch):
    monkeypatch.delenv(OWNER_ENV, raising=False)
    monkeypatch.delenv(TELEMETRY_PYTHON_ENV, raising=False)
    session.mark_owner()
    session.export_core_python(sys.executable)
    assert os.environ[OWNER_ENV] == str(os.getpid())
    assert os.environ[TELEMETRY_PYTHON_ENV] == sys.executable


def test_a_stale_lock_is_removed_and_said(tmp_path, capsys):
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("")
    fd = session.claim_directory(Path(".snakemake"))
    try:
        assert not locks.exists()
        assert capsys.readouterr().err == (
            "dlbench: removed the lock of a Snakemake that no longer runs (.snakemake/locks)\n"
        )
    finally:
        os.close(fd)
    fd = session.claim_directory(Path(".snakemake"))  # no lock: nothing to say
    os.close(fd)
    assert capsys.readouterr().err == ""


HOLDER = "import sys; from pathlib import Path; from dlbench.plan import stale_lock;"
HOLDER += " stale_lock.hold(Path('.snakemake'));"
HOLDER += " print('alive', flush=True); sys.stdin.read()"


def test_a_live_snakemakes_lock_names_its_owner(tmp_path, capsys):
    """Another process of this workflow holds .snakemake/ (as a running Snakemake does): its lock stays."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "alive\n"
        locks = tmp_path / ".snakemake" / "locks"
        locks.mkdir()
        (locks / "0.input.lock").write_text("")
        fd = session.claim_directory(Path(".snakemake"))
        os.close(fd)
        assert (locks / "0.input.lock").exists()
        live = stale_lock.holders(Path(".snakemake"))
        assert live == [f"pid {holder.pid} ({sys.executable} -c {HOLDER})"]
        assert capsys.readouterr().err == (
            f"dlbench: a Snakemake is running in this directory and holds its lock (.snakemake/locks): {live[0]}. "
            'Where this one stops with "Directory cannot be locked", do not run `snakemake --unlock` (two '
            "Snakemakes would write the same files): wait for that one to end, or stop it, then run this command "
            "again\n"
        )
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


# ---- damaged run logs
def damaged_log(tmp_path: Path) -> Path:
    log = tmp_path / "results" / "runs" / "resnet50" / "pytorch" / "1x1" / "bs2-fp32" / "rep1.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text('{"type": "header"}\n{"type": "summary", "throughput"')  # cut short after its run
    return log


def test_a_run_log_is_whole_only_when_its_header_steps_and_summary_agree(tmp_path):
    """A summary line alone is valid JSON and no run; an ok summary needs the measured steps its header asks for."""
    from dlbench.harness.runlog import incomplete
    from dlbench.logformats.run_log_fixtures import write_run_log

    whole = write_run_log(tmp_path / "whole.jsonl", measured_steps=4)
    assert incomplete(whole) is None
    lines = whole.read_text().splitlines(keepends=True)
    cases = {
        "summary.jsonl": (lines[-1], "its first line is not its header"),
        "step_lost.jsonl": (
            "".join(line for line in lines if '"step":3,' not in line or '"measure"' not in line),
            "its ok summary follows 3 measured step lines where its header asks for 4",
        ),
        "cut.jsonl": ("".join(lines)[:-20], "its last line is not a readable summary"),
        "empty.jsonl": ("", "its last line is not a readable summary"),
    }
    for name, (text, why) in cases.items():
        (tmp_path / name).write_text(text)
        assert incomplete(tmp_path / name) == why, name
    # a run's own shape: its window line after the steps, then the telemetry (never read by the check)
    steps_end = max(i for i, line in enumerate(lines) if '"phase":"measure"' in line) + 1
    window, telemetry = '{"type":"window","measure_start":1.0}\n', '{"type":"telemetry","kind":"sample"}\n' * 3000
    (tmp_path / "run.jsonl").write_text("".join([*lines[:steps_end], window, telemetry, *lines[steps_end:]]))
    assert incomplete(tmp_path / "run.jsonl") is None
    failed = write_run_log(tmp_path / "oom.jsonl", status="oom", throughput=None, error="out of memory")
    assert incomplete(failed) is None  # a failure's summary follows no measured steps


def test_a_dry_run_says_which_run_logs_are_damaged_and_keeps_them(tmp_path, capsys):
    log = damaged_log(tmp_path)
    (tmp_path / "records.csv").write_text("")
    session.set_aside_damaged_run_logs("results/runs", ["records.csv"], dryrun=True)
    assert log.exists() and (tmp_path / "records.csv").exists()
    assert capsys.readouterr().err == (
        "dlbench: results/runs/resnet50/pytorch/1x1/bs2-fp32/rep1.jsonl: damaged (its last line is not a readable "
        "summary): a run redoes it\n"
    )


def test_a_run_sets_damaged_run_logs_aside_and_removes_their_dependants(tmp_path, capsys):
    log = damaged_log(tmp_path)
    (tmp_path / "records.csv").write_text("")
    session.set_aside_damaged_run_logs("results/runs", ["records.csv", "published.json"], dryrun=False)
    assert not log.exists() and log.with_name("rep1.jsonl.damaged").exists()
    assert not (tmp_path / "records.csv").exists()
    path = "results/runs/resnet50/pytorch/1x1/bs2-fp32/rep1.jsonl"
    assert capsys.readouterr().err == (
        f"dlbench: {path}: its last line is not a readable summary (damaged after the run); kept as "
        f"{path}.damaged, run again\n"
    )
    session.set_aside_damaged_run_logs("results/runs", ["records.csv"], dryrun=False)  # nothing more to do
    assert capsys.readouterr().err == ""


# ---- onstart: a published version is never overwritten
def test_a_published_fixed_version_is_refused_only_for_new_results(tmp_path):
    asked = []

    def rules_to_run(rules):
        return lambda: asked.append(rules) or rules

    session.refuse_to_republish("auto", "results/reports", rules_to_run({"aggregate"}))
    session.refuse_to_republish("v1", "results/reports", rules_to_run({"aggregate"}))  # not published
    assert asked == []  # the DAG is not asked when nothing is published
    (tmp_path / "results" / "reports" / "v1").mkdir(parents=True)
    session.refuse_to_republish("v1", "results/reports", rules_to_run({"report", "all"}))
    session.refuse_to_republish("v1", "results/reports", rules_to_run(None))  # another Snakemake's DAG
    with pytest.raises(SystemExit) as error:
        session.refuse_to_republish("v1", "results/reports", rules_to_run({"benchmark_run", "aggregate", "all"}))
    assert invalid(error) == (
        "dlbench: invalid configuration:\n  report.version: 'v1' is published already (results/reports/v1) and "
        "this run computes new results (aggregate, all, benchmark_run); a published report is never overwritten: "
        "choose a new name, or auto"
    )


# ---- at the end
def test_the_end_names_every_error_and_import_note(tmp_path, capsys):
    session.print_problems("records.csv", ["results/imports/a.notes"])  # nothing aggregated yet
    assert capsys.readouterr().err == ""
    (tmp_path / "records.csv").write_text(
        "run_id,status,error,log_path\n"
        "a/rep1,ok,,runs/a/rep1.jsonl\n"
        "b/rep1,error,line 3: not JSON,runs/b/rep1.jsonl\n"
        "c/rep1,error,runs/c/rep1.jsonl: no summary,runs/c/rep1.jsonl\n"
    )
    notes = tmp_path / "a.notes"
    notes.write_text("x.txt: not a run log; skipped\n\n")
    session.print_problems("records.csv", iter([notes, tmp_path / "missing.notes"]))
    assert capsys.readouterr().err == (
        "dlbench: 2 runs or logs ended in an error (the report lists them):\n"
        "  runs/b/rep1.jsonl: line 3: not JSON\n"
        "  runs/c/rep1.jsonl: no summary\n"
        "dlbench: import note: x.txt: not a run log; skipped\n"
    )


def test_the_end_names_the_published_report(tmp_path, capsys):
    session.print_report_location("published.json")
    assert capsys.readouterr().out == ""
    (tmp_path / "published.json").write_text(json.dumps({"version": "v2", "index": "results/reports/v2/index.html"}))
    session.print_report_location("published.json")
    assert capsys.readouterr().out == "dlbench: report v2: results/reports/v2/index.html\n"


def test_a_large_study_says_its_size_before_snakemake_plans_it(tmp_path, capsys):
    """About 10,000 runs take Snakemake minutes to plan: the study says how many and how long, once; a small one
    says nothing."""
    big = yaml.safe_load(MATRIX) | {"defaults": {"repeats": 35}}
    big["matrix"] |= {"topology": ["1x1", "1x8", "2x8", "4x8"], "precision": ["fp32", "amp"], "batch_size": [8, 16]}
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big))
    study, _ = session.read_study(big, [str(path)], SCHEMA, REPO / "envs", tmp_path)
    session.announce_size(study)
    said = capsys.readouterr().err
    assert "dlbench: study steps: 560 runs" not in said  # 4 x 2 x 2 x 35
    big["matrix"]["framework"] = ["pytorch", "tensorflow", "mxnet", "jax"]
    big["matrix"]["batch_size"] = [8, 16, 32, 64]
    path.write_text(yaml.safe_dump(big))
    study, _ = session.read_study(big, [str(path)], SCHEMA, REPO / "envs", tmp_path)
    session.announce_size(study)
    said = capsys.readouterr().err
    assert said.count("dlbench: study steps: 4480 runs in 128 configurations;") == 1
    assert "about 18 s at ~4 ms per job" in said
