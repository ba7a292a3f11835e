"""The axis registry (dlbench.vocabulary.axes) is the one declaration of each axis: the schema, the typed
configurations, the ids, the records, the aggregate, the log formats and the report agree with it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import copy_repo, run_spec, snakemake, tiny_config, write_config
from dlbench.collect import records
from dlbench.collect.aggregate import BASELINE_KEY, CONFIG_COLUMNS
from dlbench.collect.references import MATCH_KEYS
from dlbench.harness.spec import parser, spec_from_args
from dlbench.logformats.common import AXIS_LABELS
from dlbench.plan import study
from dlbench.report.format import input_label
from dlbench.report.tables import INPUT_KEYS
from dlbench.vocabulary import axes, identity

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow/schemas/config.schema.yaml"
SAMPLE_MODEL = {"resnet": "resnet50", "bert": "bert_base", "llama": "llama_tiny"}


def test_the_schema_states_the_registry_s_defaults_and_declares_no_model_axis_itself():
    raw = yaml.safe_load(SCHEMA.read_text())
    assert not set(raw["properties"]["matrix"]["properties"]) & set(axes.MODEL_MATRIX), (
        "a model axis is declared in dlbench.vocabulary.axes and added to the schema there (with_model_axes)"
    )
    schema = study.load_schema(SCHEMA)
    matrix = schema["properties"]["matrix"]["properties"]
    assert set(axes.MATRIX) <= set(matrix)
    for name in axes.MATRIX:
        if "default" in matrix[name]:
            assert matrix[name]["default"] == [axes.DEFAULTS[name]], name
    settings = schema["$defs"]["settings"]["properties"]
    assert settings["image_size"]["default"] == axes.DEFAULTS["image_size"]
    for place in ("selector", "include_entry"):
        assert set(axes.MATRIX) <= set(schema["$defs"][place]["properties"]), place


def test_every_model_axis_is_a_record_column_an_option_and_a_report_input():
    options = {action.dest: action for action in parser("t")._actions}
    for axis in axes.MODEL_AXES:
        assert axis.name in records.FIELDS, f"the record schema has no column {axis.name}"
        assert axis.name in CONFIG_COLUMNS and axis.name in BASELINE_KEY and axis.name in INPUT_KEYS
        assert axis.name in AXIS_LABELS, "an import's labels may name every model input"
        if axis.matrix:
            assert axis.name in MATCH_KEYS
        if axis.option:  # the harness takes it; a spec without it reads the registry's default
            assert options[axis.name].default is None
            assert getattr(run_spec(), axis.name) == axis.default
    assert records.FIELDS.index("data") + 1 == records.FIELDS.index(axes.MODEL_AXES[0].name)  # records.csv's order


def test_a_model_axis_given_reaches_the_spec_and_its_command_line_and_no_other():
    spec = run_spec(model="bert_tiny", seq_length=64, optimizer="lamb")
    assert (spec.seq_length, spec.optimizer, spec.grad_clip, spec.optimizer_name) == (64, "lamb", False, "lamb")
    assert spec_from_args(parser("t").parse_args(spec.to_args())) == spec  # the ranks rebuild the same spec
    assert spec.as_dict()["seq_length"] == 64 and spec.as_dict()["image_size"] is None
    assert not spec.foreign_inputs()
    resnet = run_spec(optimizer="lamb", grad_clip=True, seq_length=64)
    assert [a.name for a in resnet.foreign_inputs()] == ["optimizer", "grad_clip"]  # a shape of BERT's is ignored
    with pytest.raises(SystemExit):
        parser("t").parse_args([*spec.to_args(), "--grad-clip", "maybe"])


@pytest.mark.parametrize("kind", axes.MODEL_KINDS)
def test_each_axis_of_a_kind_is_spelled_in_the_variant_and_read_back(kind):
    """Every model axis that applies to the kind, at a value other than its default, shows in the variant and the
    parsed variant gives it back; the other kinds' axes are None."""
    changed = {"seq_length": 512, "optimizer": "lamb", "grad_clip": True, "activation_checkpointing": True}
    values = {
        "model": SAMPLE_MODEL[kind],
        "batch_size": 4,
        "precision": "amp",
        "compiler": True,
        "data": "real",
        "image_size": 64,
        "strategy": "ddp_fp16",
        **{name: axes.DEFAULTS[name] for name in axes.MODEL_MATRIX},
        **changed,
    }
    text = identity.variant(values)
    parsed = identity.parse_variant(values["model"], text)
    assert parsed["strategy"] == "ddp_fp16" and text.endswith("-via_ddp_fp16")
    for axis in axes.MODEL_AXES:
        if axis.spell is None:
            continue
        if axis.applies_to(kind):
            assert parsed[axis.name] == values[axis.name], (axis.name, text)
            assert axis.spell(values[axis.name]) in text.split("-")
        else:
            assert parsed[axis.name] is None, (axis.name, text)


