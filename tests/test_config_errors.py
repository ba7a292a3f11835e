"""Bad study files: every mistake stops the study before any job, naming the file, the line, the key, why the
value is wrong and what is allowed; settings that apply to nothing are warnings in the same form."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import REPO, snakemake
from dlbench import preflight
from dlbench.plan.configfile import StudyFileError, load_study_files
from dlbench.plan.configfile import main as check_file
from dlbench.plan.study import ConfigError

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
MATRIX = """\
study: mistakes
matrix:
  framework: [pytorch]
  model: [resnet50]
  topology: ["1x1"]
  batch_size: [2]
"""


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the working directory, as with Snakemake: results/ and the study are here


def load(tmp_path: Path, text: str):
    """The study written to study.yaml, loaded as the workflow does (Snakemake's parse, then dlbench's)."""
    path = tmp_path / "study.yaml"
    path.write_text(textwrap.dedent(text))
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        config = {}  # Snakemake would have refused it: dlbench's own reading says where
    return load_study_files(config, [path], SCHEMA, REPO / "envs", tmp_path)


def problems(tmp_path: Path, text: str) -> str:
    with pytest.raises((ConfigError, StudyFileError)) as error:
        load(tmp_path, text)
    return str(error.value)


# (the study file, what the message must say: file and line, key, value, why / what is allowed)
ERRORS = {
    "cpu_peak_figure": (
        MATRIX + "platform: {cpu_peak: 300}\n",
        ["study.yaml, line 7: platform.cpu_peak: 300 is not allowed (allowed: measure)"],
    ),
    "version_dotdot": (
        MATRIX + "report: {version: ..}\n",
        ["study.yaml, line 7: report.version: '..' is not valid", "not starting with '.'"],
    ),
    "version_hidden": (MATRIX + "report: {version: .x}\n", ["line 7: report.version: '.x' is not valid"]),
    "version_slash": (
        MATRIX + "report: {version: 2024/run1}\n",
        ["line 7: report.version: '2024/run1' is not valid", "no '/'"],
    ),
    "version_latest": (
        MATRIX + "report: {version: latest}\n",
        ["line 7: report.version: 'latest' is reserved", "the publisher's own, naming the newest report"],
    ),
    "version_exists": (
        MATRIX + "report: {version: v1}\n",
        [
            "line 7: report.version: 'v1' already exists (results/reports/v1)",
            "never overwritten",
            "choose a new name, or auto",
        ],
    ),
    "version_case_of_auto": (
        MATRIX + "report: {version: Auto}\n",
        ["line 7: report.version: 'Auto' is not auto", "did you mean auto?"],
    ),
    "include_conflict": (
        MATRIX
        + """\
include:
  - {framework: pytorch, model: resnet50, topology: "1x2", batch_size: 2, measured_steps: 5}
  - {framework: pytorch, model: resnet50, topology: "1x2", batch_size: 2, measured_steps: 50}
