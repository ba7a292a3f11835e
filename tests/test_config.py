"""Config validation (one clear error per problem, before any job) and matrix expansion."""

from __future__ import annotations

import copy

import pytest

from conftest import REPO, snakemake, write_config
from dlbench.plan.study import ConfigError, load_study, settings_leaves

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
ENVS = REPO / "envs"
BASE = {
    "matrix": {
        "framework": ["pytorch"],
        "model": ["resnet50"],
        "topology": ["1x1", "1x2"],
        "precision": ["fp32", "amp"],
        "batch_size": [32],
    },
}


def study(**changes):
    config = copy.deepcopy(BASE)
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            config.setdefault(section, {})[name] = value
        else:
            config[section] = value
    return load_study(config, SCHEMA, ENVS)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"matirx": {}}, "(top level): unknown key 'matirx' (allowed: study, report"),
        (
            {"matrix__framework": ["pytorchh"]},
            "matrix.framework: 'pytorchh' is neither a framework nor one of the "
            "study's runners (did you mean 'pytorch'?); available: pytorch",
        ),
        ({"matrix__topology": ["1-2"]}, "matrix.topology[0]: '1-2' is not valid"),
        ({"matrix__topology": ["0x8"]}, "matrix.topology[0]: '0x8' is not valid"),
        ({"matrix__topology": []}, "matrix.topology: must not be empty"),
        ({"matrix__batch_size": [0]}, "matrix.batch_size[0]: 0 is too small; it must be at least 1"),
        (
            {"matrix__batch_size": ["maximum"]},
            "matrix.batch_size[0]: 'maximum' is not allowed: a whole number (the batch size per device) or max",
        ),
        (
            {"matrix__batch_size": {"resnet50": {"fp32": [8]}}},
            "matrix.batch_size.resnet50: no batch sizes for precision amp",
        ),
        (
            {"matrix__batch_size": {"resnet50": {"fp16": [8]}}},
            "matrix.batch_size.resnet50: 'fp16' is not allowed (allowed: fp32, amp)",
        ),
        ({"matrix__precision": ["fp16"]}, "matrix.precision[0]: 'fp16' is not allowed (allowed: fp32, amp)"),
        ({"defaults": {"repeats": "7"}}, "defaults.repeats: '7' is text; it must be a whole number"),
        ({"defaults": {"warmup": 3}}, "defaults: unknown key 'warmup' (allowed: repeats, warmup_steps"),
        ({"exclude": [{"precision": "fp32"}, {"precision": "amp"}]}, "matrix: the study is empty"),
        ({"report": {"version": "latest"}}, "report.version"),
        ({"report": {"version": "../x"}}, "report.version: '../x' is not valid"),
    ],
)
def test_bad_config_names_key_and_allowed_values(changes, message):
    with pytest.raises(ConfigError) as error:
        study(**changes)
    assert message in str(error.value)


def test_framework_without_environment_is_refused(tmp_path):
    """A framework the schema knows but whose envs/<name>.yaml is missing (e.g. a trimmed checkout)."""
    (tmp_path / "pytorch.yaml").write_text((ENVS / "pytorch.yaml").read_text())
    config = copy.deepcopy(BASE)
    config["matrix"]["framework"] = ["pytorch", "mxnet"]
    with pytest.raises(ConfigError) as error:
        load_study(config, SCHEMA, tmp_path)
    assert f"matrix.framework: 'mxnet' has no environment (no {tmp_path}/mxnet.yaml); available: pytorch" in str(
        error.value
    )


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as error:
        study(matrix__topology=["1-2"], matrix__batch_size=[0], defaults={"repeats": 0})
    assert len(str(error.value).splitlines()) == 3


def test_snakemake_reports_config_error_without_traceback(tmp_path):
    bad = write_config(tmp_path / "bad.yaml", {"matrix": {**BASE["matrix"], "topology": ["2-8"]}})
    result = snakemake(tmp_path, "-n", "--configfile", str(bad))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "dlbench: invalid configuration:" in output
    assert "matrix.topology[0]: '2-8' is not valid" in output
    assert "Traceback" not in output
    assert not (tmp_path / "results").exists()


def test_configfile_replaces_the_default_study(tmp_path):
    """A user's study must not inherit axes from the embedded config.yaml (it has fp32 and amp)."""
    config = {
        "matrix": {**BASE["matrix"], "topology": ["1x1"], "precision": ["fp32"]},
        "defaults": {"repeats": 1},
        "software": {"venv_dir": str(tmp_path / "venvs")},
    }
    result = snakemake(tmp_path, "-n", "--configfile", str(write_config(tmp_path / "c.yaml", config)))
    assert result.returncode == 0, result.stderr
    assert "-amp-" not in result.stdout
    assert result.stdout.count("rule benchmark_run:") == 1