@pytest.mark.parametrize("kind", axes.MODEL_KINDS)
def test_records_and_report_words_of_a_kind(kind):
    inputs = records.model_inputs({"model": SAMPLE_MODEL[kind]})
    assert set(inputs) == set(axes.INPUTS)
    for axis in axes.MODEL_AXES:
        assert (inputs[axis.name] is None) == (not axis.applies_to(kind)) or axis.name == "image_size"
    words = input_label(inputs | {"image_size": 64 if kind == "resnet" else None})
    expected = {
        "resnet": "64×64 px",
        "bert": "seq 128/20 masked, adam, no clip",
        "llama": "seq 128, no checkpointing",
    }
    assert words == expected[kind]


def test_an_include_entry_gets_the_registry_s_defaults_and_none_for_other_kinds():
    config = {
        "study": "t",
        "matrix": {"framework": ["pytorch"], "model": ["resnet50"], "topology": ["1x1"], "batch_size": [2]},
        "include": [{"framework": "pytorch", "model": "bert_tiny", "topology": "1x1", "batch_size": 2}],
    }
    s = study.load_study(config, SCHEMA, REPO / "envs", REPO)
    bert = next(c for c in s.configurations.values() if c.model == "bert_tiny")
    resnet = next(c for c in s.configurations.values() if c.model == "resnet50")
    assert (bert.seq_length, bert.optimizer, bert.grad_clip, bert.activation_checkpointing) == (
        128,
        "adam",
        False,
        None,
    )
    assert (resnet.seq_length, resnet.optimizer, resnet.grad_clip, resnet.activation_checkpointing) == (None,) * 4
    assert bert.config_id == "bert_tiny/pytorch/1x1/bs2-fp32-nocompile-synthetic-seq128-adam-noclip"


def test_a_model_axis_given_for_no_model_of_its_kind_is_a_warning_naming_its_kinds():
    config = {
        "study": "t",
        "matrix": {
            "framework": ["pytorch"],
            "model": ["resnet50"],
            "topology": ["1x1"],
            "batch_size": [2],
            "activation_checkpointing": [True],
        },
    }
    s = study.load_study(config, SCHEMA, REPO / "envs", REPO)
    assert any("matrix.activation_checkpointing: applies to Llama models only" in w for w in s.warnings)


# A new axis of ResNet models, declared as the registry declares every axis: the one place a user adds it.
TOY_AXIS = """    Axis(
        "toy",
        1,
        kinds=frozenset({"resnet"}),
        option=True,
        values={"type": "integer", "minimum": 1, "maximum": 9},
        description="ResNet only: a toy axis of the tests",
        spell=lambda v: f"toy{v}",
        read=_prefixed_int("toy"),
        record=lambda v, _: v,
        label=lambda v, _: f"toy {v}",
        legend="toy {}",
    ),
"""
# ... and the backend that reads it: PyTorch's environment line says the value its spec holds.
TOY_READER = """            "toy": self.spec.toy,
"""


@pytest.mark.slow
def test_a_toy_axis_declared_once_runs_through_the_workflow_to_the_report(tmp_path, torch_python):
    """Registered in dlbench.vocabulary.axes (plus the backend that reads it) of a copy of the repository, a new
    axis is a list of the study's matrix, a part of the run ids, a harness option, a record column and words in
    the report's table titles."""
    repo = copy_repo(tmp_path / "repo")
    registry = repo / "workflow/dlbench/vocabulary/axes.py"
    text = registry.read_text()
    anchor = '    Axis("strategy",'
    registry.write_text(text.replace(anchor, TOY_AXIS + anchor, 1))
    backend = repo / "workflow/dlbench/harness/backends/pytorch/backend.py"
    anchor = '            "framework": "pytorch",\n'
    assert anchor in backend.read_text()
    backend.write_text(backend.read_text().replace(anchor, anchor + TOY_READER, 1))
    work = tmp_path / "work"
    work.mkdir()
    config = tiny_config(defaults={**tiny_config()["defaults"], "repeats": 1})
    config["matrix"] |= {"topology": ["1x1"], "toy": [1, 3]}
    study_file = write_config(work / "study.yaml", config)
    result = snakemake(work, "--cores", "2", "--configfile", str(study_file), snakefile=repo / "Snakefile")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    published = work / "results/reports/v1"
    records = pd.read_csv(published / "records.csv").set_index("toy")
    assert sorted(records.index) == [1, 3] and set(records["status"]) == {"ok"}
    for toy, config_id in records["config_id"].items():
        assert config_id.endswith(f"-toy{toy}") and records.loc[toy, "run_id"] == f"{config_id}/rep1"
        log = work / "results/runs" / config_id / "rep1.jsonl"
        env = next(json.loads(line) for line in log.read_text().splitlines() if '"environment"' in line)
        assert env["toy"] == toy  # the harness option reached the backend
    page = (published / "index.html").read_text()
    assert "toy 1" in page and "toy 3" in page
