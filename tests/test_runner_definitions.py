"""The shipped runner definitions (workflow/runners/*.yaml): valid against the config schema, and rendering the
upstream scripts' flags for configurations they support. No upstream code runs here (none is in this repository):
the checks stop at the argv dlbench would start, except for tf_cnn_resnet50, run by the real supervisor against a
stand-in of tf_cnn_benchmarks.py (tests/runners/tf_cnn_benchmarks.py: its flags, failures and output lines)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import REPO, read_log, run_runner, run_spec
from dlbench.collect.aggregate import records_frame
from dlbench.harness import runner
from dlbench.harness.spec import FRAMEWORKS, RunSpec, Unsupported

RUNNERS_DIR = REPO / "workflow" / "runners"
EXAMPLE = RUNNERS_DIR / "example-study.yaml"
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
RUNNER_SCHEMA = jsonschema.Draft202012Validator({"$ref": "#/$defs/runner", "$defs": SCHEMA["$defs"]})
FILES = sorted(path for path in RUNNERS_DIR.glob("*.yaml") if path != EXAMPLE)


def shipped() -> dict[str, dict]:
    """Every shipped runner by name (a name defined twice fails)."""
    found: dict[str, dict] = {}
    for path in FILES:
        for name, definition in yaml.safe_load(path.read_text()).items():
            assert name not in found, f"{path.name}: runner {name} is defined twice"
            found[name] = definition
    return found


# The optimizer and clipping each BERT script is fixed to (its flags declare only those).
FIXED = {"dle_pytorch_bert": {"optimizer": "lamb", "grad_clip": True}, "dle_tensorflow_bert": {"grad_clip": True}}


def spec(framework: str, **changes) -> RunSpec:
    """A shipped script's run: 1x8 at batch 256 in AMP on CUDA (what the upstream scripts were written for; CPU runs
    say device="cpu"), 224 pixels, DLPerf's 20 + 100 steps."""
    upstream = dict(devices_per_node=8, batch_size=256, precision="amp", image_size=224, device="cuda")
    values = {**upstream, "warmup_steps": 20, "measured_steps": 100, **FIXED.get(framework, {}), **changes}
    return run_spec(framework=framework, **values)


def contains(argv: list[str], part: list[str]) -> bool:
    """`part` appears in `argv` as consecutive arguments."""
    return any(argv[i : i + len(part)] == part for i in range(len(argv) - len(part) + 1))


def test_the_runners_are_shipped():
    assert {path.name for path in FILES} == {
        "dle-pytorch-resnet50.yaml",
        "dle-tensorflow-resnet50.yaml",
        "dle-pytorch-bert.yaml",
        "dle-tensorflow-bert.yaml",
        "tf-cnn-benchmarks-resnet50.yaml",
    }
    assert set(shipped()) == {
        "dle_pytorch_resnet50",
        "dle_tensorflow_resnet50",
        "dle_pytorch_bert",
        "dle_tensorflow_bert",
        "tf_cnn_resnet50",
    }


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_definitions_are_valid_runners(path: Path):
    content = yaml.safe_load(path.read_text())
    assert isinstance(content, dict) and content, f"{path.name}: expected {{<runner name>: <definition>}}"
    for name, definition in content.items():
        assert re.fullmatch(SCHEMA["$defs"]["framework"]["pattern"], name), name
        assert name not in FRAMEWORKS, f"{name} would shadow one of dlbench's frameworks"
        errors = [
            f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in RUNNER_SCHEMA.iter_errors(definition)
        ]
        assert not errors, f"{path.name}: {errors}"
        # Every placeholder is one the harness fills, in flags of any axis value too (render sees only the run's).
        items = [
            *definition["command"],
            *(arg for choices in definition.get("flags", {}).values() for args in choices.values() for arg in args),
        ]
        known = set(runner.PLACEHOLDERS) | set(runner.FLAG_GROUPS)
        assert {field for item in items for field in runner.placeholders(item)} <= known
        # What the user must set is a placeholder path, not a machine of ours.
        assert definition["workdir"].startswith("/path/to/"), definition["workdir"]
        assert "python" in definition or definition.get("env", "core") != "core"
        # torchrun runs a script with its own python; the other launchers run the command as given.
        starts_with_python = definition["command"][0] == "{python}"
        assert starts_with_python == (definition.get("launcher", "none") != "torchrun"), name


