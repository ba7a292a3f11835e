"""The framework contract, run for real against every registered framework (harness/frameworks.py REGISTRY) on
tiny shapes on CPU: what a user can rely on whichever framework a study names.

- one rank: throughput is the samples of the measured steps over their wall time, in the model's unit
  (identity.THROUGHPUT_UNITS), with the shared definition's parameter count and the pinned framework version;
- two ranks: both processes really run and every rank's samples count, through the framework's own collectives;
- AMP: bfloat16 on CPU (or `unsupported` with the reason, where the CPU lacks what the framework needs);
- compiler on: the framework's whole-step compiler, read back (or `unsupported` with the reason: JAX);
- out of memory: under the rank's memory budget a batch that fits trains and a larger one is an `oom` record
  (the framework's own allocation failure), not a crash;
- real data: each step takes the framework's input pipeline's next batch of the prepared records (ImageNet
  TFRecords, BERT's HDF5 shards), and two ranks read their own shares.

What is particular to a framework (its collectives' name, its settings read-back, how to make it run out of memory)
is test data in CASES, one entry per registered framework: a framework added to the registry fails here until it
has one. Framework-specific behaviour beyond the contract stays in that framework's own test files.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import dlbench
from conftest import (
    AVX512_CORE,
    REPO,
    assert_ranks_counted,
    env_python,
    harness_env,
    ok_or_skip,
    read_log,
    run_harness,
    running,
)
from dlbench.harness import bert
from dlbench.harness.frameworks import NAMES, REGISTRY
from dlbench.harness.sysinfo import cpu_flags
from dlbench.vocabulary.identity import THROUGHPUT_UNITS

STEPS = ["--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]
RESNET = ["--image-size", "32", "--batch-size", "2", *STEPS]
BERT = ["--seq-length", "32", "--batch-size", "2", *STEPS]
# harness/resnet.py's networks with 1000 classes (ResNet-50 v1.5's published count; ResNet-Tiny's fc holds 513,000)
PARAMETERS = {
    "resnet50": 25_557_032,
    "resnet_tiny": 1_019_384,
    "bert_tiny": bert.parameter_count(bert.CONFIGS["bert_tiny"]),
}


Check = Callable[[dict, dict, dict], None]  # (environment, header, summary) of a run: framework-specific asserts


def no_check(env: dict, header: dict, summary: dict) -> None:
    """Nothing beyond the contract."""


@dataclass(frozen=True)
class MemoryBudget:
    """A rank's CPU memory budget (--memory-limit-gb: RLIMIT_AS over the rank's own baseline) and two BERT-Tiny
    batches at 128 tokens: one that trains under it, one that cannot (the masked-LM logits alone take 2.4 MB a
    sequence). Budgets lie halfway between the address space the two sizes added here (tests/test_batchsearch.py
    says how they were measured), clear of the 1-2% by which identical runs differ."""

    budget_gb: float
    fits: int
    exceeds: int
    error_words: tuple[str, ...]


@dataclass(frozen=True)
class FrameworkCase:
    resnet: str  # the ResNet its runs train: ResNet-Tiny where it has one (ResNet-50's layers: its own test file)
    distributed: str  # environment.distributed_backend of a two-rank run
    compiler: str | None  # environment.compiler with compiler on; None: `unsupported`, saying compiler_unsupported
    memory_budget: MemoryBudget
    real_pipeline: tuple[str, str]  # environment.input_pipeline's start on real data: ResNet's, BERT's
    real_share: str  # words of input_pipeline in a two-rank run on real data: rank 0's share of the records
    compiler_unsupported: str = ""
    amp_needs: frozenset[str] = frozenset()  # CPU flags bfloat16 needs (without them: unsupported, saying so)
    cpu_amp_unsupported: str = ""  # words of the `unsupported` reason of AMP on every CPU (no bf16 kernels at all)
    resnet_one_rank: Check = no_check  # settings read back by the one-rank ResNet run
    bert_one_rank: Check = no_check
    two_ranks: Check = no_check
    amp: Check = no_check


def pytorch_resnet(env: dict, header: dict, summary: dict) -> None:
    settings = env["settings"]
    assert settings["intra_op_threads"] == header["threads_per_rank"] and settings["memory_format"] == "contiguous"
    assert settings["onednn"] is True and settings["summary"].startswith("oneDNN on (")
    assert settings["optimizer"] == "SGD fused" and settings["summary"].endswith(", SGD fused")
    assert settings["flush_denormal"] is True and ", subnormals flushed," in settings["summary"]
    # TFLOP/s achieved: the throughput times the model's training FLOPs per sample
    assert summary["achieved_tflops"] == pytest.approx(
        summary["throughput"] * summary["train_flops_per_sample"] / 1e12, rel=1e-12
    )


def bert_optimizer(prefix: str, *words: str) -> Check:
    """The BERT run's default optimizer, as the framework names it (AdamW with decoupled weight decay)."""

    def check(env: dict, header: dict, summary: dict) -> None:
        assert env["optimizer"].startswith(prefix) and all(w in env["optimizer"] for w in words), env["optimizer"]

    return check


