"""The gradient-exchange strategy axis (dlbench.harness.strategies), for real: per framework two strategies at 1x2
on CPU whose read-back (from the framework's own objects) matches what was asked and differs between them, and
the `unsupported` records of what cannot run here, decided before any model is built."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPO, assert_ranks_counted, env_python, read_log, run_harness
from dlbench import logformats
from dlbench.harness import strategies
from dlbench.harness.frameworks import NAMES as FRAMEWORKS
from dlbench.plan.study import load_study

TINY = ["--image-size", "32", "--batch-size", "2", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]
MIB = 2**20
# TensorFlow's runs that train: resnet_tiny (ResNet-50's code, one block per stage) builds and compiles in a
# fraction of ResNet-50's time, and the strategy facts read back do not depend on the model's size (MXNet has no
# resnet_tiny). A later --model wins over run_harness's resnet50.
TRAIN = (*TINY, "--model", "resnet_tiny")
# JAX's runs train bert_tiny at 16 tokens: the strategy is the same code for every model (backends/jax/backend.py),
# and a run takes about 50 s here against resnet_tiny's 75 s (2 cores, load 5).
JAX_TRAIN = ("--model", "bert_tiny", "--seq-length", "16", *TINY[2:])  # TINY without its --image-size 32


def run(framework: str, log: Path, strategy: str, *args: str, topology: str = "1x2") -> dict:
    """One run of the harness; the run log's lines by type. The harness itself must succeed (a record either way)."""
    result = run_harness(
        env_python(framework),
        log,
        "--topology",
        topology,
        "--strategy",
        strategy,
        *(args or TINY),
        framework=framework,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {"entries": read_log(log), "stderr": result.stderr}


def ran(framework: str, tmp_path: Path, strategy: str, *args: str) -> tuple[dict, dict]:
    """(read-back facts, record) of an ok 1x2 run with `strategy`: the record says both what was asked and
    what was in effect, and the log says the same."""
    log = tmp_path / f"{strategy}.jsonl"
    out = run(framework, log, strategy, *args)
    summary = out["entries"]["summary"][-1]
    assert_ranks_counted(summary, ranks=2, batch_size=2, steps=3)
    env = out["entries"]["environment"][0]
    assert env["strategy"] == strategy
    facts = env["strategy_in_effect"]
    assert f"strategy {strategy}: {facts['summary']}" in out["stderr"]
    record = logformats.parse(log)
    assert record["status"] == "ok" and record["throughput"] > 0
    assert (record["strategy"], record["strategy_in_effect"]) == (strategy, facts["summary"])
    return facts, record


def unsupported(framework: str, tmp_path: Path, strategy: str, *args: str, topology: str = "1x2") -> dict:
    """The record of a run that cannot be: status unsupported, with its reason; no step was run."""
    log = tmp_path / f"{strategy}-{topology}.jsonl"
    entries = run(framework, log, strategy, *args, topology=topology)["entries"]
    assert "step" not in entries  # decided before any training
    record = logformats.parse(log)
    assert record["status"] == "unsupported", record
    assert record["strategy"] == strategy and record["strategy_in_effect"] is None
    return record


# The default strategy (auto) of every framework is read back by the framework contract's two-rank runs
# (tests/test_contract_framework.py); these runs are the others'.
@pytest.mark.slow
def test_pytorch_ddp_fp16_hook_bucket_and_fsdp(tmp_path):
    fp16, fp16_record = ran("pytorch", tmp_path, "ddp_fp16")
    assert fp16["comm_hook"] == "fp16_compress_hook" and fp16["bucket_cap_bytes"] == 25 * MIB
    bucket, _ = ran("pytorch", tmp_path, "ddp_bucket1mb")
    assert bucket["bucket_cap_bytes"] == MIB and bucket["comm_hook"] is None
    sharded, _ = ran("pytorch", tmp_path, "fsdp")
    assert sharded["wrapper"] == "fully_shard" and sharded["placements"] == ["S(0)"] and sharded["mesh_size"] == 2
    assert len({fp16["summary"], bucket["summary"], sharded["summary"]}) == 3
    assert fp16_record["config_id"] == "adhoc"  # ad-hoc runs: ids come from the study


@pytest.mark.slow
def test_tensorflow_mwms_collectives_read_back(tmp_path):
    auto, _ = ran("tensorflow", tmp_path, "mwms_auto", *TRAIN)
    packed, _ = ran("tensorflow", tmp_path, "mwms_pack1mb", *TRAIN)
    for facts in (auto, packed):
        assert facts["strategy_class"] == "CollectiveAllReduceStrategy"  # MultiWorkerMirroredStrategy's class
        assert facts["cross_device_ops"] == "CollectiveAllReduce" and facts["replicas"] == 2
    assert (auto["implementation"], auto["bytes_per_pack"]) == ("AUTO", 0)
    assert (packed["implementation"], packed["bytes_per_pack"]) == ("RING", MIB)  # auto on CPU: ring
    assert auto["summary"] != packed["summary"]


@pytest.mark.slow
def test_mxnet_parameter_server_and_device_kvstore(tmp_path):
    server, _ = ran("mxnet", tmp_path, "dist_sync_ps")
    assert (server["kvstore_type"], server["update_on_kvstore"], server["num_workers"]) == ("dist_sync", True, 2)
    device, _ = ran("mxnet", tmp_path, "dist_device_sync")
    assert device["kvstore_type"] == "dist_device_sync" and not device["update_on_kvstore"]
    assert server["summary"] != device["summary"]


@pytest.mark.slow
def test_jax_pmean_fp16_and_gspmd_read_back(tmp_path):
    fp16, _ = ran("jax", tmp_path, "pmean_fp16", *JAX_TRAIN)
    gspmd, _ = ran("jax", tmp_path, "gspmd", *JAX_TRAIN)
    for facts in (fp16, gspmd):
        assert (facts["processes"], facts["devices"], facts["mesh"]) == (2, 2, {"data": 2})
        assert facts["collectives"] == "gloo (CPU)"
    assert "lax.pmean in float16" in fp16["step"] and "SPMD partitioner" in gspmd["step"]
    assert fp16["summary"] != gspmd["summary"]


@pytest.mark.parametrize(
    ("framework", "strategy", "topology", "reason"),
    [
        ("pytorch", "mwms_ring", "1x2", "not one of pytorch's"),  # another framework's
        ("pytorch", "ddp_fp16", "1x1", "exchanges gradients between ranks and this run has one"),
        ("tensorflow", "mirrored_nccl", "1x2", "one process per device"),
        ("tensorflow", "parameter_server", "1x2", "coordinator"),
        ("mxnet", "local", "1x2", "one process per device"),
        ("jax", "pmap", "1x2", "one process per device"),
        ("pytorch", "ddp_bucket0mb", "1x2", "at least 1 MiB"),
    ],
)
def test_supervisor_refuses_before_starting_ranks(tmp_path, framework, strategy, topology, reason):
    record = unsupported(framework, tmp_path, strategy, topology=topology)
    assert reason in record["error"]


@pytest.mark.parametrize(
    ("framework", "strategy", "reason", "args"),
    [
        ("pytorch", "ddp_nccl", "runs on GPUs only: it needs NCCL", ()),
        ("pytorch", "ddp_powersgd", "runs on GPUs only: PowerSGD over Gloo", ()),
        ("tensorflow", "mwms_nccl", "runs on GPUs only: it needs NCCL", ()),
        ("mxnet", "horovod", "needs Horovod (horovod.mxnet), which is not installed", ()),
        (
            "mxnet",
            "dist_async",
            "BERT's learning-rate schedule",
            (
                "--model",
                "bert_tiny",
                "--seq-length",
                "32",
                "--batch-size",
                "2",
                "--warmup-steps",
                "1",
                "--measured-steps",
                "2",
                "--device",
                "cpu",
            ),
        ),
    ],
)
def test_backend_refuses_before_building_the_model(tmp_path, framework, strategy, reason, args):
    # run_harness passes --model resnet50 first; a later --model (BERT's case) wins
    record = unsupported(framework, tmp_path, strategy, *(args or TINY))
    assert reason in record["error"]


def test_registry_names_are_id_safe_and_each_framework_with_strategies_has_two_on_cpus():
    """A framework lists the strategies its API offers, two of them runnable here; one that lists none offers auto
    alone (its declaration's collectives), and any other name is refused for it before a run."""
    for entry in strategies.STRATEGIES:
        assert strategies.NAME.match(entry.name.replace("<N>", "1")), entry.name
        assert entry.framework in FRAMEWORKS
    for framework in FRAMEWORKS:
        listed = [s for s in strategies.STRATEGIES if s.framework == framework]
        runnable = [s for s in listed if not s.gpu_only and not s.note]
        if not listed:
            assert strategies.problem(framework, "auto", 2) is None
            assert "its strategies: auto)" in strategies.problem(framework, "ddp_fp16", 2), framework
            continue
        assert len(runnable) >= 2, framework
    assert strategies.find("pytorch", "ddp_bucket64mb").number("ddp_bucket64mb") == 64
    assert strategies.find("tensorflow", "ddp_fp16") is None and strategies.known("ddp_fp16")
    assert strategies.problem("mxnet", "auto", 1) is None


@pytest.mark.slow
def test_the_shipped_strategy_study_runs_two_cpu_strategies_per_framework_besides_auto():
    """workflow/studies/strategies.yaml: per framework auto at 1x1 (the speedup baseline) and 1x2, and two more
    strategies at 1x2 only, each one that runs on CPUs."""
    config = yaml.safe_load((REPO / "workflow/studies/strategies.yaml").read_text())
    study = load_study(config, REPO / "workflow/schemas/config.schema.yaml", REPO / "envs", REPO)
    for framework in ("pytorch", "tensorflow", "mxnet"):
        cells = [c for c in study.configurations.values() if c.framework == framework]
        assert {c.strategy for c in cells if c.topology == "1x1"} == {"auto"}
        others = {c.strategy for c in cells if c.topology == "1x2"} - {"auto"}
        assert len(others) == 2, (framework, others)
        for name in others:
            entry = strategies.find(framework, name)
            assert entry and not entry.gpu_only and not entry.note
            assert strategies.problem(framework, name, 2) is None
