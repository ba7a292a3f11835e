"""Multi-node runs for real: `snakemake --profile slurm` on a two-node SLURM cluster on this machine.

tests/slurm/slurm-local.sh with SLURM_NODES=2 runs each node's slurmd in its own network namespace (hostname
dlb-n1/dlb-n2, 10.78.0.11/12 on a private bridge), so the ranks of a 2x1 run talk over an interface between
"hosts" (Gloo, gRPC, ps-lite), and a node can be lost by killing every process in its namespace. Every
workflow run has a hard timeout, so a fault can never hang the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, log_lines, slurm_snakemake, tiny_config, write_config
from dlbench.plan.study import load_study

pytestmark = pytest.mark.slow  # a two-node cluster and an 8-run study: the full suite only


CLUSTER = REPO / "tests" / "slurm" / "slurm-local.sh"
HARD_TIMEOUT_S = 1200
FRAMEWORKS = ["pytorch", "tensorflow", "mxnet"]
# The two-node runs whose placement and counting are checked: BERT-Tiny with two ranks per node in PyTorch, MXNet and
# PaddlePaddle (Gloo; ps-lite, whose two workers and server per node must not collide; Paddle's collective mode, each
# rank's endpoint on its own host), TensorFlow's real-data run with one rank
# per node (gRPC between the nodes; two workers on one host are tests/test_slurm.py's), and one rank per node in
# PyTorch's ResNet (the same placement code for every framework and model).
SPANNING = [
    ("pytorch", "resnet_tiny", "2x1", "synthetic"),
    ("pytorch", "bert_tiny", "2x2", "synthetic"),
    ("mxnet", "bert_tiny", "2x2", "synthetic"),
    ("paddle", "bert_tiny", "2x2", "synthetic"),
    ("tensorflow", "bert_tiny", "2x1", "real"),
]
MEASURED_STEPS = 2
# Every timed run is submitted at once: SLURM's --exclusive still gives each run its own nodes, and a node never
# idles until Snakemake's next status check (the workflow profile's timed_run=1 would hold each submission back
# until the run before it is seen to end, up to tens of seconds later). The test's time, not a measurement.
ALL_RUNS_QUEUED = ("--resources", "timed_run=100")


def cluster(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CLUSTER), *args],
        env=dict(os.environ, SLURM_NODES="2"),
        check=True,
        timeout=timeout,
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def two_nodes():
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("the test cluster needs root and apt-get (Debian/Ubuntu) to install slurm")
    if not all(shutil.which(tool) for tool in ("ip", "nsenter", "unshare")):
        pytest.skip("the two-node test cluster needs ip (iproute2), nsenter and unshare (util-linux)")
    cluster("start")
    yield
    subprocess.run(["bash", str(CLUSTER), "stop"], check=False, timeout=300)


def node_of_jobs(work: Path, rule: str) -> set[str]:
    """The nodes SLURM ran a rule's jobs on (the job logs of the executor name the batch host)."""
    hosts = set()
    for log in (work / "logs" / "slurm" / f"rule_{rule}").glob("*/*.log"):
        job = log.stem
        out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "NodeList"], capture_output=True, text=True)
        hosts.update(h for h in out.stdout.split() if h)
    return hosts


