"""A sweep's fleet from run logs as runs write them: each node's ratio to the rest, its verdict, the down nodes,
of_fleet judged per node, the report's fleet section and plot, and the hostlists a sweep names."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from conftest import planned_jobs, snakemake, tiny_config, write_config
from dlbench.collect import aggregate, expectations, fleet
from dlbench.logformats.run_log_fixtures import write_run_log
from dlbench.plan import sweep
from dlbench.plan.config_errors import ConfigError
from dlbench.report import render

FIGURES = {"n1": [100, 101, 99, 100, 102], "n2": [99, 100, 101, 100, 98], "n3": [80, 81, 79, 80, 82]}


def sweep_records(tmp_path, figures=FIGURES) -> pd.DataFrame:
    logs = [
        str(write_run_log(tmp_path / node / f"rep{r}.jsonl", repeat=r, throughput=value, node=node))
        for node, values in figures.items()
        for r, value in enumerate(values, 1)
    ]
    return aggregate.records_frame(logs)


def test_the_slow_node_is_named_and_the_others_pass(tmp_path):
    records = sweep_records(tmp_path)
    assert set(records["node"]) == {"n1", "n2", "n3"}
    table = fleet.fleet_table(records, {"n4": "drained: bad DIMM"})
    verdicts = dict(zip(table["node"], table["verdict"], strict=True))
    assert verdicts == {"n3": fleet.SLOW, "n1": fleet.WITHIN, "n2": fleet.WITHIN, "n4": fleet.DOWN}
    assert list(table["node"])[0] == "n3", "slowest first"
    slow = table[table["node"] == "n3"].iloc[0]
    assert slow["ratio"] == pytest.approx(80 / 100) and slow["ratio_high"] < 0.95
    (summary,) = fleet.fleet_summary(table)
    assert summary["slowest"][0] == "n3" and summary["not_passing"] == {"slow": ["n3"], "down": ["n4"]}
    whys = dict(zip(table["node"], table["why"], strict=True))
    assert "below 0.95" in whys["n3"] and "bad DIMM" in whys["n4"], whys


def test_of_fleet_is_judged_per_node_and_a_down_node_is_no_pass(tmp_path):
    records = sweep_records(tmp_path)
    summary = aggregate.summarise(records)
    judged = expectations.judge(
        [{"match": {"model": "resnet50"}, "of_fleet": 0.95}], records, summary, unavailable={"n4": "drained"}
    )
    by_config = {j["configuration"]: j["verdict"] for j in judged}
    assert sorted(by_config.values()) == sorted(
        [expectations.PASS, expectations.PASS, expectations.FAIL, expectations.UNJUDGED]
    )
    failed = next(j for j in judged if j["verdict"] == expectations.FAIL)
    assert failed["configuration"].endswith("-on_n3") and "× the fleet" in failed["reason"]
    assert by_config["node n4"] == expectations.UNJUDGED


def test_a_node_with_spread_repeats_is_unstable_not_slow(tmp_path):
    records = sweep_records(tmp_path, {**FIGURES, "n3": [60, 140, 70, 130, 100]})
    table = fleet.fleet_table(records)
    assert dict(zip(table["node"], table["verdict"], strict=True))["n3"] == fleet.UNSTABLE


def test_the_report_opens_with_the_fleet(tmp_path):
    records = sweep_records(tmp_path)
    summary = aggregate.summarise(records)
    env = {
        "config": {"sweep": {"tolerance": 0.95}},
        "sweep": {
            "source": "sweep.nodes",
            "nodes": [{"node": n, "state": "idle", "reason": "", "available": "yes"} for n in FIGURES]
            + [{"node": "n4", "state": "drained", "reason": "bad DIMM", "available": "no"}],
        },
    }
    records.to_csv(tmp_path / "records.csv", index=False)
    summary.to_csv(tmp_path / "summary.csv", index=False)
    (tmp_path / "environment.json").write_text(json.dumps(env))
    out = tmp_path / "report"
    render.render_report(
        tmp_path / "records.csv", tmp_path / "summary.csv", tmp_path / "environment.json", out, version="v1"
    )
    html = (out / "index.html").read_text()
    first = html.index("Fleet resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic: 4 nodes")
    assert first < html.index('<h2 id="throughput">')
    assert "slowest n3 (0.800 × the rest)" in html and "slow: n3" in html and "down: n4" in html
    assert (out / "fleet.png").exists() and "Fleet: every node against the rest" in html


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("gpu[001-003,7]", ["gpu001", "gpu002", "gpu003", "gpu7"]),
        ("a[1-2]b[1-2],login", ["a1b1", "a1b2", "a2b1", "a2b2", "login"]),
        ("dlb-n1,dlb-n[2-3]", ["dlb-n1", "dlb-n2", "dlb-n3"]),
    ],
)
def test_hostlists_expand_as_slurm_does(expression, names):
    assert sweep.expand_hostlist(expression) == names


@pytest.mark.parametrize(
    ("nodes", "says"),
    [(["gpu[3-1]"], "runs backwards"), (["gpu[1-2"], "not closed"), (["gpu_1"], "'_' or '+'")],
)
def test_a_bad_node_list_names_the_entry(nodes, says):
    with pytest.raises(ConfigError, match="sweep.nodes") as error:
        sweep.sweep_nodes({"nodes": nodes})
    assert says in str(error.value)


def test_a_sweep_plans_a_run_per_node_and_is_refused_without_slurm(tmp_path):
    """The dry run plans each configuration on each node (a 2-node topology on consecutive pairs, the node left
    over said); run on this machine alone, the sweep is refused before any job, saying why and what to do."""
    config = tiny_config()
    config["matrix"].update(topology=["1x1", "2x1"])
    config["sweep"] = {"nodes": ["dlb-n[1-3]"]}
    study = write_config(tmp_path / "study.yaml", config)
    runs = [out for rule, out in planned_jobs(tmp_path, study) if rule == "benchmark_run"]
    nodes = sorted({re.search(r"-on_([^/]+)/rep", run)[1] for run in runs})
    assert nodes == ["dlb_n1", "dlb_n1+dlb_n2", "dlb_n2", "dlb_n3"], runs
    refused = snakemake(tmp_path, "--cores", "1", "--configfile", str(study))
    assert refused.returncode == 1
    assert "dlbench: sweep: the study runs each configuration on 3 named nodes" in refused.stderr, refused.stderr
    assert "--profile slurm" in refused.stderr and not (tmp_path / "results" / "runs").exists()


def test_a_configuration_only_one_node_ran_has_no_fleet_and_cannot_be_judged(tmp_path):
    records = sweep_records(tmp_path, {"n1": FIGURES["n1"]})
    table = fleet.fleet_table(records, {"n2": "drained"})
    assert dict(zip(table["node"], table["verdict"], strict=True)) == {"n1": fleet.ALONE, "n2": fleet.DOWN}
    judged = expectations.judge(
        [{"match": {}, "of_fleet": 0.95}], records, aggregate.summarise(records), unavailable={"n2": "drained"}
    )
    assert [j["verdict"] for j in judged] == [expectations.UNJUDGED, expectations.UNJUDGED], judged