# (runner, the run, arguments that must appear consecutively, the launcher's first arguments)
RENDERED = [
    (
        "dle_pytorch_resnet50",
        {},
        [
            ["main.py", "--arch=resnet50"],
            ["--batch-size=256"],
            ["--epochs=1", "--prof=120"],
            ["--training-only"],
            ["--no-checkpoints"],
            ["--amp", "--static-loss-scale=128"],
            ["--data-backend=synthetic", "{run_dir}"],
            ["--raport-file={run_dir}/raport.json"],
        ],
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=8", "--standalone", "main.py"],
    ),
    (
        "dle_pytorch_resnet50",
        {"precision": "fp32", "batch_size": 128, "data": "real"},
        [["--batch-size=128"], ["--data-backend=dali-gpu", "/path/to/imagenet"]],
        [sys.executable, "-m", "torch.distributed.run"],
    ),
    (
        "dle_tensorflow_resnet50",
        {"compiler": True, "data": "real"},
        [
            [
                "{python}",
                "main.py",
                "--arch=resnet50",
                "--mode=training_benchmark",
                "--iter_unit=batch",
                "--num_iter=120",
                "--warmup_steps=20",
                "--batch_size=256",
            ],
            ["--results_dir={run_dir}"],
            [
                "--amp",
                "--static_loss_scale=128",
                "--xla",
                "--data_dir={data_dir}",
                "--dali",
                "--data_idx_dir={data_dir}/dali_index",
            ],
        ],
        ["mpirun", "-np", "8", "{python}", "main.py"],
    ),
    (
        "dle_tensorflow_resnet50",
        {"precision": "fp32", "image_size": 160},
        [["--synthetic_data_size=160"]],
        ["mpirun", "-np", "8"],
    ),
    (
        "dle_pytorch_bert",
        {"model": "bert_base", "batch_size": 96, "data": "real", "seq_length": 128},
        [
            ["run_pretraining.py", "--input_dir={data_dir}/hdf5"],
            ["--config_file=dlbench_configs/bert_base.json"],
            ["--train_batch_size=96", "--max_seq_length=128", "--max_predictions_per_seq=20", "--max_steps=120"],
            ["--do_train"],
            ["--json-summary={run_dir}/dllogger.json", "--fp16"],
        ],
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=8", "--standalone", "run_pretraining.py"],
    ),
    (
        "dle_tensorflow_bert",
        {"model": "bert_base", "batch_size": 64, "data": "real", "compiler": True, "seq_length": 512},
        [
            [
                "{python}",
                "run_pretraining.py",
                "--input_files_dir={data_dir}/tfrecord",
                "--eval_files_dir={data_dir}/tfrecord",
            ],
            ["--dllog_path={run_dir}/dllogger.json"],
            ["--train_batch_size=64"],
            ["--max_seq_length=512", "--max_predictions_per_seq=80", "--num_train_steps=120"],
            ["--optimizer_type=adam", "--horovod"],
            ["--amp", "--use_xla"],
        ],
        ["mpirun", "-np", "8", "{python}", "run_pretraining.py"],
    ),
    # DLE's TensorFlow BERT turns AMP and XLA on by default: fp32 and nocompile must say so.
    (
        "dle_tensorflow_bert",
        {"model": "bert_base", "data": "real", "precision": "fp32"},
        [["--noamp", "--nouse_xla"]],
        ["mpirun", "-np", "8"],
    ),
    (
        "tf_cnn_resnet50",
        {"compiler": True},
        [
            [
                "{python}",
                "tf_cnn_benchmarks.py",
                "--model=resnet50_v1.5",
                "--num_gpus=8",
                "--batch_size=256",
                "--num_warmup_batches=20",
                "--num_batches=100",
            ],
            [
                "--optimizer=momentum",
                "--variable_update=replicated",
                "--all_reduce_spec=nccl",
                "--data_format=NCHW",
                "--use_fp16",
                "--xla",
            ],
        ],
        ["{python}", "tf_cnn_benchmarks.py"],
    ),
    # On a CPU, tf_cnn_benchmarks runs with CPU kernels only: NHWC, a parameter server on the CPU, no NCCL.
    (
        "tf_cnn_resnet50",
        {"device": "cpu", "precision": "fp32", "devices_per_node": 1, "batch_size": 32},
        [
            ["--num_gpus=1", "--batch_size=32"],
            [
                "--device=cpu",
                "--data_format=NHWC",
                "--variable_update=parameter_server",
                "--local_parameter_device=cpu",
            ],
        ],
        ["{python}", "tf_cnn_benchmarks.py"],
    ),
    # DLE's PyTorch main.py takes the image size (--image-size): the run's own, not the model's default.
    (
        "dle_pytorch_resnet50",
        {"image_size": 128},
        [["--batch-size=256", "--image-size=128"]],
        [sys.executable, "-m", "torch.distributed.run"],
    ),
    (
        "tf_cnn_resnet50",
        {"precision": "fp32", "data": "real"},
        [["--data_dir={data_dir}", "--data_name=imagenet"]],
        ["{python}"],
    ),
]


