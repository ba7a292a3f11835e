"""The axis registry (dlbench.vocabulary.axes) is the one declaration of each axis: the schema, the typed
configurations, the ids, the records, the aggregate, the log formats and the report agree with it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from dlbench.collect import records
from dlbench.collect.aggregate import BASELINE_KEY, CONFIG_COLUMNS
from dlbench.collect.references import MATCH_KEYS
from dlbench.harness.spec import RunSpec, parser
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


def test_every_model_axis_is_a_typed_field_a_record_column_and_a_report_input():
    config_fields = {f.name for f in dataclasses.fields(study.Configuration)}
    spec_fields = {f.name: f for f in dataclasses.fields(RunSpec)}
    options = {action.dest: action.default for action in parser("t")._actions}
    for axis in axes.MODEL_AXES:
        assert axis.name in spec_fields, f"harness.spec.RunSpec has no field {axis.name}"
        assert axis.name in records.FIELDS, f"record.schema.yaml has no field {axis.name}"
        assert axis.name in CONFIG_COLUMNS and axis.name in BASELINE_KEY and axis.name in INPUT_KEYS
        assert axis.name in AXIS_LABELS, "an import's labels may name every model input"
        if axis.matrix:
            assert axis.name in config_fields, f"study.Configuration has no field {axis.name}"
            assert axis.name in MATCH_KEYS
            if axis.name != "optimizer":  # the harness's optimizer `auto` is the model's own (a study's: adam)
                assert options[axis.name] == axis.default, axis.name
    assert options["image_size"] == axes.DEFAULTS["image_size"]


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
