"""The shipped runner definitions (workflow/runners/*.yaml): valid against the config schema, and rendering the
upstream scripts' flags for configurations they support. No upstream code runs here (none is in this repository):
the checks stop at the argv dlbench would start."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import REPO
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
    values = dict(
        framework=framework,
        model="resnet50",
        nodes=1,
        devices_per_node=8,
        batch_size=256,
        precision="amp",
        compiler=False,
        data="synthetic",
        image_size=224,
        warmup_steps=20,
        measured_steps=100,
        repeat=1,
        config_id="c",
        log="l.jsonl",
        seed=0,
    )
    return RunSpec(**{**values, **FIXED.get(framework, {}), **changes})


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
                "--variable_update=replicated",
            ],
            ["--use_fp16", "--xla"],
        ],
        ["{python}", "tf_cnn_benchmarks.py"],
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
    ],
)
def test_what_upstream_cannot_express_is_unsupported(tmp_path, name, changes, reason):
    with pytest.raises(Unsupported, match=reason):
        runner.render(spec(name, **changes), shipped()[name], tmp_path)


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
