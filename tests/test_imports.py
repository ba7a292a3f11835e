"""`imports:`: existing logs parsed by their format's parser into records, through the real DAG to the report."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, planned_jobs, snakemake, write_config
from dlbench import imports, logformats
from dlbench.collect import aggregate
from dlbench.collect.records import FIELDS
from dlbench.logformats.run_log_fixtures import write_run_log
from dlbench.plan.study import ConfigError, load_study
from dlbench.report import notes, sections

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


def dlperf_like_tree(root, throughputs):
    """Earlier dlbench run logs filed the way DLPerf files its logs: <framework>/<bsz>/<nodes>n<gpus>g/r<N>.log,
    with the framework label only in the path."""
    for (label, nodes, per_node), values in throughputs.items():
        for repeat, value in enumerate(values, start=1):
            path = root / label / "bs32" / f"{nodes}n{per_node}g" / f"r{repeat}.log"
            write_run_log(
                path,
                framework="pytorch",
                topology=f"{nodes}x{per_node}",
                batch_size=32,
                repeat=repeat,
                throughput=value,
            )
    return root


def study_config(tree, **labels):
    entry = {
        "name": "archive",
        "format": "dlbench",
        "paths": [str(tree)],
        "path_pattern": "{label}/bs{batch_size}/{nodes}n{devices_per_node}g/r{repeat}.log",
    }
    if labels:
        entry["labels"] = labels
    return {"study": "imported", "imports": [entry]}


def test_path_pattern_gives_labels(tmp_path):
    path = tmp_path / "NGC_PyTorch" / "bs256" / "2n8g" / "r3.log"
    pattern = "{framework}/bs{batch_size}/{nodes}n{devices_per_node}g/r{repeat}.log"
    labels = imports.file_labels(path, {"name": "x", "labels": {"precision": "amp"}, "path_pattern": pattern})
    assert labels == {"precision": "amp", "framework": "NGC_PyTorch", "batch_size": 256, "repeat": 3, "topology": "2x8"}


@pytest.mark.parametrize(
    "entry, message",
    [
        (
            {"name": "a", "format": "nope", "paths": ["."]},
            r"imports\[0\] \(a\)\.format: 'nope' is not a known log format",
        ),
        (
            {"name": "a", "format": "dlbench", "paths": ["missing/*.log"]},
            r"imports\[0\] \(a\)\.paths: missing/\*\.log: "
            "no such file, or nothing matches",
        ),
        (
            {
                "name": "a",
                "format": "dlbench",
                "paths": ["{tree}"],
                "path_pattern": "{{framework}}/x{{batch_size}}.log",
            },
            r"does not match path_pattern",
        ),
    ],
)
def test_bad_imports_are_configuration_errors(tmp_path, entry, message):
    tree = dlperf_like_tree(tmp_path / "old", {("a", 1, 1): [10.0]})
    entry = {**entry, "paths": [p.format(tree=tree) for p in entry["paths"]]}
    if "path_pattern" in entry:
        entry["path_pattern"] = entry["path_pattern"].format()
    with pytest.raises(ConfigError, match=message):
        load_study({"imports": [entry]}, SCHEMA, REPO / "envs", tmp_path)


def test_duplicate_import_names(tmp_path):
    tree = dlperf_like_tree(tmp_path / "old", {("a", 1, 1): [10.0]})
    entry = {"name": "same", "format": "dlbench", "paths": [str(tree)]}
    with pytest.raises(ConfigError, match="the name 'same' is used twice"):
        load_study({"imports": [entry, entry]}, SCHEMA, REPO / "envs", tmp_path)


@pytest.mark.slow
def test_imported_logs_reach_the_report_and_rerun_alone(tmp_path):
    tree = dlperf_like_tree(
        tmp_path / "old", {("archive", 1, 1): [100.0, 104.0, 96.0], ("archive", 1, 4): [380.0, 390.0, 370.0]}
    )
    config = write_config(tmp_path / "study.yaml", study_config(tree))
    result = snakemake(tmp_path, "--cores", "1", "--configfile", str(config))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    summary = pd.read_csv(tmp_path / "results/reports/v1/summary.csv").set_index("topology")
    assert summary.loc["1x1", "median"] == pytest.approx(100.0)
    assert summary.loc["1x4", "speedup"] == pytest.approx(3.8)
    records = pd.read_csv(tmp_path / "results/reports/v1/records.csv")
    assert len(records) == 6 and set(records["source"]) == {"dlbench"}
    assert "1x4" in (tmp_path / "results/reports/v1/README.md").read_text()
    assert planned_jobs(tmp_path, config) == []

    # Another log in the archive: that import is parsed again, nothing else.
    write_run_log(tree / "archive/bs32/1n1g/r4.log", framework="pytorch", batch_size=32, repeat=4, throughput=99.0)
    jobs = Counter(rule for rule, _ in planned_jobs(tmp_path, config))
    assert jobs == {"import_logs": 1, "aggregate": 1, "report": 1, "all": 1}


def test_unreadable_imported_log_is_an_error_record_naming_the_file(tmp_path):
    tree = dlperf_like_tree(tmp_path / "old", {("archive", 1, 1): [100.0]})
    broken = tree / "archive/bs32/1n1g/r1.log"
    broken.write_text(broken.read_text().splitlines()[0] + "\n{not json\n")
    entry = {"name": "broken", "format": "dlbench", "paths": [str(tree)]}
    with pytest.raises(imports.LogError, match="cannot place the run: no framework, model, topology, batch_size"):
        imports.import_records(entry, imports.expand_paths(entry["paths"]))  # nothing says where it belongs
    entry["labels"] = {"framework": "archive", "model": "resnet50", "topology": "1x1", "batch_size": 32}
    record = imports.import_records(entry, imports.expand_paths(entry["paths"]))[0][0]
    assert record["status"] == "error" and record["config_id"] == "resnet50/archive/1x1/bs32-fp32-nocompile-synthetic"
    assert f"{broken}:2" in record["error"]


RETINANET = "mllog/v3.0_nvidia_dgxh100_retinanet"  # MANIFEST.md A1: 5 runs, score 37.0092 min (published 37.009)
PYTORCH_RN50 = "dllogger/ngc-pyt-rn50_v100_8gpu_amp_bs256.log"  # MANIFEST.md B: Summary train.total_ips 5793.51


def result_directory(external_logs, root):
    """MLPerf's reference result directory as a submission keeps it: its run logs, a scaling.json (the RCP
    penalty) and a file of the submitter's own."""
    shutil.copytree(external_logs / RETINANET, root)
    (root / "scaling.json").write_text('{"scaling_factor": 1.0042}')
    (root / "README.md").write_text("how these runs were made\n")
    return root


