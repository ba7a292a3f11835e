"""benchmarks/gpu_acceptance.sh on a machine without a GPU: its checker over reports made from fixture run logs,
the check rehearsed on this CPU end to end (setup from a wheelhouse without a network, every run, the report, the
table), the full acceptance's stages as study files and one stage's dry run (the others done already: skipped)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, env_python
from dlbench.collect import aggregate
from dlbench.logformats.run_log_fixtures import write_run_log
from dlbench.plan.study import load_study

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_acceptance  # noqa: E402

SCRIPT = REPO / "benchmarks" / "gpu_acceptance.sh"
STAGES = ["eager-resnet50", "eager-bert_base"] + [
    f"compiled-{m}-{p}" for m in ("resnet50", "bert_base") for p in ("amp", "fp32")
]


def report(tmp_path: Path, records: pd.DataFrame) -> Path:
    """A report directory as the workflow writes it (summary.csv and records.csv, read back by the checker)."""
    directory = tmp_path / "report"
    directory.mkdir()
    records.to_csv(directory / "records.csv", index=False)
    aggregate.summarise(records).to_csv(directory / "summary.csv", index=False)
    return directory


def test_a_warmup_that_hit_its_limit_fails_the_check(tmp_path, capsys):
    logs = [str(write_run_log(tmp_path / f"rep{r}.jsonl", repeat=r)) for r in (1, 2)]
    records = aggregate.records_frame(logs)
    records["warmup_stable"] = [True, False]  # the second run's automatic warm-up stopped at max_warmup_steps
    assert gpu_acceptance.main(["--report", str(report(tmp_path, records))]) == 1
    out = capsys.readouterr().out
    assert "1 run(s) hit the warm-up limit (max_warmup_steps) before settling" in out, out


def test_a_failed_run_without_an_error_text_prints_no_nan(tmp_path, capsys):
    logs = [
        str(write_run_log(tmp_path / "rep1.jsonl", repeat=1)),
        str(write_run_log(tmp_path / "rep2.jsonl", repeat=2, status="oom", throughput=None)),
    ]
    assert gpu_acceptance.main(["--report", str(report(tmp_path, aggregate.records_frame(logs)))]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 runs not ok (" in out and "nan" not in out, out


def test_the_stages_cover_the_gpu_study_once():
    study = yaml.safe_load(gpu_acceptance.GPU_STUDY.read_text())

    def ids(config: dict) -> list[str]:
        loaded = load_study(config, REPO / "workflow/schemas/config.schema.yaml", REPO / "envs")
        return [c.config_id for c in loaded.configurations.values()]

    staged = [config_id for stage in STAGES for config_id in ids(gpu_acceptance.stage_study(study, stage))]
    assert sorted(staged) == sorted(ids(study)) == sorted(ids(gpu_acceptance.stage_study(study, "checks")))


def test_an_mfu_outside_the_band_fails_and_the_plausible_range_is_printed(tmp_path, capsys):
    """A GPU report whose ResNet-50 MFU is far over what training reaches (a clock that stopped early): failed,
    and the table prints the throughput range the band gives on that device."""
    logs = [str(write_run_log(tmp_path / "rep1.jsonl", repeat=1))]
    summary = aggregate.summarise(aggregate.records_frame(logs))
    summary["mfu"], summary["energy_per_sample_j"], summary["peak_memory_gb"] = 0.9, 0.5, 10.0
    directory = report(tmp_path, aggregate.records_frame(logs))
    summary.to_csv(directory / "summary.csv", index=False)
    assert gpu_acceptance.main(["--report", str(directory)]) == 1
    out = capsys.readouterr().out
    low, high = gpu_acceptance.PLAUSIBLE_MFU["resnet"]
    assert f"MFU 90.0% outside {low:.0%}-{high:.0%}" in out, out
    median = summary["median"].iloc[0]
    assert f"{median * low / 0.9:,.0f}-{median * high / 0.9:,.0f}" in out, out


def test_the_cpu_rehearsal_keeps_every_configuration_on_its_tiny_model():
    study = yaml.safe_load(gpu_acceptance.CHECK_STUDY.read_text())

    def shapes(config: dict) -> list[tuple[str, str, bool]]:
        loaded = load_study(config, REPO / "workflow/schemas/config.schema.yaml", REPO / "envs")
        return sorted((c.framework, c.model, c.compiler) for c in loaded.configurations.values())

    tiny = {model: tiny for model, tiny in gpu_acceptance.CPU_MODELS.items()}
    expected = sorted((framework, tiny[model], compiler) for framework, model, compiler in shapes(study))
    assert shapes(gpu_acceptance.cpu_rehearsal(study)) == expected
    assert len(expected) == 5 and {model for _, model, _ in expected} == set(tiny.values())


@pytest.mark.slow
def test_the_check_rehearsed_on_this_cpu_without_a_network(tmp_path):
    """The command a lent GPU node runs, on this CPU: a lean wheelhouse for this Python with the PyTorch
    environment's packages as --have (that interpreter stands for the node's), then, in a network namespace without
    routes, the setup over that interpreter, the five configurations on their tiny models through Snakemake with the
    study's interpreters (no framework environment built, no uv), the report and the table."""
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode:
        pytest.skip("needs unshare --net (root)")
    torch_python, jax_python = env_python("pytorch"), env_python("jax")
    have = tmp_path / "have.txt"
    uv = REPO / ".venv" / "bin" / "uv"
    have.write_text(
        subprocess.run(
            [uv, "pip", "freeze", "--python", torch_python], capture_output=True, text=True, check=True
        ).stdout
    )
    house = tmp_path / "house"
    fill = subprocess.run(
        ["bash", SCRIPT, "--fill", house, "--have", have, "--lean"],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert fill.returncode == 0, fill.stdout[-3000:] + fill.stderr[-3000:]
    assert not list(house.glob("uv-*.whl")) and not list(house.glob("torch-*.whl"))
    work = tmp_path / "work"
    command = f"bash {SCRIPT} --cpu {house} {torch_python} --python jax={jax_python}"
    result = subprocess.run(
        ["unshare", "--net", "bash", "-c", command],
        env=dict(os.environ, ACCEPTANCE_WORKDIR=str(work)),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert "5 of 5 configurations pass" in result.stdout, result.stdout
    assert f"interpreter {jax_python}" in result.stdout and f"interpreter {torch_python}" in result.stdout
    assert "core environment, taken from the interpreter's site-packages: " in result.stdout
    assert "optional uv==" in result.stderr and "left out" in result.stderr
    assert not (work / ".venvs").exists(), "no framework environment is built for a study naming its interpreters"
    assert (work / "results" / "gpu_acceptance" / "check.txt").read_text().startswith("device: ")
    rows = [
        line
        for line in result.stdout.splitlines()
        if line.startswith(("pytorch ", "jax ")) and ": interpreter " not in line
    ]
    assert len(rows) == 5 and all(line.endswith(" ok") for line in rows), rows
    # That core environment has no uv: a study that would build a framework environment is refused before any job.
    build = subprocess.run(
        [work / ".venv/bin/snakemake", "-n", "--cores", "1", "--configfile", "results/gpu_acceptance/check.yaml"],
        cwd=work,
        env=dict(os.environ, PATH="/usr/bin:/bin"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 1, build.stdout[-2000:] + build.stderr[-3000:]
    assert re.search(r"dlbench: cannot build jax-\w+, pytorch-\w+: uv is not installed", build.stderr), build.stderr


@pytest.mark.slow
def test_a_stage_done_before_is_skipped_and_results_is_made(tmp_path):
    """The dry path (snakemake -n on the CPU): only the stage not marked done runs; results/ did not exist."""
    out = tmp_path / "results" / "gpu_acceptance" / "dry"
    out.mkdir(parents=True)
    for stage in ["setup", *STAGES[:-1]]:
        (out / f"{stage}.done").touch()
    (out / "checks.done").touch()
    torch_python = next(REPO.glob(".venvs/pytorch-*/bin/python"))
    result = subprocess.run(
        ["bash", SCRIPT, "--full", "--dry-run", str(torch_python)],
        env=dict(os.environ, ACCEPTANCE_WORKDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "== eager-resnet50: done before" in result.stderr
    assert f"== {STAGES[-1]}\n" in result.stderr and "stage compiled-bert_base-fp32: " in result.stdout
    assert (out / f"{STAGES[-1]}.done").exists()
    assert re.search(r"benchmark_run\s+2\b", result.stdout + result.stderr)