""",
        [
            "line 9: include[1]: the same configuration as include[0] with other settings (measured_steps 5 vs 50)",
            "only one would be used",
        ],
    ),
    "bert_jobs_over_shards": (
        MATRIX + "datasets: {bert: {shards: 8, jobs: 50}}\n",
        ["line 7: datasets.bert.jobs: 50 is more than datasets.bert.shards (8)", "use at most 8 jobs"],
    ),
    "bert_random_doc_block": (
        MATRIX + "datasets: {bert: {random_doc_block: 0}}\n",
        ["line 7: datasets.bert.random_doc_block: 0 is too small; it must be at least 1"],
    ),
    "bert_shuffle_buffer": (
        MATRIX + "datasets: {bert: {shuffle_buffer: many}}\n",
        ["line 7: datasets.bert.shuffle_buffer: 'many' is text; it must be a whole number"],
    ),
    "greater_than_zero": (
        MATRIX + "defaults: {timeout_minutes: 0}\n",
        ["line 7: defaults.timeout_minutes: 0 is too small; it must be greater than 0"],
    ),
    "at_least_one": (
        MATRIX.replace("batch_size: [2]", "batch_size: [0]"),
        ["line 6: matrix.batch_size[0]: 0 is too small; it must be at least 1"],
    ),
    "type": (
        MATRIX + "defaults: {repeats: '7'}\n",
        ["line 7: defaults.repeats: '7' is text; it must be a whole number"],
    ),
    "pattern_meaning": (
        MATRIX.replace('["1x1"]', '["2-8"]'),
        ["line 5: matrix.topology[0]: '2-8' is not valid: <nodes>x<devices per node>"],
    ),
    "listed_twice": (
        MATRIX.replace('["1x1"]', '["1x1", "1x1"]'),
        ["line 5: matrix.topology: '1x1' is listed twice; give each value once"],
    ),
    "unknown_key": (
        MATRIX + "defaults: {warmup: 3}\n",
        ["line 7: defaults: unknown key 'warmup' (allowed: repeats, warmup_steps"],
    ),
    "missing_key": (
        MATRIX.replace("  batch_size: [2]\n", ""),
        ["line 2: matrix: the key 'batch_size' is missing (required: framework, model, topology"],
    ),
    "quote_in_find_links": (
        MATRIX + 'software: {find_links: ["/wheels/it\'s"]}\n',
        ['line 7: software.find_links[0]: "/wheels/it\'s" is not valid', "without a single quote"],
    ),
    "braces_in_venv_dir": (
        MATRIX + "software: {venv_dir: 'envs/{x}'}\n",
        ["line 7: software.venv_dir: 'envs/{x}' is not valid", "Snakemake wildcards"],
    ),
    "dump_name": (
        MATRIX + "datasets: {bert: {source: raw, inputs: ['wiki; rm -rf x.xml.bz2']}}\n",
        ["datasets.bert.inputs[0]: the dump's file name 'wiki; rm -rf x.xml.bz2'", "letters, digits"],
    ),
    "duplicate_key": (
        MATRIX + "defaults:\n  repeats: 1\n  repeats: 2\n",
        ["study.yaml, line 9, column 3: the key 'repeats' is given twice", "first on line 8"],
    ),
    "yaml_syntax": (MATRIX.replace("[pytorch]", "[pytorch"), ["study.yaml, line 4, column 8: expected ',' or ']'"]),
    "top_level_list": (
        "- study: x\n- matrix: {}\n",
        ["study.yaml, line 1, column 1: the study is a list; it must be a mapping of keys"],
    ),
    "empty": ("# nothing yet\n", ["study.yaml: the file is empty"]),
    "strategy_unknown": (
        MATRIX + "  strategy: [auto, ddp_fp61]\n",
        [
            "line 7: matrix.strategy: 'ddp_fp61' is not a known strategy (did you mean 'ddp_fp16'?)",
            "known: auto, ddp_gloo",
        ],
    ),
    "strategy_framework": (
        MATRIX + "  strategy: {mxnet: [dist_sync]}\n",
        ["line 7: matrix.strategy.mxnet: 'mxnet' is not in matrix.framework (allowed: pytorch)"],
    ),
    "strategy_name": (
        MATRIX + "  strategy: [DDP-fp16]\n",
        ["line 7: matrix.strategy[0]: 'DDP-fp16' is not valid", "lower-case letters, digits and '_'"],
    ),
    "build_unknown": (
        MATRIX + "  build: [default, sitte]\nsoftware:\n  builds: {site: {pytorch: {python: python3}}}\n",
        ["line 7: matrix.build: 'sitte' is not a build of software.builds (did you mean 'site'?)", "default, site"],
    ),
    "build_of_no_framework_run": (
        MATRIX + "  build: [default, tf]\nsoftware:\n  builds: {tf: {tensorflow: {python: python3}}}\n",
        ["line 7: matrix.build: 'tf' names no framework the study runs (software.builds.tf has tensorflow"],
    ),
    "build_env_missing": (
        MATRIX + "  build: [old]\nsoftware:\n  builds: {old: {pytorch: {env: envs/pytorch_old.yaml}}}\n",
        ["line 9: software.builds.old.pytorch.env: envs/pytorch_old.yaml does not exist"],
    ),
    "build_env_name": (
        MATRIX + "  build: [old]\nsoftware:\n  builds: {old: {pytorch: {env: envs/torch-2.12.yaml}}}\n",
        [
            "software.builds.old.pytorch.env: envs/torch-2.12.yaml: the file's name names its environment",
            "torch_2_12.yaml",
        ],
    ),
    "build_env_and_python": (
        MATRIX + "  build: [old]\nsoftware:\n  builds: {old: {pytorch: {env: a.yaml, python: python3}}}\n",
        ["line 9: software.builds.old.pytorch: give one of env, python or container (it gives env and python)"],
    ),
    "build_python_missing": (
        MATRIX + "  build: [site]\nsoftware:\n  builds: {site: {pytorch: {python: /opt/none/bin/python}}}\n",
        ["line 9: software.builds.site.pytorch.python: /opt/none/bin/python does not exist"],
    ),
    "runner_python_not_on_path": (
        MATRIX + "runners:\n  dle: {command: [main.py], format: dllogger, models: [resnet50], python: no-python3}\n"
        "include:\n  - {framework: dle, model: resnet50, topology: '1x1', batch_size: 2}\n",
        ["line 8: runners.dle.python: no 'no-python3' on PATH"],
    ),
    "build_variable_dlbench_sets": (
        MATRIX + "  build: [few]\nsoftware:\n  builds: {few: {pytorch: {variables: {OMP_NUM_THREADS: 1}}}}\n",
        [
            "line 9: software.builds.few.pytorch.variables.OMP_NUM_THREADS: dlbench sets OMP_NUM_THREADS for each "
            "rank itself",
            "it would be overridden without a word",
        ],
    ),
    "build_named_default": (
        MATRIX + "software:\n  builds: {default: {pytorch: {python: python3}}}\n",
        ["software.builds", "'default'"],
    ),
    "expectation_two_kinds": (
        MATRIX + "expectations:\n  - {match: {model: resnet50}, at_least: 10, of_previous: 0.9}\n",
        [
            "line 8: expectations[0]: give one of at_least, of_previous, of_build, of_published, of_fleet "
            "(it gives at_least and of_previous)"
        ],
    ),
    "expectation_of_its_own_build": (
        MATRIX + "expectations:\n  - {match: {model: resnet50}, of_build: {default: 0.97}}\n",
        ["line 8: expectations[0].of_build: 'default' is a build its match selects", "compared with itself"],
    ),
    "expectation_of_unknown_build": (
        MATRIX + "expectations:\n  - {match: {model: resnet50}, of_build: {site: 0.97}}\n",
        ["line 8: expectations[0].of_build: 'site' is not in matrix.build (default)"],
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_mistake_names_file_line_key_and_reason(tmp_path, case):
    text, expected = ERRORS[case]
    if case == "version_exists":
        (tmp_path / "results" / "reports" / "v1").mkdir(parents=True)
    if case == "dump_name":
        (tmp_path / "wiki; rm -rf x.xml.bz2").write_text("")
    message = problems(tmp_path, text)
    for part in expected:
        assert part in message, message
    assert str(tmp_path) not in message  # the file as the user wrote it, not an absolute path


# Settings that apply to nothing: warnings, all in one form ("<file>, line N: <key>: ...; ignored").
WARNINGS = {
    "bert_axes_without_bert": (
        MATRIX.replace("  batch_size", "  seq_length: [512]\n  optimizer: [lamb]\n  batch_size"),
        [
            "study.yaml, line 6: matrix.seq_length: applies to BERT and Llama models only, and matrix.model "
            "has none (resnet50); ignored",
            "study.yaml, line 7: matrix.optimizer: applies to BERT models only",
        ],
    ),
    "bert_key_in_include": (
        MATRIX + "include:\n  - {framework: pytorch, model: resnet50, topology: '1x2', "
        "batch_size: 2, seq_length: 512}\n",
        ["study.yaml, line 8: include[0].seq_length: applies to BERT and Llama models only, not resnet50; ignored"],
    ),
    "exclude_matches_nothing": (
        MATRIX + "exclude:\n  - {precision: amp}\n",
        ["study.yaml, line 8: exclude[0]: {'precision': 'amp'} matches no configuration; ignored"],
    ),
    "override_matches_nothing": (
        MATRIX + "overrides:\n  - {match: {topology: '8x8'}, set: {repeats: 1}}\n",
        ["study.yaml, line 8: overrides[0].match: {'topology': '8x8'} matches no configuration; ignored"],
    ),
    "per_framework_settings_of_frameworks_not_run": (
        MATRIX
        + "software:\n  python: {tensorflow: python3}\n  container: {jax: 'docker://example.org/jax:1'}\n"
        + "runners:\n  dle: {command: [main.py], format: dllogger, models: [resnet50]}\n"
        + "  tf_cnn: {command: [tf_cnn.py], format: tf_cnn_benchmarks, models: [resnet50]}\n"
        + "include:\n  - {framework: dle, model: resnet50, topology: '1x1', batch_size: 2}\n",
        [
            "study.yaml, line 8: software.python.tensorflow: the study runs no tensorflow configuration "
            "(it runs: dle, pytorch); ignored",
            "study.yaml, line 9: software.container.jax: the study runs no jax configuration",
            "study.yaml, line 12: runners.tf_cnn: the study runs no tf_cnn configuration (it runs: dle, pytorch); "
            "ignored",
        ],
    ),
    "build_not_in_matrix": (
        MATRIX + "software:\n  builds: {site: {pytorch: {python: python3}}}\n",
        ["study.yaml, line 8: software.builds.site: not in matrix.build (it lists default); not run"],
    ),
    "expectation_matches_nothing": (
        MATRIX + "expectations:\n  - {match: {model: bert_base}, at_least: 10}\n",
        ["study.yaml, line 8: expectations[0].match: {'model': 'bert_base'} matches no configuration"],
    ),
    "of_published_no_figure_can_match": (
        MATRIX.replace('"1x1"', '"1x3"') + "expectations:\n  - {match: {model: resnet50}, of_published: 0.9}\n",
        [
            "study.yaml, line 8: expectations[0].of_published: no published figure (the ones dlbench ships) matches "
            "any of its 1 configurations (e.g. resnet50/pytorch/1x3/bs2-fp32-nocompile-synthetic): each cannot be "
            "judged, and the study exits 1"
        ],
    ),
    "cpu_peak_on_gpus": (
        MATRIX + "platform: {device: cuda, cpu_peak: measure}\n",
        ["study.yaml, line 7: platform.cpu_peak: measure: a CPU's peak, and the study's runs are on GPUs", "ignored"],
    ),
    "identical_include": (
        MATRIX + "include:\n  - {framework: pytorch, model: resnet50, topology: '1x2', batch_size: 2}"
        "\n  - {framework: pytorch, model: resnet50, topology: '1x2', batch_size: 2}\n",
        ["study.yaml, line 9: include[1]: the same configuration as include[0], listed twice"],
    ),
}


def test_a_runners_python_follows_the_rule_of_every_interpreter_a_path_or_a_command_on_path(tmp_path):
    """runners.<name>.python, software.python and a build's python: one rule, a command name is the one on PATH."""
    runner = "runners:\n  dle: {command: [main.py], format: dllogger, models: [resnet50], python: python3}\n"
    include = "include:\n  - {framework: dle, model: resnet50, topology: '1x1', batch_size: 2}\n"
    study = load(tmp_path, MATRIX + runner + include)
    assert study.config["runners"]["dle"]["python"] == "python3"
    from dlbench.plan.software import Software

    software = Software(
        package_dir="workflow",
        envs_dir=REPO / "envs",
        venv_dir=Path(".venvs"),
        core_python="python",
        use_conda=False,
        site_python={},
        containers={},
        runners=study.config["runners"],
        interpreters={},
    )
    assert software.framework_python("dle") == shutil.which("python3")  # the one the planning saw, by its path


