"""The whole DAG on a tiny real study, then what reruns when the study changes."""

from __future__ import annotations

import base64
import json
import re
import shutil
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, planned_jobs, read_log, run_harness, snakemake, tiny_config, write_config

RUN = "results/runs/resnet50/pytorch/{}/bs2-fp32-nocompile-synthetic-img32/rep{}.jsonl"


@pytest.fixture(scope="module")
def study(tmp_path_factory, torch_python):
    """A finished tiny study: 2 topologies x 2 repeats, run by Snakemake for real."""
    work = tmp_path_factory.mktemp("study")
    config = write_config(work / "study.yaml", tiny_config())
    result = snakemake(work, "--cores", "2", "--configfile", str(config))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return work, result


def rules(jobs):
    return Counter(rule for rule, _ in jobs)


def test_end_to_end_report(study):
    work, result = study
    reports = work / "results" / "reports"
    assert (reports / "v1" / "index.html").exists()
    assert (reports / "latest").resolve() == (reports / "v1").resolve()
    assert "dlbench: report v1: results/reports/v1/index.html" in result.stdout + result.stderr
    records = pd.read_csv(reports / "v1" / "records.csv")
    assert len(records) == 4 and set(records["status"]) == {"ok"}
    assert (records["throughput"] > 0).all()
    summary = pd.read_csv(reports / "v1" / "summary.csv").set_index("topology")
    assert summary.loc["1x1", "speedup"] == pytest.approx(1.0)
    assert summary.loc["1x2", "efficiency"] == pytest.approx(summary.loc["1x2", "speedup"] / 2)
    html = (reports / "v1" / "index.html").read_text()
    assert "32x32 pixels, not 224x224" in html
    env = json.loads((reports / "v1" / "environment.json").read_text())
    assert any(p.startswith("torch==2.13.0") for p in env["frameworks"]["pytorch"]["packages"])


def embedded_pages(text: str) -> list[str]:
    """The HTML pages a Snakemake report carries as data: URIs (its embedded results)."""
    return [
        base64.b64decode(data).decode("utf-8", "replace")
        for data in re.findall(r"data:text/html;(?:[^;,\"']+;)*base64,([A-Za-z0-9+/=]+)", text.replace("\\/", "/"))
    ]


def assert_self_contained(page: str, published: Path) -> None:
    """Every plot and data file the published page links to is inside the page, byte for byte."""
    assert "training throughput report" in page
    relative = re.findall(r'(?:src|href)="(?!data:|#|https?:)([^"]+)"', page)
    assert relative == [], relative
    linked = re.findall(r'(?:src|href)="([A-Za-z0-9_.-]+)"', (published / "index.html").read_text())
    assert {"throughput.png", "speedup.png", "records.csv", "summary.csv", "environment.json"} <= set(linked)
    for name in linked:
        data = (published / name).read_bytes()
        assert base64.b64encode(data).decode() in page, name


