"""Which Python a rule's command runs dlbench with, and what a job waits for first (dlbench.plan.software): each way a
study brings its software, and the shell words run for real."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from dlbench.harness.spec import INTERPRETER_ENV
from dlbench.plan.interpreters import Interpreter
from dlbench.plan.software import ShellWord, Software
from dlbench.venvs import MARKER, env_prefix

ENVS = REPO / "envs"
CORE = sys.executable
SITE = {"pytorch": "/opt/site/bin/python"}
IMAGES = {"jax": "docker://example/jax:1"}
RUNNERS = {
    "dle_resnet50": {"env": "pytorch", "command": ["main.py"]},
    "tool": {"env": "core", "command": ["tool.py"]},
    "own": {"env": "pytorch", "python": "/usr/local/bin/python3", "command": ["x.py"]},
}
FACTS = {"python_version": "3.11.9", "framework_version": "2.13.0", "cuda": None, "cudnn": None, "nccl": None}


def software(
    tmp_path: Path, use_conda: bool = False, interpreters: dict | None = None, package_dir: str = ""
) -> Software:
    return Software(
        package_dir or str(REPO / "workflow"),
        ENVS,
        tmp_path / "venvs",
        CORE,
        use_conda,
        SITE,
        IMAGES,
        RUNNERS,
        interpreters or {},
    )


def built(tmp_path: Path, env: str) -> Path:
    return env_prefix(tmp_path / "venvs", ENVS / f"{env}.yaml")


def test_each_framework_runs_with_its_python(tmp_path):
    plain = software(tmp_path)
    assert plain.framework_python("tensorflow") == str(built(tmp_path, "tensorflow") / "bin" / "python")
    assert plain.framework_python("dataprep") == str(built(tmp_path, "dataprep") / "bin" / "python")
    assert plain.framework_python("core") == CORE
    assert plain.framework_python("pytorch") == "/opt/site/bin/python"  # software.python, not probed (a job's)
    assert plain.framework_python("jax") == "python"  # the image's
    assert plain.framework_python("dle_resnet50") == str(built(tmp_path, "pytorch") / "bin" / "python")
    assert plain.framework_python("tool") == CORE
    assert plain.framework_python("own") == "/usr/local/bin/python3"
    probed = software(tmp_path, interpreters={"pytorch": Interpreter("pytorch", "/opt/site/python3.11", FACTS)})
    assert probed.framework_python("pytorch") == "/opt/site/python3.11"  # as probed (a command name: its path)
    conda = software(tmp_path, use_conda=True)
    assert conda.framework_python("tensorflow") == conda.framework_python("dle_resnet50") == "python"
    assert conda.framework_python("core") == CORE and conda.framework_python("pytorch") == "/opt/site/bin/python"


def test_what_a_run_waits_for(tmp_path):
    plain = software(tmp_path)
    marker = str(built(tmp_path, "tensorflow") / MARKER)
    assert plain.env_marker("tensorflow") == marker
    assert plain.run_env_input("tensorflow") == marker
    assert plain.run_env_input("dle_resnet50") == str(built(tmp_path, "pytorch") / MARKER)  # its `env`
    for own in ("pytorch", "jax", "tool", "own"):  # a study's interpreter or image, the core environment
        assert plain.run_env_input(own) == []
    assert software(tmp_path, use_conda=True).run_env_input("tensorflow") == []
    frameworks = ["jax", "pytorch", "tensorflow", "dle_resnet50", "tool", "mxnet", "tensorflow"]
    assert plain.study_env_markers(frameworks) == [
        str(built(tmp_path, env) / MARKER) for env in ("mxnet", "pytorch", "tensorflow")
    ]
    assert software(tmp_path, use_conda=True).study_env_markers(frameworks) == []
    assert plain.run_conda_env("tensorflow") == str(ENVS / "tensorflow.yaml")
    assert plain.run_conda_env("dle_resnet50") == str(ENVS / "pytorch.yaml")
    assert plain.run_conda_env("pytorch") is None and plain.run_conda_env("jax") is None
    assert plain.env_spec("dataprep") == ENVS / "dataprep.yaml"


def test_each_build_of_a_framework_runs_with_its_own_software(tmp_path):
    """A build's environment file, interpreter, image or variables: its runs' words and inputs, and those of the
    default build unchanged; the words run for real (the variables reach the process)."""
    env_file = tmp_path / "pytorch_old.yaml"
    env_file.write_text((ENVS / "pytorch.yaml").read_text().replace("torch==", "torch<"))
    builds = {
        "old": {"pytorch": {"env": str(env_file)}},
        "site": {"pytorch": {"python": "/opt/other/bin/python"}, "tensorflow": {"container": "docker://x/tf:2"}},
        "slow": {"tensorflow": {"variables": {"TF_ENABLE_ONEDNN_OPTS": 0, "NOTE": "a b"}}},
    }
    plain = Software(str(REPO / "workflow"), ENVS, tmp_path / "venvs", CORE, False, {}, {}, {}, {}, builds)
    old = env_prefix(tmp_path / "venvs", env_file)
    assert plain.env_spec("pytorch_old") == env_file and plain.run_env("pytorch", "old") == "pytorch_old"
    assert plain.framework_python("pytorch", "old") == str(old / "bin" / "python")
    assert plain.run_env_input("pytorch", "old") == str(old / MARKER)
    assert plain.run_conda_env("pytorch", "old") == str(env_file)
    assert plain.framework_python("pytorch", "site") == "/opt/other/bin/python"
    assert plain.run_env_input("pytorch", "site") == [] and plain.run_conda_env("pytorch", "site") is None
    assert plain.container("tensorflow", "site") == "docker://x/tf:2" and plain.container("tensorflow") is None
    assert plain.uses_images() and not software(tmp_path).builds and software(tmp_path).uses_images()  # IMAGES
    assert plain.framework_python("tensorflow", "slow") == plain.framework_python("tensorflow")
    assert plain.run_env_input("tensorflow", "slow") == plain.run_env_input("tensorflow")
    words = plain.run_module("tensorflow", "dlbench.plan.configfile", "slow")
    assert words.startswith("NOTE='a b' TF_ENABLE_ONEDNN_OPTS=0 PYTHONPATH=")
    assert plain.run_module("tensorflow", "dlbench.plan.configfile") == words.split(" ", 3)[3]
    here = Software(
        str(REPO / "workflow"),
        ENVS,
        tmp_path,
        CORE,
        False,
        {},
        {},
        {},
        {},
        {"v": {"pytorch": {"python": CORE, "variables": {"NOTE": "a b; c", "PYTHONPATH": str(tmp_path / "site")}}}},
    )
    code = "import os, sys, dlbench; print(os.environ['NOTE']); print(':'.join(sys.path[1:3]))"
    shown = subprocess.run(
        [
            "bash",
            "-c",
            here.run_module("pytorch", "dlbench.preflight", "v").replace("-m dlbench.preflight", f'-c "{code}"'),
        ],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    # the build's PYTHONPATH takes effect after dlbench's own package (which still imports)
    assert shown.stdout.split("\n")[:2] == ["a b; c", f"{REPO / 'workflow'}:{tmp_path / 'site'}"], shown.stderr
    probed = Interpreter("pytorch", "/opt/other/python3.12", FACTS)
    site = Software(str(REPO / "workflow"), ENVS, tmp_path, CORE, False, {}, {}, {}, {"pytorch/site": probed}, builds)
    assert site.run_module("pytorch", "m", "site").startswith(f"{INTERPRETER_ENV}='{probed.identity}' ")
    assert INTERPRETER_ENV not in site.run_module("pytorch", "m")


def test_the_shell_words_run_as_one_command_whatever_the_paths(tmp_path):
    """A workflow directory with a space, an interpreter's identity with `;`: one command, run for real."""
    workflow = tmp_path / "my workflow"
    workflow.symlink_to(REPO / "workflow")
    (tmp_path / "study.yaml").write_text("study: x\nmatrix: {framework: [pytorch]}\n")
    identity = Interpreter("pytorch", CORE, FACTS).identity
    assert ";" in identity
    words = software(
        tmp_path, interpreters={"pytorch": Interpreter("pytorch", CORE, FACTS)}, package_dir=str(workflow)
    ).run_module("pytorch", "dlbench.plan.configfile")
    assert words == f"{INTERPRETER_ENV}='{identity}' PYTHONPATH='{workflow}' {CORE} -m dlbench.plan.configfile"
    assert shlex.split(words)[:2] == [f"{INTERPRETER_ENV}={identity}", f"PYTHONPATH={workflow}"]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        ["bash", "-c", f"{words} study.yaml"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (result.returncode, result.stdout) == (0, "study.yaml: ok\n"), result.stderr
    core = software(tmp_path).run_module("core", "dlbench.plan.configfile")
    assert core == f"PYTHONPATH={REPO / 'workflow'} {CORE} -m dlbench.plan.configfile"


@pytest.mark.parametrize("path", ["plain/dir", "with space", "it's", "a;rm -rf x", "$(touch pwned)"])
def test_a_shell_word_is_one_word_never_run(tmp_path, path):
    result = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {ShellWord(path)}"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.stdout == f"{path}\n"
    assert not (tmp_path / "pwned").exists()
    assert ShellWord(Path(path)).value == str(Path(path))


def test_two_builders_of_one_environment_build_it_once(tmp_path):
    """Studies (and test workers) sharing a venv_dir: the second builder waits for the first and uses its
    environment, instead of removing it from under the runs that already use it."""
    spec = tmp_path / "tiny.yaml"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    spec.write_text(f"name: tiny\ndependencies:\n  - python={version}\n  - pip\n  - pip:\n      - six==1.17.0\n")
    command = [sys.executable, "-m", "dlbench.venvs", "build", "--spec", str(spec), "--venv-dir", str(tmp_path / "v")]
    env = dict(os.environ, PYTHONPATH=str(REPO / "workflow"))
    builders = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    said = sorted(b.communicate(timeout=300)[0].splitlines()[-1] for b in builders)
    assert [b.returncode for b in builders] == [0, 0]
    prefix = env_prefix(tmp_path / "v", spec)
    assert said[0] == f"{prefix} is up to date" and said[1].startswith(f"built {prefix} in "), said
    assert json.loads((prefix / MARKER).read_text())["requirements"] == ["six==1.17.0"]
    # Snakemake removes a build job's output (the marker) before it runs: the complete environment is kept
    (prefix / MARKER).unlink()
    python_made = (prefix / "bin" / "python").lstat().st_mtime_ns
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=True)
    assert again.stdout.splitlines()[-1] == f"{prefix} is up to date"
    assert (prefix / MARKER).exists() and (prefix / "bin" / "python").lstat().st_mtime_ns == python_made
