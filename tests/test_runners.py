"""Runners: external benchmark commands run by the supervisor as frameworks of a study (harness/runner.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from conftest import run_runner, run_spec
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
    "fixed_inputs": {"image_size": 224},
}


def spec(**changes) -> RunSpec:
    """The runner's run: 1x2 at batch 64 in AMP, 224 pixels, DLPerf's 20 + 100 steps."""
    dle = dict(framework="dle", devices_per_node=2, batch_size=64, precision="amp", image_size=224)
    return run_spec(**{**dle, "warmup_steps": 20, "measured_steps": 100, **changes})


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
        ({"warmup_steps": "auto"}, "runs a fixed number of warm-up steps: warmup_steps auto"),
    ],
)
def test_what_a_runner_cannot_express_is_unsupported(tmp_path, changes, reason):
    with pytest.raises(Unsupported, match=reason):
        runner.render(spec(**changes), RUNNER, tmp_path)


def test_a_model_input_the_command_cannot_take_is_unsupported(tmp_path):
    """A record carries the image size (sequence length) its command trained at: passed through where the command
    has the placeholder, else only the declared fixed value runs."""
    bare = {k: v for k, v in RUNNER.items() if k != "fixed_inputs"}
    with pytest.raises(Unsupported, match=r"cannot honour image_size 224: its command has no \{image_size\}"):
        runner.render(spec(), bare, tmp_path)
    with pytest.raises(Unsupported, match="trains at image_size 224 only .*this run asks for 64"):
        runner.render(spec(image_size=64), RUNNER, tmp_path)
    sized = {**bare, "command": [*bare["command"], "--image-size={image_size}"]}
    assert runner.render(spec(image_size=64), sized, tmp_path)[-1] == "--image-size=64"
    # In a flag group: honoured only for the axis value whose flags carry it.
    by_data = {**bare, "command": [*bare["command"], "{data_args}"]}
    by_data["flags"] = {**bare["flags"], "data": {"synthetic": ["--size={image_size}"], "real": ["--dir={data_dir}"]}}
    assert runner.render(spec(image_size=64), by_data, tmp_path)[-1] == "--size=64"
    with pytest.raises(Unsupported, match="cannot honour image_size 64"):
        runner.render(spec(image_size=64, data="real", data_dir=str(tmp_path)), by_data, tmp_path)
    # BERT: the sequence length.
    bert = {**bare, "models": ["bert_tiny"], "fixed_inputs": {"seq_length": 128}}
    assert runner.render(spec(model="bert_tiny", seq_length=128), bert, tmp_path)
    with pytest.raises(Unsupported, match="trains at seq_length 128 only"):
        runner.render(spec(model="bert_tiny", seq_length=512), bert, tmp_path)


def test_devices_a_runner_lacks_are_unsupported_with_the_reason(tmp_path):
    gpu_only = {
        **RUNNER,
        "command": [*RUNNER["command"], "{device_args}"],
        "flags": {**RUNNER["flags"], "device": {"cuda": ["--gpu"]}},
        "unsupported": {"device": {"cpu": "the script hard-wires CUDA"}},
    }
    assert runner.render(spec(device="cuda"), gpu_only, tmp_path)[-1] == "--gpu"
    with pytest.raises(Unsupported, match="cannot express device cpu .*: the script hard-wires CUDA"):
        runner.render(spec(device="cpu"), gpu_only, tmp_path)
    # Without device flags a runner runs on any device, with no arguments.
    assert runner.render(spec(device="cpu"), RUNNER, tmp_path) == runner.render(spec(device="cuda"), RUNNER, tmp_path)


def test_auto_device_is_cpu_where_no_gpu_is_visible(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert runner.device(spec(device="auto")) == "cpu"
    assert runner.device(spec(device="cuda")) == "cuda"


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
    definition = {
        "command": ["{python}", "-c", code],
        "format": "dllogger",
        "models": ["resnet50"],
        "fixed_inputs": {"image_size": 224},
    }
    return run_runner(Path(sys.executable), tmp_path / "rep1.jsonl", definition, *args)


def failed(tmp_path: Path, output: str, code: int = 1) -> str:
    """The error a runner's failure gives for this output (written where the command's output goes)."""
    directory = tmp_path / "rep1.runner"
    directory.mkdir(exist_ok=True)
    (directory / runner.OUTPUT_NAME).write_text(output)
    result = runner.outcome(spec(), RUNNER, directory, code)
    assert result["status"] == "error"
    return result["error"]


# torchrun's report after a worker failed (PyTorch 2.x), trimmed: the worker's traceback comes first.
TORCHRUN_FOOTER = """Traceback (most recent call last):
  File "/usr/lib/python3.12/runpy.py", line 198, in _run_module_as_main
  File "/opt/venv/lib/python3.12/site-packages/torch/distributed/run.py", line 892, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