def cut_before_run_stop(path):
    """The log as an interrupted copy leaves it: every line before run_stop."""
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[: next(i for i, line in enumerate(lines) if '"run_stop"' in line)]) + "\n")


def test_a_result_directory_gives_runs_only_for_its_run_logs(tmp_path, external_logs):
    results = result_directory(external_logs, tmp_path / "retinanet")
    entry = {"name": "nv", "format": "mlperf", "paths": [str(results)]}
    records, notes = imports.import_records(entry, imports.expand_paths(entry["paths"]), imports.named_files([]))
    assert [Path(r["log_path"]).name for r in records] == [f"result_{i}.log" for i in range(5)]
    assert {r["status"] for r in records} == {"ok"} and {r["scaling_factor"] for r in records} == {1.0042}
    assert records[0]["score_min"] == pytest.approx(37.0092 * 1.0042, abs=1e-4)
    assert notes == [
        f"{results / 'README.md'}: skipped, not a run log by MLPerf's naming (result_<N>.txt)",
        f"{results / 'scaling.json'}: read as its set's scaling factor (1.0042), not as a run",
    ]
    # A file the entry names itself is a log, whatever its name.
    named = tmp_path / "run.txt"
    shutil.copy(results / "result_0.log", named)
    entry["paths"] = [str(named)]
    records, notes = imports.import_records(entry, [named], imports.named_files(entry["paths"]))
    assert [r["status"] for r in records] == ["ok"] and notes == []


