"""batch_size: max. The search (harness/batchsearch.py) finds the largest batch size that trains under a real
memory budget in each framework, every probe a real harness run; a probe that fails otherwise stops it; the
workflow runs it as a checkpoint and reports the runs at the size found as "max (N)"."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import (
    REPO,
    env_python,
    planned_jobs,
    read_log,
    run_env,
    run_harness,
    snakemake,
    tiny_config,
    write_config,
)

sys.path.insert(0, str(REPO / "workflow"))
from test_contract_framework import CASES  # noqa: E402 - the frameworks' memory budgets

from dlbench.harness.batchsearch import search  # noqa: E402
from dlbench.plan.configfile import load_study_files  # noqa: E402

# BERT-Tiny at 128 tokens: its masked-LM logits alone take 2.4 MB a sequence. Probes try multiples of 32.
PROBE = ["--model", "bert_tiny", "--topology", "1x1", "--seq-length", "128", "--device", "cpu"]
MULTIPLE = 32
# Budgets placed halfway between two multiples, from the address space a rank added under such limits here
# (MiB; sequences: MiB): PyTorch 16: 441, 32: 638, 48: 801, 64: ~1030; MXNet 16: 928, 32: 1279, 48: 1456. A multiple
# of 32 sequences is 300-500 MiB there, far above the 1-2% by which identical runs differ, so the size found and
# the next multiple are each clear of the limit. TensorFlow with oneDNN grows its address space in
# large steps: 977 MiB added at 32 sequences, 1506 at both 64 and 96 without a limit; under 1.25 GiB, 64 and 96
# each trained in some runs and ran out in others. At 1.1 GiB, 32 trains (150 MiB spare) and 64 fails at once.
# Every budget lies between 32 and 64 sequences (the framework contract, tests/test_contract_framework.py, holds
# them and checks in every framework that 32 trains and 64 is oom under its budget); the real search here is
# PyTorch's: two probes (32 ok, 64 oom), the bisection after the doubling is the same search() as the arithmetic
# tests above run with every threshold. PyTorch at 0.8 GiB (819 MiB): 32 added 638-654 MiB, 64 977-1030 MiB.
BUDGET_GB = CASES["pytorch"].memory_budget.budget_gb


# ------------------------------------------------------------------------------------------ the arithmetic
def threshold_probe(largest: int, stop_at: dict[int, str] | None = None):
    """A probe of a device where every size up to `largest` fits (and `stop_at` sizes end another way)."""

    def probe(size: int) -> dict:
        status = (stop_at or {}).get(size) or ("ok" if size <= largest else "oom")
        return {"batch_size": size, "status": status, "error": "" if status in ("ok", "oom") else "broken"}

    return probe


@pytest.mark.parametrize("multiple", [1, 8, 16])
def test_doubling_then_bisection_finds_the_largest_multiple_that_fits(multiple):
    for largest in range(1, 400, 7):
        result = search(threshold_probe(largest), multiple, cap=None)
        expected = largest - largest % multiple
        sizes = [p["batch_size"] for p in result["probes"]]
        if expected == 0:
            assert result["status"] == "oom" and result["batch_size"] is None and sizes == [multiple]
            continue
        assert result["status"] == "ok" and result["batch_size"] == expected, (largest, sizes)
        assert all(s % multiple == 0 for s in sizes) and len(set(sizes)) == len(sizes)
        assert expected + multiple in sizes  # the first size that does not fit was seen to fail
        # Doubling up to the first failure, then one probe per halving of the interval.
        assert len(sizes) <= 2 * (largest // multiple).bit_length() + 2


def test_the_cap_ends_the_search_where_memory_does_not():
    result = search(threshold_probe(10_000), 8, cap=100)
    assert result["status"] == "ok" and result["batch_size"] == 96 and result["capped"]
    assert [p["batch_size"] for p in result["probes"]] == [8, 16, 32, 64, 96]
    result = search(threshold_probe(70), 8, cap=100)
    assert result["batch_size"] == 64 and not result["capped"]


@pytest.mark.parametrize("status", ["error", "timeout", "unsupported"])
def test_a_probe_that_fails_otherwise_stops_the_search_without_a_max(status):
    result = search(threshold_probe(50, stop_at={48: status}), 16, cap=None)
    assert result["status"] == status and result["batch_size"] is None
    assert [p["batch_size"] for p in result["probes"]] == [16, 32, 64, 48]
    assert "48" in result["reason"] and "broken" in result["reason"]


# ------------------------------------------------------------------------------- real searches, real OOM
def run_search(python: Path, out: Path, framework: str, *extra: str) -> dict:
    run_env(
        python,
        "-m",
        "dlbench.harness.batchsearch",
        "--out",
        str(out),
        "--search-id",
        "test",
        "--multiple",
        str(MULTIPLE),
        "--framework",
        framework,
        *PROBE,
        *extra,
        timeout=1800,
    )
    return json.loads(out.read_text())


def probe_once(python: Path, log: Path, framework: str, size: int, budget: float) -> dict:
    """An independent probe: the harness at one size under the budget, as a run of the study would be."""
    run_harness(
        python,
        log,
        *PROBE[2:],
        "--batch-size",
        str(size),
        "--warmup-steps",
        "1",
        "--measured-steps",
        "2",
        "--memory-limit-gb",
        str(budget),
        framework=framework,
        model="bert_tiny",
    )
    return read_log(log)["summary"][-1]


@pytest.mark.slow
def test_search_finds_the_largest_batch_under_a_memory_budget(tmp_path):
    framework, budget = "pytorch", BUDGET_GB
    python = env_python(framework)
    result = run_search(python, tmp_path / "search.json", framework, "--memory-limit-gb", str(budget))
    assert result["status"] == "ok", result
    found, probes = result["batch_size"], result["probes"]
    assert found % MULTIPLE == 0 and not result["capped"] and result["memory_limit_gb"] == budget
    # Every probe is recorded with its outcome, memory and log: doubling from the multiple (then bisection, which
    # these budgets do not need); the largest ok size is the result, and the next multiple up was probed and ran
    # out of memory.
    sizes = [p["batch_size"] for p in probes]
    first_oom = next(i for i, p in enumerate(probes) if p["status"] == "oom")
    assert sizes[: first_oom + 1] == [MULTIPLE * 2**i for i in range(first_oom + 1)]
    assert {p["status"] for p in probes} == {"ok", "oom"}
    assert max(p["batch_size"] for p in probes if p["status"] == "ok") == found
    assert min(p["batch_size"] for p in probes if p["status"] == "oom") == found + MULTIPLE
    for p in probes:
        assert Path(p["log"]).exists() and read_log(Path(p["log"]))["summary"][-1]["status"] == p["status"]
        if p["status"] == "ok":  # the whole run stayed within the limit it ran under
            assert p["vm_baseline_bytes"] < p["vm_peak_bytes"] <= p["address_space_limit_bytes"]
            assert p["address_space_limit_bytes"] == p["vm_baseline_bytes"] + int(budget * 2**30)
    # The bound, re-checked by independent runs: the size found trains, one multiple more does not.
    assert probe_once(python, tmp_path / "found.jsonl", framework, found, budget)["status"] == "ok"
    above = probe_once(python, tmp_path / "above.jsonl", framework, found + MULTIPLE, budget)
    assert above["status"] == "oom", above


def test_a_probe_that_times_out_stops_the_search_with_timeout(torch_python, tmp_path):
    """A time limit no probe can meet (the framework's import alone takes longer): timeout, no max."""
    result = run_search(
        torch_python, tmp_path / "search.json", "pytorch", "--timeout-s", "0.5", "--memory-limit-gb", "1"
    )
    assert result["status"] == "timeout" and result["batch_size"] is None
    assert [(p["batch_size"], p["status"]) for p in result["probes"]] == [(MULTIPLE, "timeout")]
    assert "time limit" in result["reason"]


def test_two_ranks_beyond_the_budget_are_a_run_out_of_memory(torch_python, tmp_path):
    """1x2: each rank has the budget; when one runs out of memory, the other may fail in the broken collective
    first, but the run is `oom` (the supervisor reads every rank's report), so a search at 1x2 sees oom too."""
    log = tmp_path / "run.jsonl"
    run_harness(
        torch_python,
        log,
        "--topology",
        "1x2",
        "--seq-length",
        "128",
        "--device",
        "cpu",
        "--batch-size",
        "64",
        "--warmup-steps",
        "1",
        "--measured-steps",
        "1",
        "--memory-limit-gb",
        "0.5",
        model="bert_tiny",
    )
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "oom", summary
    assert summary["memory"]["memory_limit_gb"] == 0.5


def test_memory_limit_is_recorded_in_the_run(torch_python, tmp_path):
    log = tmp_path / "run.jsonl"
    summary = probe_once(torch_python, log, "pytorch", 2, 1.5)
    assert summary["status"] == "ok"
    rank = summary["ranks"][0]
    assert rank["memory_limit_gb"] == 1.5 and rank["vm_peak_bytes"] <= rank["address_space_limit_bytes"]
    from dlbench.logformats import runlogs as dlbench_format

    record = dlbench_format.parse(log)
    assert record["memory_limit_gb"] == 1.5 and record["vm_peak_bytes"] == rank["vm_peak_bytes"]


# ----------------------------------------------------------------------------------------------- the study
def max_study(tmp_path: Path, budget: float = 0.5) -> Path:
    return write_config(
        tmp_path / "study.yaml",
        {
            "study": "max",
            "software": {"venv_dir": str(REPO / ".venvs")},
            "platform": {"device": "cpu", "memory_limit_gb": budget},
            "telemetry": {"enabled": False},
            "defaults": {
                "repeats": 1,
                "warmup_steps": 1,
                "measured_steps": 2,
                "timeout_minutes": 10,
                "batch_size_multiple": 16,
            },  # 16 sequences fit in 0.5 GiB, 32 do not (see BUDGET_GB)
            "matrix": {"framework": ["pytorch"], "model": ["bert_tiny"], "topology": ["1x1"], "batch_size": [2, "max"]},
        },
    )


SEARCH = "results/search/bert_tiny/pytorch/1x1/bsmax-fp32-nocompile-synthetic-seq128-adam-noclip.json"


def plain_study(tmp_path: Path) -> Path:
    """The checked-in small study at 1x1, one repeat: one ResNet-50 run, no search."""
    plain = tiny_config(matrix={**tiny_config()["matrix"], "topology": ["1x1"]})
    plain["defaults"]["repeats"] = 1
    return write_config(tmp_path / "plain.yaml", plain)


PLAIN_RUN = "results/runs/resnet50/pytorch/1x1/bs2-fp32-nocompile-synthetic-img32/rep1.jsonl"


def published(workdir: Path) -> dict:
    return json.loads((workdir / "results/report/published.json").read_text())


@pytest.fixture(scope="module")
def two_studies(torch_python, tmp_path_factory) -> dict:
    """One working directory, two studies in turn, each run once for the tests below: the plain study (report v1),
    then the study with a search (its checkpoint, its runs and its report v2, although a report is there already).
    The tests share it in file order: the first only reads it and dry-runs, the last changes it."""
    workdir = tmp_path_factory.mktemp("two_studies")
    plain_config, max_config = plain_study(workdir), max_study(workdir)
    plain = snakemake(workdir, "--cores", "2", "--configfile", str(plain_config))
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert (workdir / PLAIN_RUN).exists() and published(workdir)["version"] == "v1"
    searched = snakemake(workdir, "--cores", "2", "--configfile", str(max_config))
    return {"workdir": workdir, "plain": plain_config, "max": max_config, "max_result": searched}


@pytest.mark.slow
def test_workflow_runs_the_search_as_a_checkpoint_and_reports_max(two_studies, tmp_path):
    workdir, config, result = two_studies["workdir"], two_studies["max"], two_studies["max_result"]
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    search_result = json.loads((workdir / SEARCH).read_text())
    assert search_result["status"] == "ok"
    found = search_result["batch_size"]
    # The runs at the size found are ordinary runs of the study, their id carries the number.
    run = workdir / SEARCH.replace("results/search", "results/runs").replace("bsmax", f"bs{found}").replace(
        ".json", "/rep1.jsonl"
    )
    assert read_log(run)["summary"][-1]["status"] == "ok"
    report = workdir / "results/reports/v2"  # v1 is the plain study's
    summary = pd.read_csv(report / "summary.csv").set_index("batch_size")
    assert summary.loc[found, "batch_label"] == f"max ({found})" and pd.isna(summary.loc[2, "batch_label"])
    records = pd.read_csv(report / "records.csv")
    assert set(records["memory_limit_gb"]) == {0.5}
    env = json.loads((report / "environment.json").read_text())
    assert [s["batch_size"] for s in env["batch_searches"]] == [found]
    assert env["batch_searches"][0]["probes"] == search_result["probes"]
    markdown = (report / "README.md").read_text()
    assert f"max ({found}):" in markdown and "batch max/device" in markdown
    assert "Batch-size searches (batch_size: max)" in markdown
    # Nothing changed: nothing runs. A memory budget changed: the search runs again (the runs are known once it
    # has run: the checkpoint; those whose command line changed then run again).
    assert planned_jobs(workdir, config) == []
    dry = snakemake(workdir, "-n", "--configfile", str(max_study(tmp_path, budget=0.6)))
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "checkpoint batch_search:" in dry.stdout and f"output: {SEARCH}" in dry.stdout


@pytest.mark.slow
def test_each_study_runs_what_it_has_not_run_whatever_the_directory_holds(two_studies):
    """One working directory, studies in turn: a study with a checkpoint (the search) after another study's report
    (two_studies), and a study whose report and aggregate are present but whose run logs and .snakemake/ are not
    (results copied from elsewhere), each runs what it has not run and publishes."""
    tmp_path, plain_config, max_config = two_studies["workdir"], two_studies["plain"], two_studies["max"]
    plain_run = tmp_path / PLAIN_RUN

    # The study with a checkpoint ran its search, its runs and its report, although a report was there already.
    result = two_studies["max_result"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Nothing to be done" not in result.stdout + result.stderr
    found = json.loads((tmp_path / SEARCH).read_text())["batch_size"]
    max_runs = tmp_path / SEARCH.replace("results/search", "results/runs").replace(".json", "")
    assert (max_runs.parent / max_runs.name.replace("bsmax", f"bs{found}") / "rep1.jsonl").exists()
    assert (max_runs.parent / max_runs.name.replace("bsmax", "bs2") / "rep1.jsonl").exists()
    assert published(tmp_path)["version"] == "v2"
    summary = pd.read_csv(tmp_path / "results/report/summary.csv")
    assert set(summary["model"]) == {"bert_tiny"}

    # Snakemake's records gone (.snakemake/ removed, or results copied from elsewhere): the plain study's run log is
    # there, the aggregate and report are the other study's. It aggregates and publishes its own, running nothing.
    before = plain_run.read_bytes()
    for gone in (".snakemake", "results/search", str(max_runs.parent)):
        shutil.rmtree(tmp_path / gone)
    result = snakemake(tmp_path, "--cores", "2", "--configfile", str(plain_config))
    assert result.returncode == 0, result.stderr[-3000:]
    assert plain_run.read_bytes() == before and published(tmp_path)["version"] == "v3"
    assert set(pd.read_csv(tmp_path / "results/report/summary.csv")["model"]) == {"resnet50"}

    # An aggregate and a report but no run log and no search: each study plans its work (the one with a search:
    # the search first), and the plain one runs it and publishes.
    for gone in (".snakemake", "results/runs"):
        shutil.rmtree(tmp_path / gone)
    dry = snakemake(tmp_path, "-n", "--configfile", str(max_config))
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "checkpoint batch_search:" in dry.stdout and f"output: {SEARCH}" in dry.stdout
    result = snakemake(tmp_path, "--cores", "2", "--configfile", str(plain_config))
    assert result.returncode == 0, result.stderr[-3000:]
    assert plain_run.exists() and plain_run.read_bytes() != before and published(tmp_path)["version"] == "v4"


TTQ = {"quality": {"target": 0.5, "eval_every_steps": 10, "max_steps": 50}}


@pytest.mark.parametrize(
    "platform, defaults, metric, expected",
    [
        (
            {"device": "cpu"},
            {},
            "throughput",
            "needs platform.memory_limit_gb (a CPU memory budget) or max_batch_size (a cap)",
        ),
        ({"device": "auto"}, {}, "throughput", "with device auto needs platform.memory_limit_gb"),
        ({"device": "cuda", "memory_limit_gb": 4}, {}, "throughput", "platform.memory_limit_gb: a CPU memory budget"),
        ({"device": "cpu"}, {"max_batch_size": 4, "batch_size_multiple": 8}, "throughput", "max_batch_size: 4"),
        (
            {"device": "cpu", "memory_limit_gb": 1},
            TTQ,
            "time_to_quality",
            "with metric time_to_quality: a time-to-quality run's batch size is part of its learning-rate schedule",
        ),
    ],
)
def test_max_needs_a_limit_the_search_can_meet(tmp_path, platform, defaults, metric, expected):
    config = write_config(
        tmp_path / "study.yaml",
        {
            "study": "bad",
            "platform": platform,
            "defaults": defaults,
            "matrix": {
                "framework": ["pytorch"],
                "model": ["resnet_tiny"],
                "topology": ["1x1"],
                "batch_size": ["max"],
                "metric": [metric],
                "data": ["real" if metric == "time_to_quality" else "synthetic"],
            },
        },
    )
    result = snakemake(tmp_path, "-n", "--configfile", str(config))
    assert result.returncode != 0 and expected in result.stdout + result.stderr, result.stderr[-2000:]


def test_a_misspelt_max_names_the_key_and_what_is_allowed(tmp_path):
    config = write_config(
        tmp_path / "study.yaml",
        {
            "study": "bad",
            "platform": {"device": "cpu"},
            "matrix": {
                "framework": ["pytorch"],
                "model": ["bert_tiny"],
                "topology": ["1x1"],
                "batch_size": {"bert_tiny": [8, "maximum"]},
            },
        },
    )
    result = snakemake(tmp_path, "-n", "--configfile", str(config))
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "matrix.batch_size.bert_tiny[1]: 'maximum' is not allowed" in out, out[-2000:]
    assert "a whole number (the batch size per device) or max (the largest that trains" in out


def test_the_shipped_max_batch_study_has_one_search_per_framework(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    path = REPO / "workflow" / "studies" / "max-batch.yaml"
    study = load_study_files(
        yaml.safe_load(path.read_text()), [path], REPO / "workflow/schemas/config.schema.yaml", REPO / "envs", tmp_path
    )
    assert sorted(search.split("/")[1] for search in study.searches()) == ["mxnet", "pytorch", "tensorflow"]
    assert study.config["platform"] == {"device": "cpu", "memory_limit_gb": 1.0, "emulated_bf16": "run"}
