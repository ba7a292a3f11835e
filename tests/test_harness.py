"""The harness, for real: PyTorch ResNet-50 v1.5 at tiny shapes on CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import dlbench
from conftest import assert_ranks_counted, harness_env, read_log, run_harness

TINY = ["--image-size", "32", "--batch-size", "2", "--warmup-steps", "1", "--measured-steps", "3", "--device", "cpu"]


def test_resnet50_v1_5_has_the_reference_parameter_count_and_strides(torch_python):
    code = (
        "from dlbench.harness.backends.pytorch.resnet import ResNet50, parameter_count\n"
        "m = ResNet50()\n"
        "down = [b for b in m.layers if b.downsample is not None]\n"
        "print(parameter_count(m), [b.conv1.stride[0] for b in down], [b.conv2.stride[0] for b in down])\n"
    )
    out = subprocess.run(
        [str(torch_python), "-c", code], env=harness_env(), capture_output=True, text=True, check=True
    ).stdout.split(maxsplit=1)
    assert int(out[0]) == 25_557_032
    # v1.5: the stride of a downsampling bottleneck sits on its 3x3 convolution, not the first 1x1
    assert out[1].strip() == "[1, 1, 1, 1] [1, 2, 2, 2]"


def test_flop_count_matches_pytorchs_flop_counter(torch_python):
    """The architecture-derived FLOPs equal what torch.utils.flop_counter measures on the real model."""
    code = (
        "import torch\n"
        "from torch.utils.flop_counter import FlopCounterMode\n"
        "from dlbench.harness.backends.pytorch.resnet import ResNet50\n"
        "from dlbench.harness.flops import model_flops\n"
        "for size in (64, 224):\n"
        "    with FlopCounterMode(display=False) as counter:\n"
        "        ResNet50().eval()(torch.randn(1, 3, size, size))\n"
        "    print(counter.get_total_flops(), 2 * model_flops('resnet50', size)['forward_macs_per_sample'])\n"
    )
    out = subprocess.run(
        [str(torch_python), "-c", code], env=harness_env(), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for line in out:
        measured, ours = map(int, line.split())
        assert measured == ours
    assert int(out[1].split()[0]) == pytest.approx(2 * 4.09e9, rel=1e-3)


def test_throughput_is_samples_over_measured_wall_time(torch_python, tmp_path):
    log = tmp_path / "run.jsonl"
    result = run_harness(torch_python, log, "--topology", "1x1", *TINY)
    assert result.returncode == 0, result.stderr
    entries = read_log(log)
    summary = entries["summary"][0]
    header = entries["header"][0]
    measured = [s["seconds"] for s in entries["step"] if s["phase"] == "measure"]
    assert summary["status"] == "ok"
    assert len(measured) == 3 and len([s for s in entries["step"] if s["phase"] == "warmup"]) == 1
    assert summary["samples"] == 2 * 3
    assert summary["throughput"] == pytest.approx(summary["samples"] / summary["elapsed_s"], rel=1e-12)
    assert summary["throughput"] == pytest.approx(summary["samples"] / sum(measured), rel=1e-9)
    assert summary["achieved_tflops"] == pytest.approx(
        summary["throughput"] * summary["train_flops_per_sample"] / 1e12, rel=1e-12
    )
    # the header says where and how it ran
    assert header["config"]["topology"] == "1x1" and header["threads_per_rank"] >= 1
    assert header["cpu_model"] and header["hostname"] and header["python"]
    assert header["dlbench_version"] == dlbench.__version__  # ... and which dlbench measured it
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
    mem_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if "MemTotal" in line
    )
    assert machine["cpu_count"] == os.cpu_count() and machine["memory_bytes"] == mem_kib * 1024
    assert machine["os"].endswith(f"({os.uname().release})")
    env = entries["environment"][0]
    assert env["framework_version"].startswith("2.13.0") and env["parameters"] == 25_557_032
    # the settings in effect, read back from PyTorch (what explains one framework beating another)
    settings = env["settings"]
    assert settings["intra_op_threads"] == header["threads_per_rank"] and settings["memory_format"] == "contiguous"
    assert settings["onednn"] is True and settings["summary"].startswith("oneDNN on (")
    assert settings["optimizer"] == "SGD fused" and settings["summary"].endswith(", SGD fused")
    assert "images/s" in result.stderr  # human-readable progress on stderr


def test_two_ranks_really_run_and_are_counted(torch_python, tmp_path):
    log = tmp_path / "run.jsonl"
    result = run_harness(torch_python, log, "--topology", "1x2", *TINY)
    assert result.returncode == 0, result.stderr
    entries = read_log(log)
    summary, header = entries["summary"][0], entries["header"][0]
    assert_ranks_counted(summary, ranks=2, batch_size=2, steps=3)  # both ranks' samples count
    assert entries["environment"][0]["distributed_backend"] == "gloo"
    # each rank got its own share of the cores
    shares = header["cpu_shares"]
    assert len(shares) == 2 and len(shares[0]) == header["threads_per_rank"]


@pytest.mark.slow
def test_amp_runs_in_bfloat16_on_cpu(torch_python, tmp_path):
    log = tmp_path / "run.jsonl"
    run_harness(torch_python, log, "--topology", "1x1", "--precision", "amp", *TINY)
    entries = read_log(log)
    assert entries["summary"][0]["status"] == "ok"
    assert entries["environment"][0]["amp_dtype"] == "bfloat16"


def test_out_of_memory_is_a_record(torch_python, tmp_path):
    """A batch far larger than the machine's memory: a real allocation failure, classified oom."""
    log = tmp_path / "run.jsonl"
    result = run_harness(
        torch_python,
        log,
        "--topology",
        "1x1",
        "--image-size",
        "224",
        "--batch-size",
        "400000",
        "--warmup-steps",
        "1",
        "--measured-steps",
        "1",
    )
    assert result.returncode == 0
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "oom"
    assert "allocate" in summary["error"]


