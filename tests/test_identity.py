"""Run identity (dlbench.vocabulary.identity): every id the study makes parses back to the same axes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPO
from dlbench.plan.study import load_study
from dlbench.vocabulary import identity

AXES = (
    "model",
    "framework",
    "topology",
    "batch_size",
    "precision",
    "compiler",
    "data",
    "image_size",
    "seq_length",
    "optimizer",
    "grad_clip",
    "strategy",
)


def test_every_configuration_of_the_default_study_round_trips():
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    study = load_study(config, REPO / "workflow/schemas/config.schema.yaml", REPO / "envs", REPO)
    assert study.configurations
    for config_id, c in study.configurations.items():
        log = c.run_log(3)
        assert log == f"results/runs/{config_id}/rep3.jsonl"
        parsed = identity.parse_run_log(log)
        assert parsed["run_id"] == f"{config_id}/rep3" and parsed["repeat"] == 3
        for axis in AXES:
            if axis == "image_size" and c.is_bert:
                assert parsed[axis] is None  # BERT ids carry no image size
                continue
            assert parsed[axis] == getattr(c, axis), (config_id, axis)


def test_variants():
    resnet = dict(
        model="resnet50",
        framework="pytorch",
        topology="1x2",
        batch_size=64,
        precision="amp",
        compiler=False,
        data="synthetic",
        image_size=224,
    )
    assert identity.config_id(resnet) == "resnet50/pytorch/1x2/bs64-amp-nocompile-synthetic"
    assert identity.variant(resnet | {"image_size": 64}) == "bs64-amp-nocompile-synthetic-img64"
    bert = dict(
        model="bert_base",
        framework="mxnet",
        topology="2x8",
        batch_size=32,
        precision="fp32",
        compiler=True,
        data="real",
        seq_length=512,
        optimizer="lamb",
        grad_clip=True,
    )
    assert identity.variant(bert) == "bs32-fp32-compile-real-seq512-lamb-clip"
    assert identity.parse_config_id(identity.config_id(bert))["nodes"] == 2


@pytest.mark.parametrize(
    "path",
    [
        "results/runs/resnet50/pytorch/1x1/rep1.jsonl",
        "results/runs/resnet50/pytorch/1-1/bs8-fp32-nocompile-synthetic/rep1.jsonl",
        "results/runs/resnet50/pytorch/1x1/bs8-fp32-synthetic/rep1.jsonl",
        "results/runs/resnet50/pytorch/1x1/bs8-fp32-nocompile-synthetic/run1.jsonl",
    ],
)
def test_bad_paths_name_the_path(path):
    with pytest.raises(identity.IdentityError, match="not"):
        identity.parse_run_log(Path(path))


@pytest.mark.parametrize("model", ["resnet50", "bert_base"])
def test_strategy_suffix_only_when_not_auto_and_round_trips(model):
    """auto keeps every existing id; another strategy adds -via_<name>, which parses back (also after BERT's
    optimizer, a free-form part) and is never taken for another axis."""
    axes = dict(
        model=model,
        framework="pytorch",
        topology="1x2",
        batch_size=8,
        precision="fp32",
        compiler=False,
        data="synthetic",
        image_size=64,
        seq_length=128,
        optimizer="adam",
        grad_clip=False,
    )
    plain = identity.config_id(axes)
    assert identity.config_id(axes | {"strategy": "auto"}) == plain  # ids of the default are unchanged
    assert "via_" not in plain
    for name in ("ddp_fp16", "ddp_bucket4mb", "dist_sync_ps", "mwms_pack1mb"):
        config = identity.config_id(axes | {"strategy": name})
        assert config == f"{plain}-via_{name}"
        parsed = identity.parse_config_id(config)
        assert parsed["strategy"] == name
        assert parsed["optimizer"] == (axes["optimizer"] if model == "bert_base" else None)
        assert {k: parsed[k] for k in ("batch_size", "precision", "data")} == {
            "batch_size": 8,
            "precision": "fp32",
            "data": "synthetic",
        }
    assert identity.parse_config_id(plain)["strategy"] == "auto"
    labels = {k: v for k, v in axes.items() if k != "image_size"} | {"strategy": "mwms_ring"}
    assert identity.from_labels(labels)["config_id"].endswith("-via_mwms_ring")
    assert identity.from_labels({k: v for k, v in axes.items()})["strategy"] == "auto"


def test_strategy_ids_in_a_study_round_trip(tmp_path):
    """A study with the strategy axis (per framework): the auto configurations keep the ids they have without the
    axis, the others carry -via_<name> and parse back to it."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    schema, envs = REPO / "workflow/schemas/config.schema.yaml", REPO / "envs"
    before = set(load_study(config, schema, envs, REPO).configurations)
    config["matrix"]["strategy"] = {"pytorch": ["auto", "ddp_fp16"], "mxnet": ["auto", "dist_sync_ps"]}
    after = load_study(config, schema, envs, REPO).configurations
    assert before <= set(after)
    added = {c: after[c] for c in set(after) - before}
    assert added and {c.strategy for c in added.values()} == {"ddp_fp16", "dist_sync_ps"}
    for config_id, c in added.items():
        assert config_id.endswith(f"-via_{c.strategy}")
        assert identity.parse_run_log(c.run_log(1))["strategy"] == c.strategy
        assert c.framework == {"ddp_fp16": "pytorch", "dist_sync_ps": "mxnet"}[c.strategy]


# ---------------------------------------------------------------- the harness command line (spec.command_line)
def test_the_command_line_rebuilds_the_spec_and_spells_values_one_way():
    """One spelling for the ranks' command line (RunSpec.to_args) and the rules' (harness_options): booleans
    on|off, a float shortest where nothing is lost, otherwise in full; parsed back, the same spec."""
    from dlbench.harness.spec import command_line, parser, spec_from_args

    args = ["--framework", "pytorch", "--model", "resnet_tiny", "--topology", "1x2", "--batch-size", "4"]
    spec = spec_from_args(
        parser("t").parse_args([*args, "--log", "x.jsonl", "--timeout-s", "600", "--memory-limit-gb", "2.5"])
    )
    words = spec.to_args()
    assert words[words.index("--timeout-s") + 1] == "600" and words[words.index("--memory-limit-gb") + 1] == "2.5"
    assert words[words.index("--compiler") + 1] == "off" and words[-2:] == ["--topology", "1x2"]
    assert spec_from_args(parser("t").parse_args(words)) == spec
    assert command_line({"grad_clip": True, "timeout_s": 0.1 + 0.2, "seed": 1234567}) == [
        "--grad-clip",
        "on",
        "--timeout-s",
        "0.30000000000000004",
        "--seed",
        "1234567",
    ]
