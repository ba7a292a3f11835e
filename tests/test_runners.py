"""Runners: external benchmark commands run by the supervisor as frameworks of a study (harness/runner.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import read_log, run_harness
from dlbench.harness import runner
from dlbench.harness.spec import RunSpec, Unsupported

RUNNER = {
    "command": [
        "{python}",
        "train.py",
        "-b",
        "{batch_size}",
        "--gbs={global_batch_size}",
        "{precision_args}",
        "--steps",
        "{steps}",
        "--out",
        "{run_dir}/x.json",
    ],
    "format": "dllogger",
    "models": ["resnet50"],
    "launcher": "none",
    "flags": {"precision": {"fp32": [], "amp": ["--amp", "--static-loss-scale", "128"]}},
}


def spec(**changes) -> RunSpec:
    values = dict(
        framework="dle",
        model="resnet50",
        nodes=1,
        devices_per_node=2,
        batch_size=64,
        precision="amp",
        compiler=False,
        data="synthetic",
        image_size=224,
        warmup_steps=20,
        measured_steps=100,
        repeat=1,
        config_id="c",
        log="l.jsonl",
    )
    return RunSpec(**{**values, **changes})


def test_render_fills_placeholders_and_flag_groups(tmp_path):
    argv = runner.render(spec(), RUNNER, tmp_path)
    assert argv == [
        sys.executable,
        "train.py",
        "-b",
        "64",
        "--gbs=128",
        "--amp",
        "--static-loss-scale",
        "128",
        "--steps",
        "120",
        "--out",
        f"{tmp_path.resolve()}/x.json",
    ]
    assert runner.render(spec(precision="fp32"), RUNNER, tmp_path)[5:7] == ["--steps", "120"]


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"model": "bert_base"}, "does not train bert_base"),
        ({"compiler": True}, "has no flags for compiler compile"),
        ({"data": "real"}, "has no flags for data real"),
    ],
)
def test_what_a_runner_cannot_express_is_unsupported(tmp_path, changes, reason):
    with pytest.raises(Unsupported, match=reason):
        runner.render(spec(**changes), RUNNER, tmp_path)


def test_values_never_reach_a_shell(tmp_path):
    """A value with shell syntax stays one argument: nothing is executed."""
    odd = tmp_path / "a dir; touch PWNED $(touch PWNED2) 'q'"
    argv = runner.render(spec(data_dir=str(odd)), {**RUNNER, "command": ["echo", "{data_dir}"]}, tmp_path)
    assert argv == ["echo", str(odd)]
    with pytest.raises(Unsupported, match="unknown placeholder"):
        runner.render(spec(), {**RUNNER, "command": ["echo", "{__class__}"]}, tmp_path)


def test_launchers():
    assert runner.launch(spec(), {"launcher": "torchrun"}, ["train.py"], in_slurm=False)[:5] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        "--standalone",
    ]
    assert runner.launch(spec(), {"launcher": "mpirun"}, ["a"], in_slurm=False) == ["mpirun", "-np", "2", "a"]
    with pytest.raises(Unsupported, match="needs a SLURM allocation"):
        runner.launch(spec(), {"launcher": "srun"}, ["a"], in_slurm=False)
    with pytest.raises(Unsupported, match="spans 2 nodes"):
        runner.launch(spec(nodes=2), {"launcher": "none"}, ["a"], in_slurm=False)
    # Several nodes: one torchrun per node, started by srun, meeting at one endpoint.
    several = runner.launch(spec(nodes=2), {"launcher": "torchrun"}, ["t.py"], in_slurm=True)
    assert several[:3] == ["srun", "--nodes=2", "--ntasks-per-node=1"] and "--nnodes=2" in several


def supervised(tmp_path: Path, code: str, *args: str) -> dict:
    """The summary line of a real supervised run of `python -c code` as a runner."""
    definition = {"command": ["{python}", "-c", code], "format": "dllogger", "models": ["resnet50"]}
    log = tmp_path / "rep1.jsonl"
    result = run_harness(
        Path(sys.executable),
        log,
        "--topology",
        "1x1",
        "--batch-size",
        "2",
        "--framework",
        "probe",
        "--runner",
        json.dumps(definition),
        *args,
        framework="probe",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return read_log(log)["summary"][-1]


def test_runner_failures_are_records(tmp_path):
    oom = supervised(tmp_path, "import sys; print('CUDA out of memory. Tried to allocate 2 GiB'); sys.exit(1)")
    assert oom["status"] == "oom" and "out of memory" in oom["error"]
    crash = supervised(tmp_path, "import sys; print('boom'); sys.exit(7)")
    assert crash["status"] == "error" and "exited with code 7" in crash["error"] and "boom" in crash["error"]
    killed = supervised(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert killed["status"] == "error" and "signal 11" in killed["error"]
    slow = supervised(tmp_path, "import time; time.sleep(60)", "--timeout-s", "2")
    assert slow["status"] == "timeout"
    silent = supervised(tmp_path, "pass")
    assert silent["status"] == "ok" and silent["external_log"].endswith("rep1.runner/output.log")
