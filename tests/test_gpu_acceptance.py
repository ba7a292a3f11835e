"""benchmarks/gpu_acceptance.sh on a machine without a GPU: its checker over reports made from fixture run logs,
its stages as study files, and one stage's dry run (the others done already: skipped)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO
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
        ["bash", SCRIPT, "--dry-run", str(torch_python)],
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