def test_failed_rank_in_two_rank_run_is_reported(torch_python, tmp_path):
    log = tmp_path / "run.jsonl"
    run_harness(
        torch_python,
        log,
        "--topology",
        "1x2",
        "--image-size",
        "224",
        "--batch-size",
        "400000",
        "--warmup-steps",
        "1",
        "--measured-steps",
        "1",
    )
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "oom"
    assert not (tmp_path / "run.jsonl.ranks").exists()


def test_time_limit_gives_timeout_record(torch_python, tmp_path):
    log = tmp_path / "run.jsonl"
    run_harness(
        torch_python,
        log,
        "--topology",
        "1x1",
        "--image-size",
        "32",
        "--batch-size",
        "2",
        "--warmup-steps",
        "0",
        "--measured-steps",
        "100000",
        "--timeout-s",
        "5",
    )
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "timeout"
    assert "time limit of 5 s" in summary["error"]


def test_multi_node_without_slurm_is_unsupported(torch_python, tmp_path):
    log = tmp_path / "run.jsonl"
    run_harness(torch_python, log, "--topology", "2x1", *TINY)
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "unsupported"
    assert "SLURM" in summary["error"]


def test_rank_killed_from_outside_still_ends_the_log(torch_python, tmp_path):
    """SIGKILL a rank mid-run, as the kernel's OOM killer would: the log still gets a failure summary."""
    log = tmp_path / "run.jsonl"
    cmd = [
        str(torch_python),
        "-m",
        "dlbench.harness",
        "--framework",
        "pytorch",
        "--model",
        "resnet50",
        "--log",
        str(log),
        "--topology",
        "1x1",
        "--image-size",
        "32",
        "--batch-size",
        "2",
        "--warmup-steps",
        "100000",
        "--measured-steps",
        "1",
        "--device",
        "cpu",
    ]
    launcher = subprocess.Popen(cmd, env=harness_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    partial = log.with_name(log.name + ".partial")  # the log's name until the run is complete
    while '"phase":"warmup"' not in (partial.read_text() if partial.exists() else ""):
        assert time.monotonic() < deadline and launcher.poll() is None
        time.sleep(0.2)
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
    assert len(children) == 1
    os.kill(int(children[0]), signal.SIGKILL)
    assert launcher.wait(timeout=60) == 0
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "error"
    assert "killed by signal 9" in summary["error"]


@pytest.mark.slow
def test_compiler_on_uses_torch_compile(torch_python, tmp_path):
    # resnet_tiny: ResNet-50's bottleneck code at a quarter of the widths and one block per stage, so Inductor
    # compiles the same kind of graph in half of ResNet-50's compile time.
    log = tmp_path / "run.jsonl"
    result = run_harness(
        torch_python, log, "--topology", "1x1", "--compiler", "on", *TINY, model="resnet_tiny", timeout=1200
    )
    entries = read_log(log)
    summary = entries["summary"][-1]
    assert summary["status"] == "ok", (summary, result.stderr[-3000:])
    assert entries["environment"][0]["compiler"] == "torch.compile"
