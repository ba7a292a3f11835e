"""A study's own interpreter per framework (software.python) and container images (software.container): checked
before any job, recorded in every run, part of the runs' identity."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, harness_env, planned_jobs, read_log, snakemake, tiny_config, write_config

sys.path.insert(0, str(REPO / "workflow"))
from dlbench.harness.spec import INTERPRETER_ENV  # noqa: E402
from dlbench.plan import interpreters  # noqa: E402
from dlbench.plan.study import ConfigError  # noqa: E402

CORE_PYTHON = sys.executable  # has no deep-learning framework


@pytest.fixture(scope="module")
def site_python(tmp_path_factory, torch_python) -> Path:
    """A PyTorch interpreter the workflow did not build for the study, as a site provides one: its own virtual
    environment (its own prefix and identity) whose PyTorch comes from a shared tree, here the built environment's
    site-packages named in a .pth file (as HPC modules add theirs to a path)."""
    site = tmp_path_factory.mktemp("site") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", site], check=True)
    shared = subprocess.run(
        [torch_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    own = subprocess.run(
        [site / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(own) / "site-modules.pth").write_text(shared + "\n")
    return site / "bin" / "python"


def byo_config(python: str | Path, **overrides) -> dict:
    config = tiny_config(software={"python": {"pytorch": str(python)}})
    config["matrix"]["topology"] = ["1x1"]
    config["defaults"]["repeats"] = 1
    config.update(overrides)
    return config


def refused(work: Path, config: dict, *how: str) -> str:
    """The message of a study that the workflow refuses before any job (exit 1, nothing run); `how`: a dry run
    unless told otherwise."""
    result = snakemake(work, *(how or ["-n"]), "--configfile", str(write_config(work / "study.yaml", config)))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert not (work / "results").exists()
    return result.stderr


def test_probe_reports_the_interpreters_build(torch_python):
    facts = interpreters.probe("pytorch", str(torch_python), REPO / "workflow")
    assert facts["python"] == str(torch_python)
    assert facts["framework_version"].startswith("2.13.0")
    assert facts["cuda"] is None and facts["gpus"] == []  # the CPU build here
    interpreter = interpreters.Interpreter("pytorch", str(torch_python), facts)
    assert "framework_version=2.13.0" in interpreter.identity
    # The build's identity, not what the host shows: a GPU seen or not does not change it, a new build does.
    assert interpreters.Interpreter("pytorch", "p", facts | {"gpus": ["NVIDIA H100"]}).identity == interpreter.identity
    assert interpreters.Interpreter("pytorch", "p", facts | {"nccl": "2.27.7"}).identity != interpreter.identity


def test_an_interpreter_without_the_framework_is_refused_with_its_key_and_line(tmp_path):
    with pytest.raises(ConfigError, match=r"software\.python\.pytorch: .*No module named 'torch'"):
        interpreters.probe("pytorch", CORE_PYTHON, REPO / "workflow")
    message = refused(tmp_path, byo_config(CORE_PYTHON))
    assert "study.yaml, line" in message and "software.python.pytorch" in message
    assert "cannot import dlbench's pytorch backend: ModuleNotFoundError: No module named 'torch'" in message
    assert "Traceback" not in message


@pytest.mark.parametrize(
    "software, expected",
    [
        (
            {"python": {"pytorch": "/nonexistent/bin/python"}},
            "software.python.pytorch: /nonexistent/bin/python does not exist",
        ),
        (
            {"python": {"pytoch": CORE_PYTHON}},
            "software.python.pytoch: 'pytoch' is not one of dlbench's frameworks (did you mean 'pytorch'?)",
        ),
        ({"python": {"pytorch": str(REPO / "README.md")}}, "is not executable"),
        ({"container": {"pytorch": "nvcr.io/nvidia/pytorch:25.01-py3"}}, "software.container.pytorch"),
        ({"container": {"pytorch": "docker://nvcr.io/nvidia/pytorch:25.01-py3"}}, "only with --sdm apptainer"),
        (
            {"container": {"pytorch": "images/missing.sif"}},
            "software.container.pytorch: images/missing.sif does not exist",
        ),
        ({"python": {"pytorch": CORE_PYTHON}, "container": {"pytorch": "docker://python:3.11"}}, "give one of the two"),
    ],
)
def test_bad_software_entries_are_refused_before_any_job(tmp_path, software, expected):
    config = tiny_config(software=software)
    assert expected in refused(tmp_path, config)


@pytest.mark.slow
@pytest.mark.parametrize("own_interpreter", [True, False], ids=["software.python", "built environment"])
def test_compiled_runs_without_a_c_compiler_are_named_before_any_job(tmp_path, torch_python, own_interpreter):
    """torch.compile needs a C compiler and the Python headers on the node: with PATH a directory without gcc or
    clang, the Python the compiled runs use (the study's, or the built environment's) is asked once, while
    planning; a dry run says what is missing and which configurations it affects, a run is refused."""
    empty = tmp_path / "bin"  # the few commands Snakemake and its SLURM plugin start, no compiler
    empty.mkdir()
    for command in ("which", "sh", "bash", "git"):
        if found := shutil.which(command):
            (empty / command).symlink_to(found)
    config = byo_config(torch_python) if own_interpreter else tiny_config()
    config["matrix"]["topology"] = ["1x1"]
    config["matrix"]["compiler"] = [False, True]
    study = write_config(tmp_path / "study.yaml", config)
    result = snakemake(tmp_path, "-n", "--configfile", str(study), env={"PATH": str(empty)})
    assert result.returncode == 0, result.stderr[-3000:]
    key = "software.python.pytorch" if own_interpreter else "matrix.compiler"
    # the built environment's Python, or before it is built the one uv builds it from
    python = str(torch_python) if own_interpreter else "/"
    assert result.stderr.count("needs a C compiler and the Python headers") == 1, result.stderr[-3000:]
    assert "study.yaml, line " in result.stderr and f"{key}: torch.compile of {python}" in result.stderr
    assert "no C compiler (gcc or clang not found on PATH): the 1 pytorch configurations with compiler on" in (
        result.stderr
    )
    assert "-compile-" in result.stderr.split("configurations with compiler on would fail (")[1].split(")")[0]
    assert "apt-get install gcc python3.X-dev" in result.stderr
    run = snakemake(tmp_path, "--cores", "1", "--configfile", str(study), env={"PATH": str(empty)})
    assert run.returncode == 1 and "invalid configuration" in run.stderr and "needs a C compiler" in run.stderr
    assert not (tmp_path / "results").exists()  # refused before any job
    # With a compiler on PATH (this machine's) nothing is said.
    fine = snakemake(tmp_path, "-n", "--configfile", str(study))
    assert fine.returncode == 0 and "needs a C compiler" not in fine.stderr


@pytest.mark.slow
def test_cuda_with_an_interpreter_that_sees_no_gpu_is_refused_here(tmp_path, torch_python):
    config = byo_config(torch_python, platform={"device": "cuda"})
    message = refused(tmp_path, config, "--cores", "1")
    assert "study.yaml, line" in message and "software.python.pytorch: platform.device is cuda but" in message
    assert "sees no GPU here (its CUDA: none, a CPU build)" in message
    assert not list(tmp_path.glob(".venvs/*")) and not (tmp_path / "logs").exists()  # no job ran
    found, no_gpu = interpreters.check({"pytorch": str(torch_python)}, ["pytorch"], "cuda", REPO / "workflow")
    assert found["pytorch"].facts["gpus"] == [] and len(no_gpu) == 1


@pytest.mark.slow
def test_a_study_runs_with_its_own_interpreter_and_records_it(tmp_path, site_python, torch_python):
    work = tmp_path
    config = write_config(work / "study.yaml", byo_config(site_python))
    result = snakemake(work, "--cores", "2", "--configfile", str(config))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"dlbench: pytorch runs with {site_python}" in result.stderr
    log = next((work / "results" / "runs").rglob("rep1.jsonl"))
    environment = read_log(log)["environment"][0]
    assert environment["interpreter"] == str(site_python)
    assert environment["interpreter_identity"].startswith("python_version=")
    records = pd.read_csv(work / "results" / "reports" / "v1" / "records.csv")
    assert list(records["status"]) == ["ok"]
    assert list(records["interpreter"]) == [str(site_python)]
    assert records["framework_version"].iloc[0].startswith("2.13.0")
    assert not list(work.glob(".venvs/pytorch-*")), "no environment is built for a framework the study brings"
    # The GPU acceptance check reads such a report: on this CPU it must fail, saying why (no device peak for MFU).
    check = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_acceptance.py"),
            "--report",
            str(work / "results" / "reports" / "latest"),
        ],
        capture_output=True,
        text=True,
        env=harness_env(),
    )
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"interpreter {site_python}" in check.stdout and "no MFU (no peak known for device" in check.stdout
    assert "0 of 1 configurations pass" in check.stdout
    # Nothing changed: nothing to do. Another interpreter for PyTorch: exactly its runs again (and the report).
    assert planned_jobs(work, config) == []
    other = write_config(work / "other.yaml", byo_config(torch_python))
    runs = [out for rule, out in planned_jobs(work, other) if rule == "benchmark_run"]
    assert runs == [str(log.relative_to(work))]
    # The same interpreter as a second build beside the first: probed as software.python is, said, its identity in
    # its runs' command lines; the runs of the default build are done already.
    both = byo_config(site_python)
    both["software"]["builds"] = {"again": {"pytorch": {"python": str(torch_python)}}}
    both["matrix"]["build"] = ["default", "again"]
    dry = snakemake(work, "-n", "-p", "--configfile", str(write_config(work / "both.yaml", both)))
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert f"dlbench: pytorch/again runs with {torch_python} (python_version=" in dry.stderr
    commands = [line for line in (dry.stdout + dry.stderr).splitlines() if "-m dlbench.harness " in line]
    assert (
        len(commands) == 1 and "--build again" in commands[0] and f"{INTERPRETER_ENV}='python_version=" in commands[0]
    )


@pytest.mark.parametrize("image_has_torch", [False, True], ids=["broken image", "image"])
def test_an_image_is_probed_before_any_job(tmp_path, torch_python, image_has_torch):
    """An image file (software.container) is asked through apptainer, with the runs' arguments, whether its python
    runs dlbench's backend: one without PyTorch is refused with its key and line before any job. The stand-in
    apptainer (tests/apptainer/) runs exec's command on this host with the "image's" python first on PATH."""
    (tmp_path / "pytorch.sif").write_text("stand-in image\n")
    config = tiny_config(software={"container": {"pytorch": "pytorch.sif"}})
    study = write_config(tmp_path / "study.yaml", config)
    calls = tmp_path / "apptainer-calls.jsonl"
    image_bin = torch_python.parent if image_has_torch else Path(CORE_PYTHON).parent
    env = {
        "PATH": f"{REPO / 'tests' / 'apptainer'}:{os.environ['PATH']}",
        "STANDIN_LOG": str(calls),
        "STANDIN_IMAGE_BIN": str(image_bin),
    }
    result = snakemake(tmp_path, "-n", "--sdm", "apptainer", "--configfile", str(study), env=env)
    probes = [json.loads(line) for line in calls.read_text().splitlines() if "dlbench.harness.probe" in line]
    assert len(probes) == 1 and probes[0][:1] == ["exec"] and "--nv" in probes[0]  # the runs' arguments
    assert probes[0][-4] == "pytorch.sif" and "--bind" in probes[0]
    if image_has_torch:
        assert result.returncode == 0, result.stderr[-3000:]
        assert "dlbench: pytorch runs in pytorch.sif (python_version=" in result.stderr
    else:
        assert result.returncode == 1, result.stderr[-3000:]
        assert "study.yaml, line" in result.stderr and "software.container.pytorch: pytorch.sif's python: " in (
            result.stderr
        )
        assert "cannot import dlbench's pytorch backend: ModuleNotFoundError: No module named 'torch'" in (
            result.stderr
        )
        assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_images_run_through_snakemakes_own_apptainer_support(tmp_path, torch_python):
    """apptainer cannot be installed here: a stand-in (tests/apptainer/apptainer) answers Snakemake and runs the
    command it is given on this host with the "image's" python first on PATH; the command lines are checked."""
    image = "docker://nvcr.io/nvidia/pytorch:25.01-py3"
    study = tiny_config(software={"container": {"pytorch": image}})
    study["defaults"]["repeats"] = 1  # one run per topology: every run's command line is the same form
    config = write_config(tmp_path / "study.yaml", study)
    calls = tmp_path / "apptainer-calls.jsonl"
    env = {
        "PATH": f"{REPO / 'tests' / 'apptainer'}:{os.environ['PATH']}",
        "STANDIN_LOG": str(calls),
        "STANDIN_IMAGE_BIN": str(torch_python.parent),
    }
    result = snakemake(tmp_path, "--cores", "2", "--sdm", "apptainer", "--configfile", str(config), env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [json.loads(line) for line in calls.read_text().splitlines()]
    assert ["pull", "--name"] == lines[1][:2] and lines[1][-1] == image
    runs = [args for args in lines if "exec" in args]
    assert len(runs) == 2  # 2 topologies; aggregate and report run outside any image
    for args in runs:
        assert args[-4].endswith(".simg") and args[-2] == "-c"
        assert "--nv" in args[: args.index(args[-4])]  # the image sees the node's GPUs (profiles/default)
        assert f" PYTHONPATH={REPO / 'workflow'} python -m dlbench.harness --framework pytorch " in args[-1]
    records = pd.read_csv(tmp_path / "results" / "reports" / "v1" / "records.csv")
    assert set(records["status"]) == {"ok"} and set(records["interpreter"]) == {str(torch_python)}