def test_an_import_without_a_run_log_stops_the_study_before_any_job(tmp_path):
    """A directory of a result set's other files only (no result_<N>.txt) would import nothing and publish an
    empty report: a dry run stops at parse time, naming the import, its paths and what was found there."""
    results = tmp_path / "retinanet"
    results.mkdir()
    (results / "README.md").write_text("how these runs were made\n")
    config = {"study": "imported", "imports": [{"name": "nv", "format": "mlperf", "paths": [str(results)]}]}
    result = snakemake(tmp_path, "-n", "--configfile", str(write_config(tmp_path / "study.yaml", config)))
    said = result.stdout + result.stderr
    assert result.returncode != 0, said[-3000:]
    assert (
        f"study.yaml, line 3: imports[0] (nv).paths: {results}: no mlperf run log among its 1 file "
        f"({results / 'README.md'}: skipped, not a run log by MLPerf's naming (result_<N>.txt))" in said
    ), said[-3000:]
    assert "name the logs themselves" in said and "Traceback" not in said


def test_an_unreadable_log_stays_in_its_set_and_its_score_is_flagged(tmp_path, external_logs):
    results = result_directory(external_logs, tmp_path / "retinanet")
    cut_before_run_stop(results / "result_2.log")
    entry = {"name": "nv", "format": "mlperf", "paths": [str(results)]}
    records, _ = imports.import_records(entry, imports.expand_paths(entry["paths"]), set())
    bad = records[2]
    assert bad["status"] == "error" and f"{results / 'result_2.log'}:" in bad["error"]
    assert {r["config_id"] for r in records} == {records[0]["config_id"]} and bad["config_id"].startswith("ssd/")
    assert bad["run_id"] == f"{records[0]['config_id']}/result_2" and bad["platform"] == "1xNVIDIA DGX H100"

    frame = pd.DataFrame(records, columns=FIELDS)
    summary = aggregate.summarise(frame)
    assert "score_unreadable_run: the score counts 1 of 5 run logs that could not be read" in summary.loc[0, "flags"]
    (row,) = sections.time_to_train(sections.ReportInputs(frame, summary, {})).rows
    assert row["Score (min)"].endswith("⚑ (1 unreadable run log counted as failed)")
    assert row["Scaling factor"] == "1.0042"
    assert row["Time to train (min), per run"].startswith("36.706, 36.999, — (error), ")