@pytest.mark.parametrize(
    ("name", "changes", "parts", "launched"), RENDERED, ids=[f"{name}-{i}" for i, (name, *_) in enumerate(RENDERED)]
)
def test_render_gives_the_upstream_flags(tmp_path, name, changes, parts, launched):
    definition = shipped()[name]
    data_dir = tmp_path / "data"
    run = spec(name, **changes, **({"data_dir": str(data_dir)} if changes.get("data") == "real" else {}))
    run_dir = tmp_path / "rep1.runner"
    fill = {"{python}": sys.executable, "{run_dir}": str(run_dir.resolve()), "{data_dir}": str(data_dir)}

    def filled(arg: str) -> str:
        for key, value in fill.items():
            arg = arg.replace(key, value)
        return arg

    argv = runner.render(run, definition, run_dir)
    for part in parts:
        assert contains(argv, [filled(arg) for arg in part]), (part, argv)
    if run.device == "cpu":  # nothing of the GPU set reaches a CPU run
        assert not {"--all_reduce_spec=nccl", "--data_format=NCHW"} & set(argv), argv
    assert not [arg for arg in argv if "{" in arg or "}" in arg], argv
    full = runner.launch(run, definition, argv, in_slurm=False)
    assert full[: len(launched)] == [filled(arg) for arg in launched], full


@pytest.mark.parametrize(
    ("name", "log"),
    [
        ("dle_pytorch_resnet50", "raport.json"),
        ("dle_tensorflow_resnet50", "dllogger.json"),
        ("dle_pytorch_bert", "dllogger.json"),
        ("dle_tensorflow_bert", "dllogger.json"),
        ("tf_cnn_resnet50", runner.OUTPUT_NAME),
    ],
)
def test_the_log_is_where_the_script_writes_it(tmp_path, name, log):
    """DLLogger's JSON file lands in the run's own directory (its name given on the command line), tf_cnn's
    numbers are in its output."""
    definition = shipped()[name]
    assert definition["format"] == ("tf_cnn_benchmarks" if name == "tf_cnn_resnet50" else "dllogger")
    run = spec(name, model=definition["models"][0], data="real", data_dir=str(tmp_path / "data"))
    run_dir = tmp_path / "rep1.runner"
    assert runner.external_log(run, definition, run_dir).resolve() == run_dir.resolve() / log
    if log != runner.OUTPUT_NAME:  # the command names the file and puts it in the run's directory
        argv = runner.render(run, definition, run_dir)
        assert any(arg.endswith(f"={run_dir.resolve()}/{log}") for arg in argv) or (
            f"--results_dir={run_dir.resolve()}" in argv and f"--log_filename={log}" in argv
        ), argv


@pytest.mark.parametrize(
    ("name", "changes", "reason"),
    [
        ("dle_pytorch_resnet50", {"compiler": True}, "has no flags for compiler compile"),
        ("dle_pytorch_resnet50", {"model": "bert_base"}, "does not train bert_base"),
        ("dle_tensorflow_resnet50", {"model": "bert_tiny"}, "does not train bert_tiny"),
        ("dle_pytorch_bert", {"model": "bert_base"}, "cannot express data synthetic"),
        ("dle_pytorch_bert", {"model": "bert_base", "data": "real", "compiler": True}, "has no flags for compiler"),
        ("dle_tensorflow_bert", {"model": "bert_base"}, "cannot express data synthetic"),
        ("tf_cnn_resnet50", {"model": "bert_base"}, "does not train bert_base"),
        (
            "dle_pytorch_bert",
            {"model": "bert_base", "data": "real", "optimizer": "adam"},
            "cannot express optimizer adam",
        ),
        (
            "dle_tensorflow_bert",
            {"model": "bert_base", "data": "real", "grad_clip": False},
            "cannot express grad_clip noclip",
        ),
        # An image size the script cannot be told: the record would carry a size it never trained at.
        ("tf_cnn_resnet50", {"image_size": 64}, "trains at image_size 224 only .*this run asks for 64"),
        ("tf_cnn_resnet50", {"image_size": 64, "device": "cpu"}, "trains at image_size 224 only"),
        ("dle_tensorflow_resnet50", {"image_size": 160, "data": "real"}, "trains at image_size 224 only"),
        # GPU-only scripts on a CPU: unsupported with the reason, before anything runs.
        ("dle_pytorch_resnet50", {"device": "cpu"}, "cannot express device cpu .*NVML"),
        ("dle_tensorflow_resnet50", {"device": "cpu"}, "cannot express device cpu .*NVIDIA GPUs only"),
        ("dle_pytorch_bert", {"model": "bert_base", "data": "real", "device": "cpu"}, "device cpu .*torch.device"),
        ("dle_tensorflow_bert", {"model": "bert_base", "data": "real", "device": "cpu"}, "device cpu .*GPUs only"),
    ],
)
def test_what_upstream_cannot_express_is_unsupported(tmp_path, name, changes, reason):
    with pytest.raises(Unsupported, match=reason):
        runner.render(spec(name, **changes), shipped()[name], tmp_path)