@pytest.fixture(scope="module")
def multinode_study(two_nodes, torch_python, tmp_path_factory, real_data):
    """One study for every two-node test: BERT-Tiny at 2x2 in PyTorch, MXNet and PaddlePaddle; PyTorch's ResNet at
    1x1, 1x2 and 2x1 (the report's speedups and its across-nodes comparison: the same code for every framework;
    single-node runs of each framework under SLURM are tests/test_slurm.py's); JAX's BERT-Tiny at 2x1
    (jax.distributed's coordinator on the first node, Gloo between the nodes: the same code for every model); and
    TensorFlow's BERT-Tiny 2x1 on real data, its shards prepared by SLURM jobs (two shard groups) from raw text."""
    work = tmp_path_factory.mktemp("multinode")
    config = tiny_config()
    sample = real_data["bert_sample"]
    config["defaults"].update(repeats=1, measured_steps=MEASURED_STEPS)
    config["matrix"] = {
        "framework": ["pytorch"],
        "model": ["resnet_tiny"],
        "topology": ["1x1", "1x2", "2x1"],
        "precision": ["fp32"],
        "compiler": [False],
        "data": ["synthetic"],
        "batch_size": [2],
    }
    config["include"] = [
        *(
            {"framework": f, "model": "bert_tiny", "topology": "2x2", "batch_size": 2}
            for f in ("pytorch", "mxnet", "paddle")
        ),
        {"framework": "tensorflow", "model": "bert_tiny", "topology": "2x1", "batch_size": 2, "data": "real"},
        {"framework": "jax", "model": "bert_tiny", "topology": "2x1", "batch_size": 2},
    ]
    config["datasets"] = {
        "bert": {
            "source": "raw",
            "inputs": [str(sample / "wiki.txt")],
            "vocab": str(sample / "vocab.txt"),
            "dupe_factor": 1,
            "shards": 4,
            "jobs": 2,
        }
    }
    result = slurm_snakemake(
        work, write_config(work / "study.yaml", config), *ALL_RUNS_QUEUED, hard_timeout_s=HARD_TIMEOUT_S
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    return work, result


def summary_of(work: Path, model: str, framework: str, topology: str, data: str = "synthetic") -> dict:
    logs = [
        p
        for p in (work / "results/runs" / model / framework / topology).glob("*/rep1.jsonl")
        if f"-{data}" in p.parent.name
    ]
    assert len(logs) == 1, logs
    return log_lines(logs[0])[-1]


def test_jax_two_node_runs_span_both_hosts(multinode_study):
    """A JAX 2x1 run is one process per node joined by jax.distributed: both hosts, every rank's samples."""
    work, _ = multinode_study
    summary = summary_of(work, "bert_tiny", "jax", "2x1")
    assert summary["status"] == "ok", summary.get("error")
    assert summary["hosts"] == ["dlb-n1", "dlb-n2"] and summary["world_size"] == 2
    assert [r["host"] for r in sorted(summary["ranks"], key=lambda r: r["rank"])] == ["dlb-n1", "dlb-n2"]
    assert summary["samples"] == 2 * 2 * MEASURED_STEPS
    log = next((work / "results/runs/bert_tiny/jax/2x1").glob("*/rep1.jsonl"))
    env = next(line for line in log_lines(log) if line["type"] == "environment")
    assert env["distributed_backend"] == "jax.distributed (gloo)"
    assert (env["strategy_in_effect"]["processes"], env["strategy_in_effect"]["devices"]) == (2, 2)
    records = pd.read_csv(work / "results/aggregate/records.csv")
    jax = records[records["framework"] == "jax"]
    assert list(jax["status"]) == ["ok"]


@pytest.mark.slow
def test_the_shipped_interconnect_study_pairs_one_node_with_two():
    """workflow/studies/interconnect.yaml: per framework the same two devices as 1x2 and as 2x1, the pairs the
    report's across-nodes section compares."""
    config = yaml.safe_load((REPO / "workflow/studies/interconnect.yaml").read_text())
    study = load_study(config, REPO / "workflow/schemas/config.schema.yaml", REPO / "envs", REPO)
    for framework in FRAMEWORKS:
        cells = [c for c in study.configurations.values() if c.framework == framework]
        assert sorted(c.topology for c in cells) == ["1x2", "2x1"]
        assert len({(c.model, c.batch_size, c.precision, c.data) for c in cells}) == 1


@pytest.mark.parametrize(("framework", "model", "topology", "data"), SPANNING)
def test_two_node_runs_span_both_hosts(multinode_study, framework, model, topology, data):
    """2x1 and 2x2 runs really ran on both nodes, their records name every rank's host and count every rank."""
    work, _ = multinode_study
    records = pd.read_csv(work / "results/aggregate/records.csv")
    world = 2 * int(topology.split("x")[1])
    summary = summary_of(work, model, framework, topology, data)
    assert summary["status"] == "ok", summary.get("error")
    assert summary["hosts"] == ["dlb-n1", "dlb-n2"]
    assert summary["world_size"] == world
    by_rank = [r["host"] for r in sorted(summary["ranks"], key=lambda r: r["rank"])]
    assert by_rank == ["dlb-n1"] * (world // 2) + ["dlb-n2"] * (world // 2)  # srun's block distribution
    row = records[
        (records["framework"] == framework)
        & (records["model"] == model)
        & (records["topology"] == topology)
        & (records["data"] == data)
    ].iloc[0]
    assert row["hosts"] == "dlb-n1;dlb-n2" and row["rank_hosts"] == ",".join(by_rank)
    assert row["world_size"] == world
    # throughput counts all ranks: the global batch over the measured time
    assert summary["samples"] == 2 * world * MEASURED_STEPS


@pytest.mark.slow
def test_mxnet_places_ps_lite_on_the_allocation(multinode_study):
    """MXNet across nodes: the dist_sync kvstore with the scheduler on the first node and a server per node,
    joined at each node's own address on the bridge."""
    work, _ = multinode_study
    log = next((work / "results/runs/bert_tiny/mxnet/2x2").glob("*synthetic*/rep1.jsonl"))
    env = next(line for line in log_lines(log) if line["type"] == "environment")
    assert env["strategy_in_effect"]["kvstore_type"] == "dist_sync"
    assert env["strategy_in_effect"]["num_workers"] == 4 and env["strategy_in_effect"]["num_servers"] == 2
    assert env["kvstore_addresses"]["scheduler"].startswith("10.78.0.11:")
    assert env["kvstore_addresses"]["node_host"] == "10.78.0.11"  # rank 0's, on dlb-n1's interface


@pytest.mark.slow
def test_report_compares_one_node_with_two(multinode_study):
    """Speedups for every topology and the 1x2 against 2x1 comparison (same devices, different interconnect)."""
    work, result = multinode_study
    assert "dlbench: report v1" in result.stdout + result.stderr
    summary = pd.read_csv(work / "results/aggregate/summary.csv")
    resnet = summary[(summary["framework"] == "pytorch") & (summary["model"] == "resnet_tiny")]
    assert sorted(resnet["topology"]) == ["1x1", "1x2", "2x1"]
    assert resnet["speedup"].notna().all() and (resnet.loc[resnet["topology"] == "1x1", "speedup"] == 1).all()
    report = (work / "results/reports/v1/README.md").read_text()
    section = report.split("Across nodes ÷ within one node", 1)[1]
    assert "pytorch resnet_tiny fp32 bs2, 2 devices" in section
    assert "1x2:" in section and "2x1:" in section


@pytest.mark.slow
def test_real_data_on_two_nodes_prepared_by_slurm_jobs(multinode_study):
    """A real-data 2x1 run reads its rank's share of the BERT shards on each node; the shards were written by two
    SLURM jobs (one shard group each), which SLURM may place on any node."""
    work, _ = multinode_study
    summary = summary_of(work, "bert_tiny", "tensorflow", "2x1", data="real")
    assert summary["status"] == "ok", summary.get("error")
    assert summary["hosts"] == ["dlb-n1", "dlb-n2"]
    assert len(list((work / "logs/slurm/rule_bert_shard_group").glob("*/*.log"))) == 2
    assert node_of_jobs(work, "bert_shard_group") <= {"dlb-n1", "dlb-n2"}
    assert node_of_jobs(work, "bert_shard_group")  # accounting names where they ran


@pytest.mark.slow
def test_losing_a_node_mid_run_is_a_failure_record(two_nodes, torch_python, tmp_path_factory):
    """The second node dies (its slurmd and its rank killed) while a 2x1 run trains: the run ends as a `failed`
    record naming the node and SLURM's view of it, not a timeout, with nothing left running on the surviving node;
    the study goes on (the other run completes, the report is built). Then the node comes back."""
    work = tmp_path_factory.mktemp("nodeloss")
    config = tiny_config()
    config["defaults"].update(repeats=1, measured_steps=MEASURED_STEPS, timeout_minutes=5)
    config["matrix"].update(model=["resnet_tiny"], topology=["1x1", "2x1"])
    # the 2x1 run trains until the node is lost (far more steps than it can take in its 5 minutes); the 1x1 run is
    # the study going on
    config["overrides"] = [{"match": {"topology": "2x1"}, "set": {"measured_steps": 10**6}}]
    partial = work / "results/runs/resnet_tiny/pytorch/2x1/bs2-fp32-nocompile-synthetic-img32/rep1.jsonl.partial"
    lost_at: list[float] = []

    def lose_node_when_training() -> None:
        deadline = time.monotonic() + HARD_TIMEOUT_S
        while time.monotonic() < deadline:
            if partial.exists() and '"phase":"warmup"' in partial.read_text().replace(" ", ""):
                cluster("lose-node", "dlb-n2")
                lost_at.append(time.time())
                return
            time.sleep(0.2)

    killer = threading.Thread(target=lose_node_when_training, daemon=True)
    killer.start()
    try:
        result = slurm_snakemake(
            work, write_config(work / "study.yaml", config), "--retries", "0", hard_timeout_s=HARD_TIMEOUT_S
        )
    finally:
        killer.join(timeout=5)
        cluster("restore-node", "dlb-n2", timeout=120)
    assert lost_at, "the run never started training"
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]

    summary = log_lines(partial.with_suffix(""))[-1]
    assert summary["status"] == "failed"  # worth another try (Snakemake's retries)
    assert "node dlb-n2 lost" in summary["error"] and "SLURM node state" in summary["error"]
    assert [n["node"] for n in summary["lost_nodes"]] == ["dlb-n2"] and summary["lost_nodes"][0]["state"]
    # `failed`, not `timeout`: the run ended on the loss, not when its time limit struck

    records = pd.read_csv(work / "results/aggregate/records.csv")
    assert dict(zip(records["topology"], records["status"], strict=True)) == {"1x1": "ok", "2x1": "failed"}
    assert records.loc[records["topology"] == "2x1", "lost_nodes"].iloc[0].startswith("dlb-n2 (")
    survivors = subprocess.run(["ip", "netns", "pids", "dlb-n1"], capture_output=True, text=True).stdout.split()
    commands = [
        Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        for pid in survivors
        if Path(f"/proc/{pid}/cmdline").exists()
    ]
    assert not [c for c in commands if "dlbench.harness" in c], commands


@pytest.mark.slow
def test_a_sweep_names_the_slow_node_and_records_a_drained_one(two_nodes, torch_python, tmp_path_factory):
    """Accepting nodes for real: the same short configuration on both nodes, each on a core of its own, dlb-n2's
    processes held to a fifth of a core (a CPU quota of its slurmd's cgroup, inherited by every job it starts). The
    report names dlb-n2 slow and dlb-n1 within, the of_fleet expectation fails for dlb-n2 alone (exit 1, one line naming
    it), and `python -m dlbench.judge` on the published report says the same. Then dlb-n1 is drained: the study runs
    again, dlb-n1 is recorded drained with SLURM's reason, its runs from before are kept and read, no job is
    submitted, and the report is made again. A sweep naming nodes this SLURM does not know is refused, naming them."""
    work = tmp_path_factory.mktemp("sweep")
    config = tiny_config()
    config["defaults"].update(repeats=3, warmup_steps=2, measured_steps=10)  # a window of many quota periods
    config["matrix"].update(model=["resnet_tiny"], topology=["1x1"], batch_size=[4])
    config["sweep"] = {"nodes": ["dlb-n[1-2]"], "tolerance": 0.9}
    config["expectations"] = [{"match": {"model": "resnet_tiny"}, "of_fleet": 0.9}]
    study = write_config(work / "study.yaml", config)
    cluster("cores", "dlb-n1", "0")
    cluster("cores", "dlb-n2", "1")
    # A fifth of a core: far below the tolerance even when the suite's other workers load dlb-n1's core too.
    cluster("slow-node", "dlb-n2", "20")
    try:
        # Every run queued at once: SLURM runs one job at a time on each node (--exclusive), each node on its own
        # core, so the nodes' runs overlap and neither waits for Snakemake's next status check.
        first = slurm_snakemake(work, study, *ALL_RUNS_QUEUED, hard_timeout_s=HARD_TIMEOUT_S)
    finally:
        cluster("unslow-node", "dlb-n2")
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-5000:]
    failing = {line for line in first.stderr.splitlines() if line.startswith("dlbench: FAIL: ")}  # also in the log
    assert len(failing) == 1, first.stderr[-3000:]
    (line,) = failing
    assert "-on_dlb_n2: " in line and "× the fleet" in line and "its runs saw CPU: " in line, line
    records = pd.read_csv(work / "results/aggregate/records.csv")
    assert set(records["node"]) == {"dlb-n1", "dlb-n2"} and set(records["status"]) == {"ok"}
    hosts = {node: set(part["hosts"]) for node, part in records.groupby("node")}
    assert hosts == {"dlb-n1": {"dlb-n1"}, "dlb-n2": {"dlb-n2"}}, "each run ran on the node it was pinned to"
    index = (work / "results/reports/latest/index.html").read_text()
    assert "slow: dlb-n2" in index and "slowest dlb-n2" in index, index[:3000]
    judged = subprocess.run(
        [sys.executable, "-m", "dlbench.judge", str(work / "results/reports/latest")],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO / "workflow")),
    )
    assert judged.returncode == 1 and "-on_dlb_n2: " in judged.stdout + judged.stderr

    runs = {p: p.stat().st_mtime_ns for p in (work / "results/runs").rglob("rep?.jsonl")}
    subprocess.run(["scontrol", "update", "nodename=dlb-n1", "state=drain", "reason=dlbench-test"], check=True)
    try:
        second = slurm_snakemake(work, study, hard_timeout_s=HARD_TIMEOUT_S)
    finally:
        subprocess.run(["scontrol", "update", "nodename=dlb-n1", "state=resume"], check=True)
        cluster("cores", "dlb-n1", "0-1")
    assert second.returncode == 1, second.stdout[-3000:] + second.stderr[-5000:]
    assert "taking no job now, recorded as such: dlb-n1 (drained" in second.stderr, second.stderr[-3000:]
    assert "rule benchmark_run" not in second.stdout + second.stderr, "a drained node's runs are read, not run"
    assert {p: p.stat().st_mtime_ns for p in (work / "results/runs").rglob("rep?.jsonl")} == runs
    nodes = {n["node"]: n for n in json.loads((work / "results/sweep/nodes.json").read_text())["nodes"]}
    assert nodes["dlb-n1"]["available"] == "no" and nodes["dlb-n1"]["reason"] == "dlbench-test"
    index = (work / "results/reports/latest/index.html").read_text()
    assert "now drained: dlbench-test in SLURM (these runs are from before; no new one)" in index, index[:3000]
    assert "node dlb-n1: took no job: drained: dlbench-test" in index, "a node down now is not judged"

    config["sweep"] = {"nodes": ["dlb-x[1-2]"]}
    unknown = slurm_snakemake(work, write_config(work / "unknown.yaml", config), hard_timeout_s=HARD_TIMEOUT_S)
    assert unknown.returncode == 1 and not list((work / "results/runs/resnet_tiny/pytorch/1x1").glob("*dlb_x*"))
    assert "sweep.nodes: SLURM here knows none of the sweep's nodes (dlb-x1, dlb-x2)" in unknown.stderr, unknown.stderr
