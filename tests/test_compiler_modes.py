"""The compiler axis: off, on, and torch.compile's modes — in the ids, the command lines and the runs."""

from __future__ import annotations

import pytest
import yaml

from conftest import REPO, env_python, planned_jobs, read_log, run_harness, snakemake, tiny_config, write_config
from dlbench.plan.study import ConfigError, load_study
from dlbench.vocabulary import identity

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def matrix_study(compiler: list) -> dict:
    config = tiny_config()
    config["matrix"] |= {"topology": ["1x1"], "compiler": compiler}
    return config


def test_schema_modes_are_identitys_modes():
    schema = yaml.safe_load(SCHEMA.read_text())
    assert schema["$defs"]["compiler"]["enum"] == [False, True, *identity.COMPILER_MODES]


@pytest.mark.parametrize(
    "compiler, part",
    [
        (False, "nocompile"),
        (True, "compile"),
        ("reduce-overhead", "compile_reduce_overhead"),
        ("max-autotune-no-cudagraphs", "compile_max_autotune_no_cudagraphs"),
    ],
)
def test_compiler_values_make_ids_that_round_trip(compiler, part):
    axes = {"model": "resnet50", "batch_size": 8, "precision": "amp", "compiler": compiler, "data": "synthetic"}
    variant = identity.variant(axes)
    assert variant == f"bs8-amp-{part}-synthetic"
    assert identity.parse_variant("resnet50", variant)["compiler"] == compiler


def test_a_mode_is_its_own_configuration_and_a_bad_one_names_the_key():
    study = load_study(matrix_study([False, True, "max-autotune"]), SCHEMA, REPO / "envs")
    assert sorted(c.variant.split("-")[2] for c in study.configurations.values()) == [
        "compile",
        "compile_max_autotune",
        "nocompile",
    ]
    with pytest.raises(ConfigError, match=r"matrix\.compiler\[1\]: 'fast' is not allowed \(allowed: off, on, reduce"):
        load_study(matrix_study([False, "fast"]), SCHEMA, REPO / "envs")


@pytest.mark.slow
def test_the_mode_reaches_the_harness_command_line_and_only_there(tmp_path):
    """Snakemake's own dry run: the mode's run gets --compiler-mode, the others' command lines are unchanged."""
    config = write_config(tmp_path / "study.yaml", matrix_study([False, True, "reduce-overhead"]))
    result = snakemake(tmp_path, "-n", "-p", "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    commands = [line for line in result.stdout.splitlines() if "-m dlbench.harness " in line]
    assert len(commands) == 6  # 3 compiler values x 2 repeats
    modes = [c for c in commands if "--compiler-mode reduce-overhead" in c]
    assert len(modes) == 2 and all("--compiler on" in c and "compile_reduce_overhead" in c for c in modes)
    assert not [c for c in commands if "--compiler-mode" in c and "compile_reduce_overhead" not in c]
    assert len(planned_jobs(tmp_path, config)) == 6 + 3  # the runs, aggregate, report, all


@pytest.mark.slow
def test_pytorch_runs_a_mode_and_records_it(tmp_path, torch_python):
    log = tmp_path / "run.jsonl"
    result = run_harness(
        torch_python,
        log,
        "--model",
        "resnet_tiny",
        "--topology",
        "1x1",
        "--batch-size",
        "2",
        "--image-size",
        "32",
        "--warmup-steps",
        "1",
        "--measured-steps",
        "2",
        "--device",
        "cpu",
        "--compiler",
        "on",
        "--compiler-mode",
        "max-autotune-no-cudagraphs",
        model="resnet_tiny",
    )
    entries = read_log(log)
    assert entries["summary"][-1]["status"] == "ok", result.stderr[-3000:]
    assert entries["environment"][0]["compiler"] == "torch.compile (mode max-autotune-no-cudagraphs)"
    assert entries["header"][0]["config"]["compiler_mode"] == "max-autotune-no-cudagraphs"


def test_a_framework_without_modes_records_unsupported_with_the_reason(tmp_path):
    log = tmp_path / "run.jsonl"
    run_harness(
        env_python("mxnet"),
        log,
        "--topology",
        "1x1",
        "--batch-size",
        "2",
        "--image-size",
        "32",
        "--warmup-steps",
        "1",
        "--measured-steps",
        "1",
        "--device",
        "cpu",
        "--compiler",
        "on",
        "--compiler-mode",
        "reduce-overhead",
        framework="mxnet",
    )
    summary = read_log(log)["summary"][-1]
    assert summary["status"] == "unsupported"
    assert "compiler mode reduce-overhead is torch.compile's; MXNet's compiler" in summary["error"]