def test_snakemakes_report_carries_the_dlbench_page_intact(study):
    """snakemake --report (zip and single HTML): the embedded dlbench page carries its plots and data files, and the
    captions say what the page shows (confidence intervals, not an IQR)."""
    work, _ = study
    published = work / "results/reports/v1"
    result = snakemake(work, "--report", "report.zip", "--configfile", str(work / "study.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    with zipfile.ZipFile(work / "report.zip") as archive:
        pages = [archive.read(n).decode() for n in archive.namelist() if n.endswith("/index.html")]
        main = next(archive.read(n).decode() for n in archive.namelist() if n.endswith("report.html"))
    assert len(pages) == 1
    assert_self_contained(pages[0], published)
    result = snakemake(work, "--report", "report.html", "--configfile", str(work / "study.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    html = (work / "report.html").read_text()
    pages = [p for p in embedded_pages(html) if "training throughput report" in p]
    assert len(pages) == 1
    assert_self_contained(pages[0], published)
    for text in (main, html):
        assert "confidence interval" in text and "median throughput with its IQR" not in text


def test_nothing_to_do_after_a_complete_run(study):
    work, _ = study
    assert planned_jobs(work, work / "study.yaml") == []


def test_changing_one_configuration_reruns_only_it(study):
    work, _ = study
    config = tiny_config(overrides=[{"match": {"topology": "1x2"}, "set": {"measured_steps": 3}}])
    jobs = planned_jobs(work, write_config(work / "changed.yaml", config))
    assert sorted(out for rule, out in jobs if rule == "benchmark_run") == [RUN.format("1x2", 1), RUN.format("1x2", 2)]
    assert rules(jobs) == {"benchmark_run": 2, "aggregate": 1, "report": 1, "all": 1}


def test_changing_one_batch_size_reruns_only_it(study):
    work, _ = study
    config = tiny_config(
        exclude=[{"topology": "1x2"}],
        include=[{"framework": "pytorch", "model": "resnet50", "topology": "1x2", "batch_size": 3}],
    )
    jobs = planned_jobs(work, write_config(work / "bs.yaml", config))
    runs = sorted(out for rule, out in jobs if rule == "benchmark_run")
    assert runs == [RUN.format("1x2", r).replace("bs2-", "bs3-") for r in (1, 2)]
    assert rules(jobs)["benchmark_run"] == 2


def test_adding_a_configuration_runs_only_it(study):
    work, _ = study
    config = tiny_config(
        include=[{"framework": "pytorch", "model": "resnet50", "topology": "1x1", "batch_size": 2, "precision": "amp"}]
    )
    jobs = planned_jobs(work, write_config(work / "added.yaml", config))
    runs = sorted(out for rule, out in jobs if rule == "benchmark_run")
    assert runs == [RUN.format("1x1", r).replace("-fp32-", "-amp-") for r in (1, 2)]


def test_adding_a_strategy_runs_only_its_configurations(study):
    """matrix.strategy gains a value: the auto runs keep their ids and command lines (nothing of them reruns), the
    new strategy's configurations run (at 1x1 too, where they end as unsupported records)."""
    work, _ = study
    config = tiny_config()
    config["matrix"]["strategy"] = {"pytorch": ["auto", "ddp_fp16"]}
    jobs = planned_jobs(work, write_config(work / "strategy.yaml", config))
    runs = sorted(out for rule, out in jobs if rule == "benchmark_run")
    assert runs == sorted(
        RUN.format(t, r).replace("-img32/", "-img32-via_ddp_fp16/") for t in ("1x1", "1x2") for r in (1, 2)
    )
    assert rules(jobs) == {"benchmark_run": 4, "aggregate": 1, "report": 1, "all": 1}


def test_removing_a_configuration_reruns_only_aggregate_and_report(study):
    work, _ = study
    config = tiny_config()
    config["matrix"]["topology"] = ["1x1"]
    jobs = planned_jobs(work, write_config(work / "removed.yaml", config))
    assert rules(jobs) == {"aggregate": 1, "report": 1, "all": 1}


def test_a_dry_runs_reason_names_the_changed_setting_only(study):
    """The aggregate job's reason for rerunning names the setting that changed, not the whole configuration."""
    work, _ = study
    config = tiny_config()
    config["report"] = {"confidence": 0.9}
    result = snakemake(work, "-n", "--configfile", str(write_config(work / "confidence.yaml", config)))
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    reasons = [line for line in output.splitlines() if "Params have changed" in line]
    assert len(reasons) == 1, output[-3000:]
    assert "before: ('report.confidence', 0.95)" in reasons[0] and "now: ('report.confidence', 0.9)" in reasons[0]
    assert "matrix" not in reasons[0] and len(reasons[0]) < 300, reasons[0]
    assert len(output) < 6000, output  # a screen for these 4 runs, not 17 KB of configuration


def test_more_repeats_run_only_the_new_ones(study):
    work, _ = study
    config = tiny_config()
    config["defaults"]["repeats"] = 3
    jobs = planned_jobs(work, write_config(work / "repeats.yaml", config))
    assert sorted(out for rule, out in jobs if rule == "benchmark_run") == [RUN.format("1x1", 3), RUN.format("1x2", 3)]


@pytest.mark.slow
def test_changed_environment_spec_rebuilds_env_and_reruns_its_runs(study, tmp_path):
    work, _ = study
    copy = tmp_path / "checkout"
    copy.mkdir()
    for name in ("Snakefile", "workflow", "envs", "profiles"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, copy / name)
    spec = copy / "envs" / "pytorch.yaml"
    spec.write_text(spec.read_text() + "# changed\n")
    jobs = planned_jobs(work, work / "study.yaml", snakefile=copy / "Snakefile")
    assert rules(jobs) == {"build_framework_env": 1, "benchmark_run": 4, "aggregate": 1, "report": 1, "all": 1}


@pytest.mark.slow
def test_new_results_publish_a_new_version_and_never_overwrite(study):
    work, _ = study
    v1_index = (work / "results/reports/v1/index.html").read_bytes()
    # A fixed version name that already exists, with new results to publish: refused before any job.
    config = tiny_config(
        report={"version": "v1"}, overrides=[{"match": {"topology": "1x1"}, "set": {"measured_steps": 3}}]
    )
    result = snakemake(work, "--cores", "2", "--configfile", str(write_config(work / "clash.yaml", config)))
    assert result.returncode != 0
    assert "report.version: 'v1' is published already (results/reports/v1)" in result.stdout + result.stderr
    assert "Finished jobid" not in result.stdout + result.stderr  # no job ran
    assert (work / "results/reports/v1/index.html").read_bytes() == v1_index
    assert json.loads((work / RUN.format("1x1", 1)).read_text().splitlines()[0])["config"]["measured_steps"] == 2
    # With the default 'auto' the same results become v2; v1 is untouched.
    config["report"] = {"version": "auto"}
    result = snakemake(work, "--cores", "2", "--configfile", str(write_config(work / "auto.yaml", config)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((work / RUN.format("1x1", 1)).read_text().splitlines()[0])["config"]["measured_steps"] == 3
    assert (work / "results/reports/latest").resolve().name == "v2"
    assert (work / "results/reports/v1/index.html").read_bytes() == v1_index


def real_data_config(work) -> dict:
    """MXNet (its real-data pipelines read DALI and HDF5) on real ImageNet and BERT samples made by the DAG."""
    return tiny_config(
        defaults={"repeats": 1, "warmup_steps": 1, "measured_steps": 2, "image_size": 32, "timeout_minutes": 10},
        matrix={
            "framework": ["mxnet"],
            "model": ["resnet50", "bert_tiny"],
            "topology": ["1x1"],
            "data": ["real"],
            "batch_size": [2],
        },
        datasets={
            "imagenet": {
                "sample": {"classes": 3, "train_per_class": 6, "validation_per_class": 2},
                "train_shards": 2,
                "validation_shards": 1,
            },
            "bert": {"dupe_factor": 1, "shards": 2, "jobs": 2},
        },
    )


@pytest.mark.slow
def test_real_data_is_prepared_verified_and_read(tmp_path):
    """From the PyPI wheels to a report: sample trees, shards in groups, verification, real-data runs."""
    config = write_config(tmp_path / "real.yaml", real_data_config(tmp_path))
    result = snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    imagenet = json.loads((tmp_path / "results/data/imagenet/manifest.json").read_text())
    assert [s["file"] for s in imagenet["splits"]["train"]["shards"]] == [
        "train-00000-of-00002",
        "train-00001-of-00002",
    ]
    assert (tmp_path / "results/data/bert/seq128/verified.txt").exists()
    assert len(list((tmp_path / "results/data/bert/seq128").glob("manifest.group-*-of-00002.json"))) == 2
    records = pd.read_csv(tmp_path / "results/reports/v1/records.csv")
    assert set(records["data"]) == {"real"} and set(records["status"]) == {"ok"}, records[["config_id", "error"]]
    assert set(records["model"]) == {"resnet50", "bert_tiny"}
    # A complete run leaves nothing to do, data preparation included.
    assert planned_jobs(tmp_path, config) == []

    # A shard truncated after verification: a run stops before reading it, naming the file and the record.
    shard = tmp_path / "results/data/imagenet/train-00001-of-00002"
    shard.write_bytes(shard.read_bytes()[:-100])
    log = tmp_path / "after-change.jsonl"
    run_harness(
        Path(sys.executable),
        log,
        "--topology",
        "1x1",
        "--batch-size",
        "2",
        "--data",
        "real",
        "--data-dir",
        str(shard.parent),
        "--image-size",
        "32",
        "--device",
        "cpu",
    )
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "error", summary
    assert f"{shard}: changed after verification" in summary["error"]
    assert "is the first that does not frame" in summary["error"]