def test_an_of_published_expectation_a_figure_can_match_is_not_warned_about(tmp_path):
    dlperf = "study: s\nmatrix: {framework: [pytorch], model: [resnet50], topology: ['4x8'], batch_size: [128], "
    dlperf += "data: [real]}\nexpectations:\n  - {match: {model: resnet50}, of_published: 0.9}\n"
    assert not [w for w in load(tmp_path, dlperf).warnings if "of_published" in w]


@pytest.mark.parametrize("case", sorted(WARNINGS))
def test_settings_that_apply_to_nothing_are_warnings(tmp_path, case):
    text, expected = WARNINGS[case]
    study = load(tmp_path, text)
    for part in expected:
        assert any(part in warning for warning in study.warnings), study.warnings


def test_merge_keys_are_yaml_and_duplicate_keys_still_errors(tmp_path):
    """`<<: *anchor` (YAML's merge key) brings in a mapping's keys, which the mapping may override; a key written
    twice in one mapping is still an error, and a problem is placed at the key that is in effect."""
    merged = MATRIX + (
        "defaults: &common\n  repeats: 1\n  measured_steps: 2\n"
        "overrides:\n  - match: {topology: '1x1'}\n    set:\n      <<: *common\n      measured_steps: 3\n"
    )
    study = load(tmp_path, merged)
    assert study.config["overrides"][0]["set"] == {"repeats": 1, "measured_steps": 3}
    overridden = merged.replace("measured_steps: 3", "measured_steps: 0")
    assert "study.yaml, line 14: overrides[0].set.measured_steps: 0 is too small" in problems(tmp_path, overridden)
    twice = merged.replace("      measured_steps: 3\n", "      measured_steps: 3\n      measured_steps: 4\n")
    message = problems(tmp_path, twice)
    assert "study.yaml, line 15, column 7: the key 'measured_steps' is given twice" in message, message
    assert "first on line 14" in message