@pytest.mark.slow
def test_an_imports_only_study_says_its_problems_and_describes_its_own_hardware(tmp_path, external_logs):
    """Two imports through the real workflow (about 20 s: three Snakemake jobs and the report)."""
    results = result_directory(external_logs, tmp_path / "retinanet")
    cut_before_run_stop(results / "result_2.log")
    ngc = tmp_path / "ngc"
    ngc.mkdir()
    shutil.copy(external_logs / PYTORCH_RN50, ngc / "rn50.log")
    cut = (external_logs / PYTORCH_RN50).read_text().splitlines()
    (ngc / "rn50-cut.log").write_text("\n".join(cut[: len(cut) // 2]) + "\n" + cut[len(cut) // 2][:30])
    config = {
        "study": "imported",
        "imports": [
            {"name": "nv", "format": "mlperf", "paths": [str(results)], "labels": {"framework": "nvidia_pytorch"}},
            {"name": "ngc", "format": "dllogger", "paths": [str(ngc)], "labels": {"topology": "1x8"}},
        ],
    }
    path = write_config(tmp_path / "study.yaml", config)
    result = snakemake(tmp_path, "--cores", "1", "--configfile", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    said = result.stderr
    assert "dlbench: 2 runs or logs ended in an error (the report lists them):" in said
    assert f"  {results / 'result_2.log'}:" in said and f"  {ngc / 'rn50-cut.log'}:" in said
    assert f"dlbench: import note: {results / 'README.md'}: skipped" in said

    records = pd.read_csv(tmp_path / "results/reports/v1/records.csv")
    assert not records["config_id"].str.startswith("unknown/").any()
    readme = (tmp_path / "results/reports/v1/README.md").read_text()
    assert "Runs on CPU" not in readme and "Git commit" not in readme
    assert "on the hardware their logs name, not on this machine: ssd/nvidia_pytorch/" in readme
    assert ": platform 1xNVIDIA DGX H100." in readme  # the DLLogger log names no device: nothing said of it
    assert re.search(r"⚑ \(1 unreadable run log counted as failed\)\s*\|\s*1\.0042\s*\|", readme)
    # dlbench's figure (harmonic mean of every step) beside the script's own Summary figure, each defined.
    (dll,) = records[(records["source"] == "dllogger") & (records["status"] == "ok")].itertuples()
    figure = re.escape(f"{dll.throughput:,.2f}")
    side_by_side = (
        rf"\|\s*1/2 ok\s*\|\s*{figure}\s*\|\s*harmonic mean of per-step train.total_ips[^|]*\|\s*5,793.51\s*\|"
    )
    assert re.search(side_by_side, readme), readme
    assert re.search(rf"differs_from_reported\s*\|\s*the median {figure} by the import's rule differs by -28", readme)


def test_imported_figures_beside_the_tools_own_and_flagged_where_they_differ(external_logs):
    """dlbench's default over NVIDIA's PyTorch ResNet-50 log (harmonic mean of every step, warm-up included) is far
    from the script's own Summary figure: flagged. On the TF log the two agree: no flag."""
    pytorch = logformats.parse(external_logs / PYTORCH_RN50, "dllogger", {"framework": "ngc_pytorch"})
    tf = logformats.parse(external_logs / "dllogger/ngc-tf-rn50_v100_8gpu_amp_bs256.log", "dllogger", {})
    frame = pd.DataFrame([pytorch, tf], columns=FIELDS)
    summary = aggregate.summarise(frame).set_index("framework")
    assert summary.loc["ngc_pytorch", "reported_median"] == pytest.approx(5793.51, abs=0.005)
    assert (
        "differs_from_reported: the median 4,159.83 by the import's rule differs by -28.2%"
        in (summary.loc["ngc_pytorch", "flags"])
    )
    assert summary.loc["dle-tensorflow", "reported_median"] == pytest.approx(9421.36, abs=0.005)
    assert "differs_from_reported" not in summary.loc["dle-tensorflow", "flags"]
    rows = sections.imported_figures(sections.ReportInputs(frame, summary.reset_index(), {})).rows
    assert [
        (r["Throughput (median)"], r["Tool's own figure (median)"], r["Where the tool prints it"]) for r in rows
    ] == [
        ("9,408.65", "9,421.36", "train_throughput"),
        ("4,159.83", "5,793.51", "train.total_ips"),
    ]


def test_imported_hardware_is_what_the_logs_name_and_never_this_machine(external_logs):
    labels = {"framework": "ngc_pytorch", "device_name": "Tesla V100-SXM2-32GB"}
    named = logformats.parse(external_logs / PYTORCH_RN50, "dllogger", labels)
    unnamed = logformats.parse(external_logs / "dllogger/ngc-tf-rn50_v100_8gpu_amp_bs256.log", "dllogger", {})
    said = " ".join(notes.caveats(pd.DataFrame([named, unnamed], columns=FIELDS)))
    assert "Runs on CPU" not in said
    assert f"not on this machine: {named['config_id']}: Tesla V100-SXM2-32GB (1x8 devices)." in said
    assert unnamed["config_id"] not in said  # its log names no hardware: nothing is said of it
