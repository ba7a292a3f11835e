"""One study, three sources side by side through the real DAG: dlbench's own PyTorch harness, runners (a small
real training script of ours that logs through mlperf_logging's mllog, DLLogger lines and tf_cnn_benchmarks
lines; one of them launched by torchrun on two processes) and imported logs (MLPerf sets and NVIDIA DLLogger
logs: the shared reference logs where present, always logs written by mlperf_logging's own logger)."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from conftest import EXTERNAL_LOGS, REPO, planned_jobs, snakemake, tiny_config, write_config
from dlbench.logformats import external_log_fixtures

pytestmark = pytest.mark.slow  # the fast tier's workflow and runner tests cover these modules


SCRIPT = str(REPO / "tests/runners/train_resnet50.py")


def script_runner(log_format: str, source: str, launcher: str = "none", *extra: str) -> dict:
    prefix = [] if launcher == "torchrun" else ["{python}"]
    return {
        "command": [
            *prefix,
            SCRIPT,
            "--log-format",
            log_format,
            "--batch-size",
            "{batch_size}",
            "--image-size",
            "{image_size}",
            *extra,
        ],
        "format": source,
        "models": ["resnet50"],
        "env": "pytorch",
        "launcher": launcher,
    }


@pytest.fixture(scope="module")
def study(tmp_path_factory, torch_python):
    work = tmp_path_factory.mktemp("sources")
    mlperf_set = work / "archive" / "mlperf_set"
    for i, minutes in enumerate((31.0, 30.0, 29.5, 30.5, 33.0)):
        external_log_fixtures.write_mllog(mlperf_set / f"result_{i}.log", ttt_min=minutes)
    imports = [
        {
            "name": "own_mlperf",
            "format": "mlperf",
            "paths": [str(mlperf_set)],
            "labels": {"framework": "mlperf_archive", "model": "resnet50"},
        }
    ]
    if EXTERNAL_LOGS.is_dir():
        imports += [
            {
                "name": "mlperf_v07",
                "format": "mlperf",
                "paths": [str(EXTERNAL_LOGS / "mllog/v0.7_google_gpu-v100-8_resnet")],
                "labels": {"framework": "tf2_mlperf", "model": "resnet50", "topology": "1x8"},
            },
            {
                "name": "ngc_pytorch_rn50",
                "format": "dllogger",
                "paths": [str(EXTERNAL_LOGS / "dllogger/ngc-pyt-rn50_v100_8gpu_amp_bs256.log")],
                "labels": {
                    "framework": "ngc_pytorch",
                    "model": "resnet50",
                    "topology": "1x8",
                    "batch_size": 256,
                    "precision": "amp",
                    "skip_steps": 8,
                    "statistic": "mean_of_steps",
                },
            },
        ]
    config = tiny_config(
        runners={
            "dll_script": script_runner("dllogger", "dllogger", "torchrun", "--steps", "{steps}"),
            "tfcnn_script": script_runner(
                "tf_cnn", "tf_cnn_benchmarks", "none", "--steps", "{steps}", "--warmup", "{warmup_steps}"
            ),
            "mllog_script": script_runner(
                "mllog", "mlperf", "none", "--steps", "24", "--eval-every", "4", "--target", "0.5"
            ),
        },
        imports=imports,
        include=[
            {
                "framework": "dll_script",
                "model": "resnet50",
                "topology": "1x1",
                "batch_size": 2,
                "compiler": True,
                "repeats": 1,
            },
            # time to quality: a batch of 8 learns the task within the step budget
            {"framework": "mllog_script", "model": "resnet50", "topology": "1x1", "batch_size": 8, "repeats": 1},
        ],
        # one run per source is enough here: dlbench's own runs at 1x2 and repeats are the workflow tests'
        exclude=[{"framework": "tfcnn_script", "topology": "1x2"}, {"framework": "pytorch", "topology": "1x2"}],
    )
    config["defaults"]["repeats"] = 1
    config["matrix"]["framework"] = ["pytorch", "dll_script", "tfcnn_script"]
    configfile = write_config(work / "study.yaml", config)
    result = snakemake(work, "--cores", "2", "--configfile", str(configfile))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    records = pd.read_csv(work / "results/reports/v1/records.csv")
    return work, configfile, records.set_index("run_id", drop=False)


def test_every_source_becomes_records(study):
    _, _, records = study
    by_framework = records.groupby("framework")["source"].agg(set).to_dict()
    assert by_framework["pytorch"] == {"dlbench"}
    assert by_framework["dll_script"] == {"dllogger"}
    assert by_framework["tfcnn_script"] == {"tf_cnn_benchmarks"}
    assert by_framework["mllog_script"] == {"mlperf"}
    assert by_framework["mlperf_archive"] == {"mlperf"}


def test_runner_records_carry_the_run_and_the_tool_figures(study):
    _, _, records = study
    dll = records[(records["framework"] == "dll_script") & (records["status"] == "ok")]
    assert set(dll["topology"]) == {"1x1", "1x2"}  # 1x2: torchrun started two processes (DDP over gloo)
    assert (dll["throughput"] > 0).all() and dll["throughput_reported"].notna().all()
    assert dll["log_path"].str.endswith(".jsonl").all() and dll["external_log"].str.endswith("output.log").all()
    tfcnn = records[records["framework"] == "tfcnn_script"].iloc[0]
    assert tfcnn["status"] == "ok" and tfcnn["throughput"] > 0
    mllog = records[records["framework"] == "mllog_script"].iloc[0]
    assert mllog["time_to_train_min"] > 0 and mllog["benchmark"] == "resnet"
    assert mllog["status"] == "ok" and mllog["eval_accuracy"] >= 0.5  # reached the target within its budget
    compiled = records[(records["framework"] == "dll_script") & records["compiler"]].iloc[0]
    assert compiled["status"] == "unsupported" and "has no flags for compiler compile" in compiled["error"]


def test_report_shows_sources_side_by_side(study):
    work, _, _ = study
    readme = (work / "results/reports/v1/README.md").read_text()
    for framework in ("pytorch", "dll_script", "tfcnn_script"):  # a row each in the throughput tables
        assert re.search(rf"^\| \S+ +\| \d+ +\| {framework} +\| [0-9]", readme, re.MULTILINE), framework
    assert "## Time to train (MLPerf)" in readme
    ttt = {line.split("|")[1].strip(): line for line in readme.splitlines() if "| resnet " in line}
    assert "| 30.500 " in ttt["mlperf_set"]  # olympic mean of 30.0, 30.5, 31.0 (29.5 and 33.0 dropped)
    assert "resnet50/mllog_script/1x1/bs8-fp32-nocompile-synthetic-img32" in ttt  # a runner's repeats: one set
    assert "## What each throughput means" in readme
    if EXTERNAL_LOGS.is_dir():
        assert "| 88.556 " in ttt["v0.7_google_gpu-v100-8_resnet"]  # the v0.7 ResNet set's MLPerf score
        assert "5889.0" in readme  # NVIDIA's published 8-GPU figure, re-derived by the warm-up-skip rule


def test_nothing_to_do_afterwards(study):
    work, configfile, _ = study
    assert planned_jobs(work, configfile) == []
