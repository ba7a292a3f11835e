"""`imports:`: existing logs parsed by their format's parser into records, through the real DAG to the report."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest

from conftest import REPO, planned_jobs, snakemake, write_config
from dlbench import imports
from dlbench.run_log_fixtures import write_run_log
from dlbench.study import ConfigError, load_study

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
    record = imports.import_records(entry, imports.expand_paths(entry["paths"]))[0]
    assert record["status"] == "error" and record["config_id"] == "resnet50/archive/1x1/bs32-fp32-nocompile-synthetic"
    assert f"{broken}:2" in record["error"]