def test_matrix_expansion_ids_and_defaults():
    s = study()
    ids = list(s.configurations)
    assert ids == [
        "resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic",
        "resnet50/pytorch/1x1/bs32-amp-nocompile-synthetic",
        "resnet50/pytorch/1x2/bs32-fp32-nocompile-synthetic",
        "resnet50/pytorch/1x2/bs32-amp-nocompile-synthetic",
    ]
    c = s.configurations[ids[0]]
    assert (c.repeats, c.warmup_steps, c.measured_steps, c.image_size) == (7, 20, 100, 224)
    assert c.run_logs()[2] == "results/runs/resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic/rep3.jsonl"
    assert len(s.run_logs()) == 4 * 7


def test_batch_sizes_per_model_and_precision_exclude_include_overrides():
    s = study(
        matrix__batch_size={"resnet50": {"fp32": [64, 128], "amp": [256]}},
        matrix__compiler=[False, True],
        defaults={"repeats": 3, "image_size": 96},
        exclude=[{"topology": "1x2", "compiler": True}],
        include=[
            {"framework": "pytorch", "model": "resnet50", "topology": "1x8", "batch_size": 64, "measured_steps": 50}
        ],
        overrides=[{"match": {"precision": "amp"}, "set": {"warmup_steps": 40}}],
    )
    ids = set(s.configurations)
    assert "resnet50/pytorch/1x1/bs256-amp-compile-synthetic-img96" in ids
    assert "resnet50/pytorch/1x2/bs128-fp32-nocompile-synthetic-img96" in ids
    assert not any(i.startswith("resnet50/pytorch/1x2/") and "-compile-" in i for i in ids)
    extra = s.configurations["resnet50/pytorch/1x8/bs64-fp32-nocompile-synthetic-img96"]
    assert extra.measured_steps == 50 and extra.repeats == 3
    amp = s.configurations["resnet50/pytorch/1x1/bs256-amp-nocompile-synthetic-img96"]
    assert amp.warmup_steps == 40
    # 2 topologies x (2 fp32 + 1 amp) x 2 compiler, minus 1x2 compiled (3), plus the 1x8 include
    assert len(ids) == 2 * 3 * 2 - 3 + 1


def test_yaml_on_off_is_boolean_compiler(tmp_path):
    """`compiler: [off, on]` in YAML means booleans, as users write it."""
    import yaml

    config = yaml.safe_load(
        "matrix: {framework: [pytorch], model: [resnet50], topology: [1x1], compiler: [off, on], batch_size: [8]}"
    )
    s = load_study(config, SCHEMA, ENVS)
    assert sorted(c.compiler for c in s.configurations.values()) == [False, True]


def test_bert_axes_apply_to_bert_only():
    """seq_length, grad_clip and optimizer multiply BERT configurations, not ResNet-50 ones."""
    s = study(
        matrix={
            "framework": ["pytorch"],
            "model": ["resnet50", "bert_base"],
            "topology": ["1x1"],
            "seq_length": [128, 512],
            "grad_clip": [False, True],
            "optimizer": ["adam", "lamb"],
            "batch_size": {"resnet50": [8], "bert_base": [4]},
        }
    )
    ids = list(s.configurations)
    assert ids[0] == "resnet50/pytorch/1x1/bs8-fp32-nocompile-synthetic"
    bert = [i for i in ids if i.startswith("bert_base/")]
    assert len(ids) == 1 + 8 and len(bert) == 8
    assert "bert_base/pytorch/1x1/bs4-fp32-nocompile-synthetic-seq512-lamb-clip" in bert
    resnet = s.configurations[ids[0]]
    assert (resnet.seq_length, resnet.grad_clip, resnet.optimizer) == (None, None, None)
    default = study(matrix={"framework": ["pytorch"], "model": ["bert_tiny"], "topology": ["1x1"], "batch_size": [2]})
    assert list(default.configurations) == ["bert_tiny/pytorch/1x1/bs2-fp32-nocompile-synthetic-seq128-adam-noclip"]


def test_bert_axes_in_selectors_and_includes():
    s = study(
        matrix={
            "framework": ["pytorch"],
            "model": ["bert_base"],
            "topology": ["1x1"],
            "grad_clip": [False, True],
            "batch_size": [4],
        },
        exclude=[{"grad_clip": True}],
        include=[
            {
                "framework": "pytorch",
                "model": "bert_base",
                "topology": "1x1",
                "batch_size": 2,
                "seq_length": 512,
                "optimizer": "lamb",
            },
            {"framework": "pytorch", "model": "resnet50", "topology": "1x1", "batch_size": 8},
        ],
        overrides=[{"match": {"seq_length": 512}, "set": {"measured_steps": 5}}],
    )
    assert sorted(s.configurations) == [
        "bert_base/pytorch/1x1/bs2-fp32-nocompile-synthetic-seq512-lamb-noclip",
        "bert_base/pytorch/1x1/bs4-fp32-nocompile-synthetic-seq128-adam-noclip",
        "resnet50/pytorch/1x1/bs8-fp32-nocompile-synthetic",
    ]
    assert s.configurations["bert_base/pytorch/1x1/bs2-fp32-nocompile-synthetic-seq512-lamb-noclip"].measured_steps == 5
    with pytest.raises(ConfigError, match=r"matrix.optimizer\[0\]: 'sgd' is not allowed \(allowed: adam, lamb\)"):
        study(matrix={**BASE["matrix"], "optimizer": ["sgd"]})
    with pytest.raises(ConfigError, match=r"matrix.seq_length\[0\]: 1024 is more than BERT's 512 position embeddings"):
        study(matrix={**BASE["matrix"], "model": ["bert_base"], "seq_length": [1024]})
    # with a Llama model beside it, 1024 is a valid length (Llama's); BERT's cells at it record `unsupported`
    both = study(matrix={**BASE["matrix"], "model": ["bert_base", "llama_tiny"], "seq_length": [1024]})
    assert "llama_tiny/pytorch/1x1/bs32-fp32-nocompile-synthetic-seq1024-nockpt" in both.configurations


