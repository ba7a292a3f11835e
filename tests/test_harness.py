"""The harness, for real: PyTorch ResNet-50 v1.5 at tiny shapes on CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import harness_command, harness_env, read_log, run_harness

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


def test_pytorch_on_the_cpu_flushes_subnormals_in_every_thread(torch_python):
    """A ResNet-50 whose residual branches start at γ = 0 produces subnormal floats, which the CPU computes slowly
    (a step 15-20% slower on an Intel Xeon): the backend flushes them, in the OpenMP threads of a parallel product
    too; the plain interpreter does not."""
    code = """
import sys, torch
from dlbench.harness.spec import RunSpec
from dlbench.harness.backends.pytorch.backend import Backend
if sys.argv[1] == "backend":
    spec = RunSpec.of(framework="pytorch", model="resnet_tiny", nodes=1, devices_per_node=1, batch_size=2,
                      precision="fp32", compiler=False, data="synthetic", warmup_steps=1, measured_steps=1, repeat=1,
                      config_id="t", log="/dev/null", device="cpu")
    Backend(spec, rank=0, world=1, local_rank=0, threads=2)
tiny = torch.full((1 << 20,), 1e-39)  # subnormal in fp32; a million elements: split over the OpenMP threads
print(float((tiny * 3.0).abs().sum()))
"""
    run = lambda mode: subprocess.run(  # noqa: E731
        [str(torch_python), "-c", code, mode], env=harness_env(), capture_output=True, text=True, check=True
    )
    assert float(run("plain").stdout) > 0
    assert float(run("backend").stdout) == 0.0


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
    options = {"topology": "1x1", "image_size": 32, "batch_size": 2, "warmup_steps": 100000, "measured_steps": 1}
    cmd = harness_command(torch_python, log, {**options, "device": "cpu"})
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
