"""The shipped GPU study (workflow/studies/gpu.yaml): valid, and planned as far as a machine without a GPU allows —
through the SLURM profile, where the GPUs are on the nodes, with a site's own interpreter."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import REPO, local_env, snakemake, tiny_config, write_config
from dlbench.plan.interpreters import no_gpu_here
from dlbench.plan.study import load_study

GPU_STUDY = REPO / "workflow" / "studies" / "gpu.yaml"


def test_the_gpu_study_is_the_issue_s_matrix():
    import yaml

    study = load_study(
        yaml.safe_load(GPU_STUDY.read_text()), REPO / "workflow/schemas/config.schema.yaml", REPO / "envs"
    )
    assert study.config["platform"]["device"] == "cuda" and study.config["telemetry"]["enabled"]
    configurations = study.configurations.values()
    assert sorted(c.config_id for c in configurations) == sorted(
        [
            *(
                f"resnet50/pytorch/1x1/bs{bs}-{p}-{c}-synthetic"
                for bs, p in ((256, "amp"), (128, "fp32"))
                for c in ("compile", "nocompile")
            ),
            *(
                f"bert_base/pytorch/1x1/bs128-{p}-{c}-synthetic-seq128-adam-noclip"
                for p in ("amp", "fp32")
                for c in ("compile", "nocompile")
            ),
        ]
    )
    for c in configurations:
        assert c.measured_steps == 100 and c.image_size == 224
        settled = c.model == "bert_base" or c.compiler
        assert c.warmup_steps == ("auto" if settled else 20), c.config_id
        assert c.repeats == (2 if c.compiler else 3)
    assert sum(c.repeats for c in configurations) == 20


@pytest.mark.slow
def test_the_gpu_study_plans_under_slurm_with_the_sites_interpreter(tmp_path, torch_python):
    (tmp_path / "slurm").symlink_to(REPO / "profiles" / "slurm")
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--profile",
        "slurm",
        "-n",
        "-p",
        "--configfile",
        str(GPU_STUDY),
        "--config",
        f"software={{python: {{pytorch: {torch_python}}}}}",
    ]
    result = subprocess.run(cmd, cwd=tmp_path, env=local_env(), capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "sees no GPU here" in result.stderr and "refused when the runs are on this machine" in result.stderr
    assert "rule build_framework_env" not in output  # the site's interpreter: nothing to build
    runs = re.findall(r"rule benchmark_run:.*?resources: (.*?)\n", output, flags=re.S)
    assert len(runs) == 20 and all("gres=gpu:1" in r for r in runs)
    commands = [line for line in output.splitlines() if "-m dlbench.harness " in line]
    assert len(commands) == 20 and all(
        f"{torch_python} -m dlbench.harness" in c and "--device cuda" in c for c in commands
    )
    assert all(c.startswith("Shell command: DLBENCH_INTERPRETER='python_version=") for c in commands)


def test_the_gpu_study_is_refused_on_this_machine_without_a_gpu(tmp_path, torch_python):
    result = snakemake(
        tmp_path,
        "--cores",
        "1",
        "--configfile",
        str(GPU_STUDY),
        "--config",
        f"software={{python: {{pytorch: {torch_python}}}}}",
    )
    assert result.returncode == 1
    assert "dlbench: invalid configuration:" in result.stderr and "platform.device is cuda but" in result.stderr
    assert not (tmp_path / "logs").exists()  # refused before any job


def cuda_study(tmp_path):
    config = tiny_config(platform={"device": "cuda"}, telemetry={"enabled": False})
    config["defaults"]["repeats"] = 1
    config["matrix"]["topology"] = ["1x1"]
    return write_config(tmp_path / "cuda.yaml", config)


NO_GPU = re.compile(
    r"cuda\.yaml, line \d+: platform\.device: cuda, but this machine has no GPU \((.*)\): every run of pytorch"
)


@pytest.mark.slow
def test_cuda_with_the_built_environments_is_refused_here_and_planned_under_slurm(tmp_path):
    """No study interpreter to ask: the machine is asked (NVML, as telemetry does), without importing a framework."""
    if no_gpu_here() is None:
        pytest.skip("this machine has a GPU")
    result = snakemake(tmp_path, "--cores", "1", "--configfile", str(cuda_study(tmp_path)))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "dlbench: invalid configuration:" in result.stderr and NO_GPU.search(result.stderr), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists() and not (tmp_path / "results").exists()  # refused before any job

    (tmp_path / "slurm").symlink_to(REPO / "profiles" / "slurm")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--profile", "slurm", "-n"]
    cmd += ["--configfile", str(tmp_path / "cuda.yaml")]
    result = subprocess.run(cmd, cwd=tmp_path, env=local_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert NO_GPU.search(result.stderr) and "refused when the runs are on this machine" in result.stderr
    assert re.search(r"rule benchmark_run:.*?resources: .*gres=gpu:1", result.stdout, flags=re.S)


def test_a_hidden_gpu_is_no_gpu(monkeypatch):
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert no_gpu_here() == f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU"