def pytorch_two_ranks(env: dict, header: dict, summary: dict) -> None:
    assert len(header["cpu_shares"]) == 2 and len(header["cpu_shares"][0]) == header["threads_per_rank"]
    # the default strategy, read back from DDP (tests/test_strategies.py: the others)
    in_effect = env["strategy_in_effect"]
    assert in_effect["wrapper"] == "DistributedDataParallel" and in_effect["process_group_backend"] == "gloo"
    assert in_effect["bucket_cap_bytes"] == 25 * 2**20 and in_effect["comm_hook"] is None


def tensorflow_resnet(env: dict, header: dict, summary: dict) -> None:
    assert env["xla"] == "off" and env["threads"]["intra_op"] == header["threads_per_rank"]
    # oneDNN on (TensorFlow turns it on by itself only on AVX-512 VNNI/BF16 or AMX CPUs), read back from TensorFlow
    settings = env["settings"]
    assert settings["onednn"] is True and settings["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert settings["intra_op_threads"] == env["threads"]["intra_op"] and settings["summary"].startswith("oneDNN on,")
    assert settings["optimizer"] == "SGD fused" and settings["summary"].endswith(", SGD fused")


def tensorflow_amp(env: dict, header: dict, summary: dict) -> None:
    assert env["amp_policy"] == "mixed_bfloat16" and env["loss_scaling"] is False  # loss scaling: float16 only


def mxnet_resnet(env: dict, header: dict, summary: dict) -> None:
    assert env["cuda"] is None and env["cudnn"] is None and env["hybridize"] is False
    assert env["settings"]["omp_threads"] == header["threads_per_rank"] and not env["settings"]["hybridize"]
    assert env["settings"]["summary"].startswith(f"oneDNN {'on' if env['onednn'] else 'off'}, ")
    assert env["settings"]["optimizer_aggregation"] == 1  # one update call per tensor on CPU (4 is slower there)
    assert env["settings"]["flush_subnormals"] is True and ", subnormals flushed" in env["settings"]["summary"]
    assert env["threads"]["omp"] == header["threads_per_rank"] == summary["ranks"][0]["threads"]
    assert env["threads"]["OMP_NUM_THREADS"] == str(header["threads_per_rank"])


def mxnet_two_ranks(env: dict, header: dict, summary: dict) -> None:
    """Rank 0 starts ps-lite's scheduler and server; they end with the run."""
    assert [r["threads"] for r in summary["ranks"]] == [len(share) for share in header["cpu_shares"]]
    assert len(env["kvstore_processes"]) == 2 and not [pid for pid in env["kvstore_processes"] if running(pid)]
    in_effect = env["strategy_in_effect"]  # the default strategy (tests/test_strategies.py: the others)
    assert (in_effect["kvstore_type"], in_effect["update_on_kvstore"], in_effect["num_workers"]) == (
        "dist_sync",
        False,
        2,
    )


def jax_resnet(env: dict, header: dict, summary: dict) -> None:
    assert env["flax_version"] == "0.12.8" and env["optax_version"] == "0.2.8"
    assert env["cuda"] is None and "jax.jit" in env["jit"] and env["memory_format"] == "channels_last"
    assert env["threads"]["cpus"] == header["threads_per_rank"] == summary["ranks"][0]["threads"]
    assert env["settings"]["summary"].startswith(f"XLA CPU, {header['threads_per_rank']} cores, jit whole step")
    assert env["strategy_in_effect"] == {"summary": "none (one rank)"}


def jax_two_ranks(env: dict, header: dict, summary: dict) -> None:
    """Two processes joined by jax.distributed (Gloo), shard_map with the gradients' pmean."""
    in_effect = env["strategy_in_effect"]
    assert (in_effect["processes"], in_effect["devices"], in_effect["mesh"]) == (2, 2, {"data": 2})
    assert in_effect["collectives"] == "gloo (CPU)" and "lax.pmean in float32" in in_effect["step"]
    assert [r["threads"] for r in summary["ranks"]] == [len(share) for share in header["cpu_shares"]]


def jax_amp(env: dict, header: dict, summary: dict) -> None:
    assert env["loss_scaling"] is False and env["settings"]["compute_dtype"] == "bfloat16"  # float32 parameters


def paddle_resnet(env: dict, header: dict, summary: dict) -> None:
    """Paddle's own thread setting, read back from the OpenMP and MKL runtimes it loaded (not its import's 1)."""
    settings = env["settings"]
    assert settings["openmp_threads"] == settings["mkl_threads"] == header["threads_per_rank"]
    assert settings["summary"].startswith("oneDNN off, ") and "dynamic graph, Momentum" in settings["summary"]


def paddle_two_ranks(env: dict, header: dict, summary: dict) -> None:
    """Two processes in Paddle's collective mode (Gloo), DataParallel's bucketed all-reduce."""
    strategy = env["strategy_in_effect"]
    assert strategy["wrapper"] == "DataParallel" and strategy["ranks"] == 2 and strategy["comm_buffer_mb"] > 0


CASES: dict[str, FrameworkCase] = {
    "pytorch": FrameworkCase(
        resnet="resnet_tiny",
        distributed="gloo",
        compiler="torch.compile",
        memory_budget=MemoryBudget(0.8, fits=32, exceeds=64, error_words=("allocate",)),
        real_pipeline=("DALI 2.4.0 fn.readers.tfrecord", "h5py NVIDIA HDF5"),
        real_share="DALI",
        resnet_one_rank=pytorch_resnet,
        bert_one_rank=bert_optimizer("AdamW", "decoupled weight decay"),
        two_ranks=pytorch_two_ranks,
    ),
    "tensorflow": FrameworkCase(
        resnet="resnet_tiny",
        distributed="MultiWorkerMirroredStrategy (ring)",
        compiler="xla",
        # oneDNN grows the address space in large steps: at 1.1 GiB, 32 trains (150 MiB spare) and 64 fails at once
        memory_budget=MemoryBudget(1.1, fits=32, exceeds=64, error_words=("ResourceExhaustedError",)),
        real_pipeline=("tf.data TFRecordDataset", "tf.data TFRecordDataset"),
        real_share="1 of 2 files",
        resnet_one_rank=tensorflow_resnet,
        bert_one_rank=bert_optimizer("AdamW"),
        amp=tensorflow_amp,
    ),
    "mxnet": FrameworkCase(
        resnet="resnet50",
        distributed="kvstore dist_sync",
        compiler="hybridize(static_alloc, static_shape)",
        memory_budget=MemoryBudget(1.42, fits=32, exceeds=64, error_words=("Failed to allocate CPU Memory",)),
        real_pipeline=("DALI 2.4", "h5py NVIDIA HDF5"),
        real_share="shard 0 of 2",
        amp_needs=frozenset(AVX512_CORE),
        resnet_one_rank=mxnet_resnet,
        bert_one_rank=bert_optimizer("AdamWeightDecay"),
        two_ranks=mxnet_two_ranks,
    ),
    "jax": FrameworkCase(
        resnet="resnet_tiny",
        distributed="jax.distributed (gloo)",
        compiler=None,
        compiler_unsupported="JAX compiles every training step with XLA (jax.jit)",
        memory_budget=MemoryBudget(1.0, fits=2, exceeds=512, error_words=("RESOURCE_EXHAUSTED",)),
        real_pipeline=("DALI 2.4", "h5py NVIDIA HDF5"),
        real_share="shard 0 of 2",  # fmt: skip
        resnet_one_rank=jax_resnet,
        bert_one_rank=bert_optimizer("AdamW (optax.adamw"),
        two_ranks=jax_two_ranks,
        amp=jax_amp,
    ),
    "paddle": FrameworkCase(
        resnet="resnet_tiny",
        distributed="paddle collective (gloo)",
        compiler="paddle.jit.to_static",
        memory_budget=MemoryBudget(0.62, fits=32, exceeds=64, error_words=("ResourceExhausted", "Fail to alloc")),
        real_pipeline=("DALI 2.4", "h5py NVIDIA HDF5"),
        real_share="shard 0 of 2",
        cpu_amp_unsupported="no bfloat16 training kernels on a CPU",
        resnet_one_rank=paddle_resnet,
        bert_one_rank=bert_optimizer("AdamW (paddle.optimizer.AdamW", "decoupled weight decay"),
        two_ranks=paddle_two_ranks,
    ),
}
FAST = "pytorch"  # the fast tier's framework: its one-rank, two-rank and out-of-memory cases (the rest: full tier)


def tier(name: str, fast: bool) -> tuple:
    return () if fast and name == FAST else (pytest.mark.slow,)


def contract_params(*families: str, fast: bool = True) -> list:
    """(framework, model family) cases; the fast tier runs FAST's where `fast`, the full tier all of them."""
    return [
        pytest.param(name, family, id=f"{name}-{family}", marks=tier(name, fast and family == families[0]))
        for name in NAMES
        for family in families
    ]


def pinned_version(framework: str) -> str:
    """The version envs/<framework>.yaml pins of the framework's distribution (frameworks.py: its package)."""
    package = REGISTRY[framework].package
    text = (REPO / "envs" / f"{framework}.yaml").read_text()
    found = re.search(rf"^\s*- {re.escape(package)}(?:\[[\w,-]+\]|-cu\d+)?==([\w.]+)", text, re.MULTILINE)
    assert found, f"envs/{framework}.yaml pins no {package}"
    return found[1]


def assert_header_names_the_machine(header: dict) -> None:
    """Where and how a run ran, and which dlbench measured it: the header of every framework's run log."""
    assert header["config"]["topology"] == "1x1" and header["threads_per_rank"] >= 1
    assert header["cpu_model"] and header["hostname"] and header["python"]
    assert header["dlbench_version"] == dlbench.__version__
    # ... on which CPU generation: /proc/cpuinfo's name, family and model, widest vector instructions (a VM's
    # generic "AMD EPYC" covers AVX2 and AVX-512 machines alike)
    cpuinfo = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in cpuinfo.splitlines()))
    if "model name" in fields:
        assert header["cpu_model"].startswith(fields["model name"])
    if "cpu family" in fields:
        assert f"family {fields['cpu family']} model {fields['model']}" in header["cpu_model"]
    flags = set(fields.get("flags", "").split())
    if {"avx512f", "avx512_bf16"} <= flags and not {"amx_bf16", "amx_tile"} <= flags:
        assert header["cpu_model"].endswith(", AVX-512 BF16)")
    elif "avx2" in flags and "fma" in flags and "avx512f" not in flags:
        assert header["cpu_model"].endswith(", AVX2)")
    # ... and the node the report's hardware line names: logical CPUs, memory (MemTotal), OS with its kernel
    machine = header["machine"]
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_kib = next(int(line.split()[1]) for line in meminfo if "MemTotal" in line)
    assert machine["cpu_count"] == os.cpu_count() and machine["memory_bytes"] == mem_kib * 1024
    assert machine["os"].endswith(f"({os.uname().release})")