def test_check_command_places_a_syntax_error(tmp_path, capsys):
    """Snakemake reads a --configfile before any workflow code: `python -m dlbench.plan.configfile FILE` shows where."""
    bad = tmp_path / "my.yaml"
    bad.write_text(MATRIX.replace("[pytorch]", "[pytorch"))
    assert check_file([str(bad)]) == 1
    assert "my.yaml, line 4, column 8: expected ',' or ']'" in capsys.readouterr().err
    tabs = tmp_path / "tabs.yaml"
    tabs.write_text(MATRIX.replace("  topology", "\ttopology"))
    assert check_file([str(tabs)]) == 1
    assert "tabs.yaml, line 5, column 1: found character '\\t'" in capsys.readouterr().err
    good = tmp_path / "ok.yaml"
    good.write_text(MATRIX)
    assert check_file([str(good)]) == 0


# Through Snakemake as users run it: stopped at parse time, no traceback, no job, nothing written.
SNAKEMAKE_CASES = {
    "config.yaml syntax": (
        "config.yaml",
        MATRIX.replace("[pytorch]", "[pytorch"),
        "config.yaml, line 4, column 8: expected ',' or ']', but got ':'",
    ),
    "config.yaml list": ("config.yaml", "- a\n- b\n", "config.yaml, line 1, column 1: the study is a list"),
    "config.yaml tab": (
        "config.yaml",
        MATRIX.replace("  framework", "\tframework"),
        "config.yaml, line 3, column 1: found character '\\t' that cannot start any token; indent with spaces",
    ),
    "config.yaml empty": ("config.yaml", "", "config.yaml: the file is empty; a study needs at least `matrix:`"),
    "--configfile include conflict": (
        "study.yaml",
        MATRIX + "include:\n"
        "  - {framework: pytorch, model: resnet50, topology: '1x2', batch_size: 2}\n"
        "  - {framework: pytorch, model: resnet50, topology: '1x2', batch_size: 2, "
        "measured_steps: 50}\n",
        "study.yaml, line 9: include[1]: the same configuration as include[0] with "
        "other settings (measured_steps default vs 50)",
    ),
    "--configfile tab": (
        "study.yaml",
        MATRIX.replace("  framework", "\tframework"),
        "study.yaml, line 3, column 1: found character '\\t' that cannot start any token; indent with spaces",
    ),
    "--configfile empty": ("study.yaml", "", "study.yaml: the file is empty; a study needs at least `matrix:`"),
    "--configfile missing": ("missing.yaml", None, "--configfile missing.yaml: no such file"),
    "--configfile version": (
        "study.yaml",
        MATRIX + "report: {version: ..}\n",
        "study.yaml, line 7: report.version: '..' is not valid",
    ),
    "--configfile version reserved": (  # the publisher's own file beside `latest`
        "study.yaml",
        MATRIX + "report: {version: latest.json}\n",
        "study.yaml, line 7: report.version: 'latest.json' is reserved",
    ),
    "--configfile merge key": (  # YAML's merge keys are valid: the file's real mistake is what is reported
        "study.yaml",
        MATRIX + "defaults: &common\n  repeats: 1\noverrides:\n  - match: {topology: '1x1'}\n"
        "    set:\n      <<: *common\n      timeout_minutes: 0\n",
        "study.yaml, line 13: overrides[0].set.timeout_minutes: 0 is too small; it must be greater than 0",
    ),
}


