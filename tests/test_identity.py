"""Run identity (dlbench.identity): every id the study makes parses back to the same axes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPO
from dlbench import identity
from dlbench.study import load_study

AXES = ("model", "framework", "topology", "batch_size", "precision", "compiler", "data", "image_size", "seq_length",
        "optimizer", "grad_clip")


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
    resnet = dict(model="resnet50", framework="pytorch", topology="1x2", batch_size=64, precision="amp",
                  compiler=False, data="synthetic", image_size=224)
    assert identity.config_id(resnet) == "resnet50/pytorch/1x2/bs64-amp-nocompile-synthetic"
    assert identity.variant(resnet | {"image_size": 64}) == "bs64-amp-nocompile-synthetic-img64"
    bert = dict(model="bert_base", framework="mxnet", topology="2x8", batch_size=32, precision="fp32",
                compiler=True, data="real", seq_length=512, optimizer="lamb", grad_clip=True)
    assert identity.variant(bert) == "bs32-fp32-compile-real-seq512-lamb-clip"
    assert identity.parse_config_id(identity.config_id(bert))["nodes"] == 2


@pytest.mark.parametrize("path", ["results/runs/resnet50/pytorch/1x1/rep1.jsonl",
                                  "results/runs/resnet50/pytorch/1-1/bs8-fp32-nocompile-synthetic/rep1.jsonl",
                                  "results/runs/resnet50/pytorch/1x1/bs8-fp32-synthetic/rep1.jsonl",
                                  "results/runs/resnet50/pytorch/1x1/bs8-fp32-nocompile-synthetic/run1.jsonl"])
def test_bad_paths_name_the_path(path):
    with pytest.raises(identity.IdentityError, match="not"):
        identity.parse_run_log(Path(path))