def harness_run(
    framework: str, model: str, log: Path, *args: str, python: Path | None = None
) -> tuple[dict[str, list[dict]], str]:
    """One real harness run of `framework` (which exits 0 whatever the run's status); its log by kind, its stderr."""
    result = run_harness(python or env_python(framework), log, *args, framework=framework, model=model, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return read_log(log), result.stderr


def test_every_registered_framework_has_a_contract_case():
    assert sorted(CASES) == sorted(NAMES)


@pytest.mark.parametrize(("framework", "family"), contract_params("resnet", "bert"))
def test_one_rank_throughput_is_samples_over_measured_wall_time(framework, family, tmp_path):
    case = CASES[framework]
    model, args = (case.resnet, RESNET) if family == "resnet" else ("bert_tiny", BERT)
    entries, stderr = harness_run(framework, model, tmp_path / "run.jsonl", "--topology", "1x1", *args)
    summary, header = entries["summary"][-1], entries["header"][0]
    assert summary["status"] == "ok", (summary, stderr[-3000:])
    env = entries["environment"][0]
    measured = [s["seconds"] for s in entries["step"] if s["phase"] == "measure"]
    assert len(measured) == 3 and len([s for s in entries["step"] if s["phase"] == "warmup"]) == 1
    assert summary["samples"] == 2 * 3 and summary["world_size"] == 1
    assert summary["throughput"] == pytest.approx(summary["samples"] / summary["elapsed_s"], rel=1e-12)
    assert summary["throughput"] == pytest.approx(summary["samples"] / sum(measured), rel=1e-9)
    unit = THROUGHPUT_UNITS[family]
    assert summary["unit"] == unit and unit in stderr  # human-readable progress on stderr
    assert env["framework"] == framework and env["framework_version"].startswith(pinned_version(framework))
    assert env["parameters"] == PARAMETERS[model]
    assert env["device_type"] == "cpu" and env["world_size"] == 1 and env["distributed_backend"] is None
    assert env["compiler"] is None and env["amp_dtype"] is None
    assert_header_names_the_machine(header)
    if family == "resnet":
        # Cross-entropy is >= 0 up to float rounding (MXNet reads about -1e-6 once two images are memorised)
        assert math.isfinite(summary["loss_final"]) and summary["loss_final"] > -1e-4
        case.resnet_one_rank(env, header, summary)
    else:
        assert 9 < summary["loss_final"] < 13  # chance level at initialisation: ln(30522) + ln(2)
        assert env["optimizer"] and env["grad_clip"] is False and env["clip_norm"] is None
        assert env["seq_length"] == 32 and env["max_predictions"] == 5  # ceil(0.15 x 32)
        case.bert_one_rank(env, header, summary)


@pytest.mark.parametrize(("framework", "family"), contract_params("resnet", "bert"))
def test_two_ranks_really_run_and_are_counted(framework, family, tmp_path):
    """1x2: two processes joined by the framework's collectives; both ranks' samples count. BERT's runs add LAMB
    and gradient clipping (one rank's: the framework's direct API checks)."""
    case = CASES[framework]
    log = tmp_path / "run.jsonl"
    if family == "resnet":
        entries, stderr = harness_run(framework, case.resnet, log, "--topology", "1x2", *RESNET)
    else:
        entries, stderr = harness_run(
            framework, "bert_tiny", log, "--topology", "1x2", "--optimizer", "lamb", "--grad-clip", "on", *BERT
        )
    summary, header = entries["summary"][-1], entries["header"][0]
    assert_ranks_counted(summary, ranks=2, batch_size=2, steps=3)
    env = entries["environment"][0]
    assert summary["throughput"] == pytest.approx(summary["samples"] / summary["elapsed_s"], rel=1e-12)
    assert math.isfinite(summary["loss_final"])
    assert env["distributed_backend"] == case.distributed and env["world_size"] == 2
    assert not (tmp_path / "run.jsonl.ranks").exists()  # the ranks' own logs were merged and removed
    if family == "bert":
        assert env["optimizer"].startswith("LAMB") and env["grad_clip"] is True and env["clip_norm"] == 1.0
    case.two_ranks(env, header, summary)


@pytest.mark.parametrize(("framework", "family"), contract_params("resnet", "bert", fast=False))
def test_amp_runs_in_bfloat16_on_cpu(framework, family, tmp_path):
    case = CASES[framework]
    model, args = (case.resnet, RESNET) if family == "resnet" else ("bert_tiny", BERT)
    log = tmp_path / "run.jsonl"
    entries, stderr = harness_run(framework, model, log, "--topology", "1x1", "--precision", "amp", *args)
    summary = entries["summary"][-1]
    if case.cpu_amp_unsupported:
        assert summary["status"] == "unsupported" and case.cpu_amp_unsupported in summary["error"], summary
        return
    if not case.amp_needs <= cpu_flags():
        assert summary["status"] == "unsupported", summary
        assert "bfloat16" in summary["error"] and "AVX-512" in summary["error"]
        return
    env = ok_or_skip(entries, stderr)
    assert env["amp_dtype"] == "bfloat16" and math.isfinite(summary["loss_final"])
    case.amp(env, entries["header"][0], summary)


@pytest.mark.parametrize("framework", [pytest.param(name, id=name, marks=tier(name, False)) for name in NAMES])
def test_the_cpu_peak_is_measured_in_fp32_and_bf16(framework, tmp_path):
    """The machine's peaks for MFU in the framework's own library (rule cpu_peak's command): an fp32 figure, and a
    bf16 one, what AMP on a CPU multiplies in; where the framework cannot multiply in bf16 here, the reason."""
    out = tmp_path / "peak.json"
    command = ["-m", "dlbench.harness.peak", "--library", framework, "--n", "128", "--quiet", "1", "--wait", "0"]
    done = subprocess.run(
        [env_python(framework), *command, "--out", out], env=harness_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["library"] == framework and record["gflops"] > 0 and record["reason"] is None
    case = CASES[framework]
    if case.cpu_amp_unsupported:  # no bf16 kernels on any CPU: the peak says why, as the AMP runs do
        assert record["bf16_gflops"] is None and framework in record["bf16_reason"], record
    elif case.amp_needs <= cpu_flags():
        assert record["bf16_gflops"] > 0 and record["bf16_reason"] is None, record
    else:
        assert record["bf16_gflops"] is not None or framework in record["bf16_reason"], record
    assert f"{framework} bf16 GEMM peak on {record['cpu']}" in done.stdout


@pytest.mark.parametrize(("framework", "family"), contract_params("resnet", fast=False))
def test_compiler_on_is_the_frameworks_whole_step_compiler(framework, family, tmp_path):
    case = CASES[framework]
    log = tmp_path / "run.jsonl"
    entries, stderr = harness_run(framework, case.resnet, log, "--topology", "1x1", "--compiler", "on", *RESNET)
    summary = entries["summary"][-1]
    if case.compiler is None:
        assert summary["status"] == "unsupported" and case.compiler_unsupported in summary["error"], summary
        return
    env = ok_or_skip(entries, stderr)
    assert env["compiler"] == case.compiler


@pytest.mark.parametrize("framework", [pytest.param(name, id=name, marks=tier(name, True)) for name in NAMES])
def test_a_batch_beyond_the_memory_budget_is_an_out_of_memory_record(framework, tmp_path):
    """Under the rank's memory budget, a batch that fits trains and one that cannot is recorded as oom: the
    framework's own allocation failure (the run itself exits 0: a failure is data), in its words, never a kill by
    a signal. The batch-size search (tests/test_batchsearch.py) stands on exactly this, in every framework."""
    budget = CASES[framework].memory_budget
    args = ["--topology", "1x1", "--seq-length", "128", "--warmup-steps", "1", "--measured-steps", "1"]
    args += ["--device", "cpu", "--memory-limit-gb", str(budget.budget_gb)]
    fits, _ = harness_run(framework, "bert_tiny", tmp_path / "fits.jsonl", *args, "--batch-size", str(budget.fits))
    assert fits["summary"][-1]["status"] == "ok", fits["summary"][-1]
    entries, _ = harness_run(framework, "bert_tiny", tmp_path / "oom.jsonl", *args, "--batch-size",
                             str(budget.exceeds))  # fmt: skip
    summary = entries["summary"][-1]
    assert summary["status"] == "oom", summary
    assert all(word in summary["error"] for word in budget.error_words), summary["error"]
    assert "killed by signal" not in summary["error"]
    assert summary["memory"]["memory_limit_gb"] == budget.budget_gb  # the budget, recorded with the failure


REAL = ["--batch-size", "4", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu", "--data", "real"]


@pytest.mark.parametrize(("framework", "family"), contract_params("resnet", "bert"))
def test_real_data_steps_take_the_pipelines_batches(framework, family, real_data, tmp_path):
    case = CASES[framework]
    if family == "resnet":
        model, args = case.resnet, ["--image-size", "32", "--data-dir", str(real_data["imagenet"])]
    else:
        model, args = "bert_tiny", ["--seq-length", "128", "--data-dir", str(real_data["bert128"])]
    entries, _ = harness_run(framework, model, tmp_path / "run.jsonl", "--topology", "1x1", *REAL, *args)
    summary = entries["summary"][-1]
    assert_ranks_counted(summary, ranks=1, batch_size=4, steps=3)
    env = entries["environment"][0]
    assert summary["unit"] == THROUGHPUT_UNITS[family] and entries["header"][0]["config"]["data"] == "real"
    pipeline = env["input_pipeline"]
    assert pipeline.startswith(case.real_pipeline[family == "bert"]), pipeline
    losses = [s["loss"] for s in entries["step"] if "loss" in s]
    assert losses and all(math.isfinite(v) for v in losses) and summary["loss_final"] > 0
    if family == "bert":  # the shards' own shapes: 128 tokens, 20 masked positions
        assert env["seq_length"] == 128 and env["max_predictions"] == 20


@pytest.mark.parametrize("framework", [pytest.param(name, id=name, marks=pytest.mark.slow) for name in NAMES])
def test_real_data_ranks_read_their_own_share(framework, real_data, tmp_path):
    case = CASES[framework]
    args = ["--image-size", "32", "--data-dir", str(real_data["imagenet"])]
    entries, _ = harness_run(framework, case.resnet, tmp_path / "run.jsonl", "--topology", "1x2", *REAL, *args)
    assert_ranks_counted(entries["summary"][-1], ranks=2, batch_size=4, steps=3)
    pipeline = entries["environment"][0]["input_pipeline"]
    assert pipeline.startswith(case.real_pipeline[0]) and case.real_share in pipeline, pipeline