def test_real_data_with_raw_sources_names_missing_inputs(tmp_path):
    """A study that reads raw datasets must name inputs that exist: checked before any job starts."""
    matrix = {
        "framework": ["pytorch"],
        "model": ["resnet50", "bert_base"],
        "topology": ["1x1"],
        "data": ["real"],
        "batch_size": [2],
    }
    with pytest.raises(ConfigError) as error:
        load_study(
            {
                "matrix": matrix,
                "datasets": {
                    "imagenet": {"source": "raw", "train_dir": "nowhere/train"},
                    "bert": {"source": "raw", "inputs": ["nowhere/wiki.xml.bz2"]},
                },
            },
            SCHEMA,
            ENVS,
            tmp_path,
        )
    problems = str(error.value).splitlines()
    assert "datasets.imagenet.validation_dir: required with source: raw" in problems
    assert "datasets.imagenet.synsets: required with source: raw" in problems
    assert "datasets.imagenet.train_dir: nowhere/train does not exist" in problems
    assert "datasets.bert.inputs[0]: nowhere/wiki.xml.bz2 does not exist" in problems
    # Synthetic-only studies never look at the datasets; samples need no paths.
    load_study(
        {"matrix": {**matrix, "data": ["synthetic"]}, "datasets": {"imagenet": {"source": "raw"}}},
        SCHEMA,
        ENVS,
        tmp_path,
    )
    sample = load_study({"matrix": matrix}, SCHEMA, ENVS, tmp_path)
    assert sample.config["datasets"]["imagenet"]["train_shards"] == 1024
    assert sample.config["datasets"]["bert"]["source"] == "sample"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"report": {"version": "v1\n"}}, "report.version: 'v1\\n' is not valid"),
        ({"matrix": {**BASE["matrix"], "topology": ["1x1\n"]}}, "matrix.topology[0]: '1x1\\n' is not valid"),
        ({"software": {"container": {"pytorch": "docker://python:3.11\n"}}}, "software.container.pytorch"),
    ],
)
def test_a_trailing_newline_does_not_pass_a_pattern(changes, message):
    """Python's `$` matches before a final newline: the patterns must hold to the true end of the text."""
    with pytest.raises(ConfigError) as error:
        load_study({**copy.deepcopy(BASE), **changes}, SCHEMA, ENVS)
    assert message in str(error.value)


def test_publishing_refuses_a_version_with_a_trailing_newline():
    from dlbench.report.publish import validate_version

    with pytest.raises(ValueError, match="invalid report.version"):
        validate_version("v1\n")


def test_raw_inputs_of_the_wrong_kind_and_a_catch_all_exclude_name_their_key(tmp_path):
    (tmp_path / "train").write_text("a file, not the train/<wnid>/ tree\n")
    (tmp_path / "synsets").mkdir()
    matrix = {"framework": ["pytorch"], "model": ["resnet50"], "topology": ["1x1"], "data": ["real"], "batch_size": [2]}
    imagenet = {"source": "raw", "train_dir": "train", "validation_dir": "train", "synsets": "synsets"}
    with pytest.raises(ConfigError) as error:
        load_study({"matrix": matrix, "datasets": {"imagenet": imagenet}}, SCHEMA, ENVS, tmp_path)
    problems = str(error.value).splitlines()
    assert "datasets.imagenet.train_dir: train is a file, not a directory" in problems
    assert "datasets.imagenet.synsets: synsets is a directory, not a file" in problems
    with pytest.raises(ConfigError, match=r"^exclude\[1\]: an empty selector excludes every configuration"):
        load_study({**copy.deepcopy(BASE), "exclude": [{"precision": "amp"}, {}]}, SCHEMA, ENVS)


def test_settings_leaves_name_every_leaf_by_its_path():
    """What the aggregate rule tracks: every leaf once, by path, a string with braces kept as a value."""
    settings = {"matrix": {"topology": ["1x1", "1x2"]}, "imports": [{"path": "old/{batch_size}.log"}], "notes": {}}
    assert settings_leaves(settings) == [
        ("imports[0].path", "old/{batch_size}.log"),
        ("matrix.topology[0]", "1x1"),
        ("matrix.topology[1]", "1x2"),
        ("notes", {}),
    ]