main.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_21:14:03
  host      : node1
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 4242)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_the_error_names_what_failed_not_the_launchers_footer(tmp_path):
    worker = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/work/DeepLearningExamples/PyTorch/Classification/ConvNets/main.py", line 63, in <module>
[rank0]:     import dllogger
[rank0]: ModuleNotFoundError: No module named 'dllogger'
"""
    error = failed(
        tmp_path,
        "W1126 21:14:01.000 torch/distributed/run.py:793] Setting OMP_NUM_THREADS\n" + worker + TORCHRUN_FOOTER,
    )
    assert error.startswith("runner dle exited with code 1: ModuleNotFoundError: No module named 'dllogger'"), error
    # TensorFlow: the first exception of a chained report carries the kernel's name; mpirun prefixes each line.
    tensorflow = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/tensorflow/python/client/session.py", line 1402, in _do_call',
        "    return fn(*args)",
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: No OpKernel was registered to support Op "
        "'NcclAllReduce' used by {{node NcclAllReduce}} with these attrs: [num_devices=1]",
        "Registered devices: [CPU]",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "tf_cnn_benchmarks.py", line 73, in <module>',
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:",
    ]
    mpirun = [
        "-" * 74,
        "Primary job  terminated normally, but 1 process returned",
        "a non-zero exit code. Per user-direction, the job has been aborted.",
        "-" * 74,
    ]
    output = "\n".join([*(f"[1,0]<stderr>:{line}" for line in tensorflow), *mpirun]) + "\n"
    assert "No OpKernel was registered to support Op 'NcclAllReduce'" in failed(tmp_path, output)
    # No traceback: the line that reads as a failure (absl's flag error), before the help hint.
    absl = (
        "FATAL Flags parsing error: Unknown command line flag 'image_size'\n"
        "Pass --helpshort or --helpfull to see help on flags.\n"
    )
    assert "code 1: FATAL Flags parsing error: Unknown command line flag 'image_size'" in failed(tmp_path, absl)
    # Nothing reads as a failure: the last lines, as they are.
    assert failed(tmp_path, "a\nb\nc\nd\n").endswith(": b | c | d")


def test_under_torchrun_the_workers_exception_is_kept(tmp_path, torch_python):
    """A real torchrun whose worker cannot import what it needs: the output ends with torchrun's footer (the last
    lines say nothing), the record names the missing module."""
    script = tmp_path / "main.py"
    script.write_text("import dllogger_is_not_installed_here\n")
    definition = {
        "command": [str(script)],
        "launcher": "torchrun",
        "format": "dllogger",
        "models": ["resnet50"],
        "fixed_inputs": {"image_size": 224},
    }
    log = tmp_path / "rep1.jsonl"
    summary = run_runner(torch_python, log, definition)
    output = (runner.run_dir(log) / runner.OUTPUT_NAME).read_text()
    assert "ChildFailedError" in output and "ModuleNotFoundError" not in output.strip().splitlines()[-1]
    assert summary["status"] == "error"
    assert (
        "exited with code 1: ModuleNotFoundError: No module named 'dllogger_is_not_installed_here'" in summary["error"]
    )


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


def test_a_command_that_cannot_start_is_an_error_record(tmp_path):
    """A script (or launcher) that does not exist or cannot be executed: an `error` record naming the file, why and
    the key to fix, like any other failure; the supervisor does not die (the run is recorded)."""
    missing = tmp_path / "DeepLearningExamples" / "main.py"
    definition = {"command": [str(missing), "--steps", "{steps}"], "format": "dllogger", "models": ["resnet50"]}
    definition["fixed_inputs"] = {"image_size": 224}
    summary = run_runner(Path(sys.executable), tmp_path / "rep1.jsonl", definition)
    assert summary["status"] == "error"
    assert summary["error"].startswith(f"runner probe cannot start {missing}: No such file or directory;"), summary
    assert "runners.probe.command" in summary["error"]
    script = tmp_path / "main.py"
    script.write_text("print('no shebang, no exec bit')\n")
    definition["command"] = [str(script)]
    summary = run_runner(Path(sys.executable), tmp_path / "rep2.jsonl", definition)
    assert summary["status"] == "error" and f"cannot start {script}: Permission denied" in summary["error"]
    assert "{python}" in summary["error"]  # what to do: run the script with an interpreter
    if shutil.which("mpirun") is None:  # a launcher that is not installed here
        definition["command"], definition["launcher"] = ["{python}", str(script)], "mpirun"
        summary = run_runner(Path(sys.executable), tmp_path / "rep3.jsonl", definition)
        assert "cannot start mpirun: No such file or directory; runners.probe.launcher mpirun" in summary["error"]