@pytest.mark.parametrize("case", sorted(SNAKEMAKE_CASES))
def test_snakemake_stops_before_any_job(tmp_path, case):
    """config.yaml is read by the workflow before Snakemake; a --configfile by the startup line bootstrap.sh puts
    into .venv (dlbench.preflight), before Snakemake's command line reads it."""
    name, text, expected = SNAKEMAKE_CASES[case]
    if text is not None:
        (tmp_path / name).write_text(text)
    args = [] if name == "config.yaml" else ["--configfile", name]
    result = snakemake(tmp_path, "--cores", "1", *args, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "dlbench: invalid configuration:" in output and expected in output, output[-2000:]
    assert "Traceback" not in output and "Config file is not valid" not in output
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


def test_snakemake_prints_warnings_with_their_place(tmp_path):
    study = MATRIX.replace("  batch_size", "  seq_length: [512]\n  batch_size")
    (tmp_path / "study.yaml").write_text(study + "software: {python: {tensorflow: python3}}\n")
    result = snakemake(tmp_path, "-n", "--configfile", "study.yaml", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        "dlbench: warning: study.yaml, line 6: matrix.seq_length: applies to BERT and Llama models only"
        in result.stderr
    )
    assert (
        "dlbench: warning: study.yaml, line 8: software.python.tensorflow: the study runs no tensorflow "
        "configuration (it runs: pytorch); ignored" in result.stderr
    )


def test_a_topology_beyond_one_machine_without_slurm_is_said_before_any_job(tmp_path):
    (tmp_path / "study.yaml").write_text(MATRIX.replace('["1x1"]', '["1x1", "2x8"]'))
    result = snakemake(tmp_path, "-n", "--configfile", "study.yaml", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        "dlbench: warning: 1 configurations span more than one node (resnet50/pytorch/2x8/bs2-fp32-nocompile-"
        "synthetic): without SLURM each of their 7 runs is recorded unsupported; run the study with --profile slurm"
    ) in result.stderr


def test_the_study_files_of_a_snakemake_command_line():
    assert preflight.study_files(["--cores", "all", "--configfile", "a.yaml", "b.yaml", "-n"]) == ["a.yaml", "b.yaml"]
    assert preflight.study_files(["--configfile=a.yaml", "--configfiles", "b.yaml", "--dry-run"]) == [
        "a.yaml",
        "b.yaml",
    ]
    assert preflight.study_files(["--cores", "2", "-n"]) == []
    # Snakemake's own job processes are not checked again.
    assert preflight.problems(["--target-jobs", "x", "--configfiles", "/nonexistent.yaml"]) == []


def test_a_mistake_is_said_once(tmp_path):
    """An empty matrix misses four required keys: one line names them all, once."""
    said = problems(tmp_path, "study: x\nmatrix: {}\n")
    assert said.count("is missing") == 1, said
    assert "matrix: the key 'framework', 'model', 'topology', 'batch_size' is missing" in said