def test_every_definition_says_where_it_runs():
    """Each shipped runner lists the devices it runs on, and says why for each one it cannot."""
    for name, definition in shipped().items():
        devices = definition["flags"].get("device", {})
        assert devices, f"{name}: no flags.device"
        for device in {"cuda", "cpu"} - set(devices):
            assert definition.get("unsupported", {}).get("device", {}).get(device), f"{name}: no reason for {device}"


def stand_in_tf_cnn(tmp_path: Path, device: str, image_size: int = 224, telemetry_ms: int = 0) -> Path:
    """A real supervised run of the shipped tf_cnn_resnet50 definition against the stand-in script (1x1,
    batch 2, 1 + 3 steps); the run log."""
    definition = {**shipped()["tf_cnn_resnet50"], "workdir": str(REPO / "tests" / "runners"), "python": sys.executable}
    log = tmp_path / f"{device}-{image_size}" / "rep1.jsonl"
    run_runner(
        Path(sys.executable),
        log,
        definition,
        "--warmup-steps",
        "1",
        "--measured-steps",
        "3",
        "--device",
        device,
        "--image-size",
        str(image_size),
        "--telemetry-ms",
        str(telemetry_ms),
        framework="tf_cnn_resnet50",
    )
    return log


def test_tf_cnn_on_a_cpu_runs_the_cpu_set_and_its_record_is_complete(tmp_path):
    """On a CPU the definition's CPU arguments run (the stand-in fails, as TensorFlow does, on the GPU set); the
    ok record carries the image size trained at, the command's elapsed time (also in records.csv) and why there
    is no telemetry."""
    log = stand_in_tf_cnn(tmp_path, "cpu", telemetry_ms=100)
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "ok", summary
    argv = json.loads((runner.run_dir(log) / "command.json").read_text())
    assert contains(argv, ["--device=cpu", "--data_format=NHWC", "--variable_update=parameter_server"]), argv
    record = records_frame([str(log)]).iloc[0]
    total = re.search(r"total images/sec: ([0-9.]+)", (runner.run_dir(log) / runner.OUTPUT_NAME).read_text())
    assert record["status"] == "ok" and record["throughput"] == pytest.approx(float(total.group(1)))
    assert record["image_size"] == 224 and record["framework"] == "tf_cnn_resnet50"
    assert record["elapsed_s"] == pytest.approx(summary["elapsed_s"]) and record["elapsed_s"] > 0
    assert record["telemetry"] == f"unavailable: {runner.NO_TELEMETRY}"
    csv = tmp_path / "records.csv"
    records_frame([str(log)]).to_csv(csv, index=False)
    assert "elapsed_s" in csv.read_text().splitlines()[0]
    assert float(records_frame([str(log)])["elapsed_s"].iloc[0]) == pytest.approx(summary["elapsed_s"])


def test_tf_cnn_at_another_image_size_is_unsupported_before_it_runs(tmp_path):
    log = stand_in_tf_cnn(tmp_path, "cpu", image_size=64)
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "unsupported" and "224" in summary["error"] and "64" in summary["error"]
    assert not (runner.run_dir(log) / runner.OUTPUT_NAME).exists()  # nothing ran
    record = records_frame([str(log)]).iloc[0]
    assert record["status"] == "unsupported" and pd_null(record["throughput"])


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="the stand-in fails only where there is no GPU")
def test_tf_cnn_gpu_set_without_a_gpu_names_the_missing_kernel(tmp_path):
    """The GPU arguments where there is no GPU: the error says what failed (the NcclAllReduce kernel), not the
    output's last lines."""
    log = stand_in_tf_cnn(tmp_path, "cuda")
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "error"
    assert "No OpKernel was registered to support Op 'NcclAllReduce'" in summary["error"], summary["error"]


def pd_null(value) -> bool:
    return value is None or value != value  # NaN


def test_example_study_is_valid_and_pastes_the_shipped_runner():
    """YAML has no include: the example carries a copy of a shipped definition, which must not drift."""
    study = yaml.safe_load(EXAMPLE.read_text())
    errors = [
        f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(study)
    ]
    assert not errors, errors
    runners = study["runners"]
    assert runners and all(runners[name] == shipped()[name] for name in runners)
    assert "pytorch" in study["matrix"]["framework"]
    assert set(runners) <= set(study["matrix"]["framework"])
