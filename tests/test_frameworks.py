"""The framework registry (harness/frameworks.py) is complete, and what cannot import it agrees with it: every
registered framework has its backend package with the same modules, a Backend that implements the contract of
backends/base.py, an environment file and a compiler meaning; the configuration schema lists the same names."""

from __future__ import annotations

import ast
import inspect
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from conftest import REPO, copy_repo, env_python, run_json, snakemake, tiny_config, write_config
from dlbench.harness import spec
from dlbench.harness.backends.base import BackendBase
from dlbench.harness.frameworks import BACKEND_MODULES, NAMES, OPTIONAL_MODULES, REGISTRY
from dlbench.plan import interpreters
from dlbench.plan.study import ConfigError, load_schema, load_study
from dlbench.report.notes import caveats

BACKENDS = REPO / "workflow" / "dlbench" / "harness" / "backends"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
sys.path.insert(0, str(REPO / "docs" / "hooks"))
import config_reference  # noqa: E402  (the manual's configuration page, generated from the schema)


def test_the_schema_accepts_every_registered_framework_and_names_them():
    """The schema's framework values are a name pattern (runners are frameworks too); the study checks names
    against the registry. Every registered name passes the pattern, and the schema as the workflow and the manual
    load it names each framework with its words, from the declarations (the file itself names none)."""
    schema = load_schema(SCHEMA)
    validator = jsonschema.Draft202012Validator({**schema["$defs"]["framework"], "$defs": schema["$defs"]})
    described = [schema["properties"]["matrix"]["properties"]["framework"], schema["$defs"]["framework"]]
    for name in NAMES:
        assert validator.is_valid(name), name
        for where in described:
            assert f"{name} ({REGISTRY[name].display_name})" in where["description"], name
    assert not any(name in SCHEMA.read_text() for name in ("mxnet", "PaddlePaddle")), "the file repeats a framework"
    compiler = schema["properties"]["matrix"]["properties"]["compiler"]["description"]
    assert all(REGISTRY[name].compiler_meaning in compiler for name in NAMES)
    manual = json.dumps(config_reference.load_schema())  # the manual's configuration page
    assert "{frameworks}" not in manual and "{compilers}" not in manual


def test_the_type_checker_needs_no_list_of_a_new_frameworks_modules(tmp_path):
    """mypy runs in the core environment, where no framework is installed: with pyproject.toml's settings a backend
    package may import a module mypy cannot find (typed Any), and any other dlbench module may not."""
    for package in ("dlbench", "dlbench/harness", "dlbench/harness/backends", "dlbench/harness/backends/toyfw"):
        (tmp_path / "workflow" / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / "workflow" / package / "__init__.py").write_text("")
    source = "import toyfw_runtime\n\nVERSION: str = toyfw_runtime.__version__\n"
    (tmp_path / "workflow/dlbench/harness/backends/toyfw/backend.py").write_text(source)
    (tmp_path / "workflow/dlbench/harness/stage.py").write_text(source)
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "mypy"), "--no-error-summary", "--cache-dir", str(tmp_path / "cache")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and errors[0].startswith("workflow/dlbench/harness/stage.py:1:"), done.stdout
    assert "toyfw_runtime" in errors[0] and "import-not-found" in errors[0]
    overrides = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    listed = {module for entry in overrides for module in entry["module"] if isinstance(entry["module"], list)}
    framework_modules = {f"{module}.*" for name in NAMES for module in REGISTRY[name].imports}
    assert not listed & framework_modules, "a framework's modules are listed one by one again"


def test_a_framework_dlbench_does_not_offer_is_refused_with_how_to_measure_it(tmp_path):
    config = {"matrix": {"framework": ["oneflow"], "model": ["resnet50"], "topology": ["1x1"], "batch_size": [2]}}
    with pytest.raises(
        ConfigError, match=r"'oneflow' cannot run here: OneFlow .* CPython 3\.7-3\.10 .*runners\.oneflow"
    ):
        load_study(config, SCHEMA, REPO / "envs", tmp_path)
    # a study that runs DLPerf's OneFlow scripts as its runner named oneflow is a study like any other
    runner = {"command": "python train.py", "format": "dlperf", "models": ["resnet50"], "python": sys.executable}
    load_study({**config, "runners": {"oneflow": runner}}, SCHEMA, REPO / "envs", tmp_path)


def test_the_study_refuses_an_unregistered_framework(tmp_path):
    config = {"matrix": {"framework": ["caffe"], "model": ["resnet50"], "topology": ["1x1"], "batch_size": [2]}}
    with pytest.raises(
        ConfigError,
        match=f"'caffe' is neither a framework nor one of the study's runners; available: {', '.join(NAMES)}",
    ):
        load_study(config, SCHEMA, REPO / "envs", tmp_path)


def test_the_cli_offers_the_registered_frameworks():
    assert spec.FRAMEWORKS == NAMES
    help_text = next(a.help for a in spec.parser("x")._actions if a.dest == "framework")
    assert all(name in help_text for name in NAMES)
    args = ["--model", "resnet50", "--topology", "1x1", "--batch-size", "2", "--log", "x"]
    with pytest.raises(SystemExit, match="choose from " + ", ".join(NAMES)):
        spec.spec_from_args(spec.parser("x").parse_args(["--framework", "caffe", *args]))
    assert spec.spec_from_args(spec.parser("x").parse_args(["--framework", NAMES[0], *args])).framework == NAMES[0]


@pytest.mark.parametrize("name", NAMES)
def test_registered_framework_has_environment_file_and_compiler_meaning(name):
    framework = REGISTRY[name]
    assert framework.name == name
    assert (REPO / "envs" / framework.env_file).is_file(), f"envs/{framework.env_file} missing"
    assert framework.display_name and framework.compiler
    assert framework.compiler_meaning == f"{framework.display_name}: {framework.compiler}"


def test_every_backend_package_has_the_same_modules():
    packages = sorted(p.name for p in BACKENDS.iterdir() if (p / "__init__.py").exists())
    assert packages == sorted(NAMES), "a package under backends/ for each registered framework, and no other"
    for name in NAMES:
        modules = {p.stem for p in (BACKENDS / name).glob("*.py")}
        assert {"__init__", *BACKEND_MODULES} <= modules, name
        assert modules - {"__init__", *BACKEND_MODULES} <= set(OPTIONAL_MODULES), name
        assert REGISTRY[name].backend_module == f"dlbench.harness.backends.{name}.backend"


def _defined(path: Path) -> tuple[ast.Module, dict[str, ast.ClassDef], set[str]]:
    tree = ast.parse(path.read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    return tree, classes, functions


@pytest.mark.parametrize("name", NAMES)
def test_backend_class_implements_every_abstract_method(name):
    """Read from the source (the core environment has no framework): `class Backend(BackendBase)` defining every
    abstract method of the contract itself, and bert.py's pretraining_outputs for bert_logits."""
    _, classes, _ = _defined(BACKENDS / name / "backend.py")
    backend = classes.get("Backend")
    assert backend is not None, f"{name}/backend.py defines no class Backend"
    assert [b.id for b in backend.bases if isinstance(b, ast.Name)] == ["BackendBase"], name
    methods = {n.name for n in backend.body if isinstance(n, ast.FunctionDef)}
    missing = sorted(BackendBase.__abstractmethods__ - methods)
    assert not missing, f"{name}: Backend lacks {missing}"
    assert "pretraining_outputs" in _defined(BACKENDS / name / "bert.py")[2], name


def test_the_contract_is_abstract():
    assert inspect.isabstract(BackendBase)
    assert {
        "setup_runtime",
        "setup_resnet",
        "setup_bert",
        "resnet_step",
        "bert_step",
        "loss",
        "sync",
        "barrier",
        "all_gather",
        "environment",
        "strategy_in_effect",
        "settings_in_effect",
        "cpu_gemm",
        "device_name",
        "peak_memory_bytes",
        "shutdown",
    } == BackendBase.__abstractmethods__


# The fast tier imports PyTorch's backend (one framework where one is enough); the full tier every framework's.
@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == "pytorch" else pytest.mark.slow) for n in NAMES])
def test_backend_imports_as_a_concrete_backend_in_its_environment(name, tmp_path):
    facts = run_json(
        env_python(name),
        """
        import importlib, inspect, json, sys
        from dlbench.harness.backends.base import BackendBase
        from dlbench.harness.frameworks import BACKEND_MODULES, REGISTRY
        framework = REGISTRY[sys.argv[1]]
        backend = importlib.import_module(framework.backend_module).Backend
        for module in BACKEND_MODULES:
            importlib.import_module(framework.module(module))
        from dlbench.harness import rank
        from dlbench.harness.spec import RunSpec
        run = RunSpec.of(framework=sys.argv[1], model="resnet_tiny", nodes=1, devices_per_node=1, batch_size=2,
                         precision="fp32", compiler=False, data="synthetic", image_size=32, warmup_steps=1,
                         measured_steps=1, repeat=1, config_id="t", log=sys.argv[2], device="cpu")
        ready = rank.load_backend(run, 0, 1, 0, 1)
        ready.check_model_settings()
        ready.setup_runtime()
        print(json.dumps({"subclass": issubclass(backend, BackendBase), "abstract": inspect.isabstract(backend),
                          "models": list(backend.models), "data": list(backend.data),
                          "runtime": ready.settings_in_effect()}))
        """,
        name,
        str(tmp_path / "run.jsonl"),
    )
    assert facts["subclass"] and not facts["abstract"], facts
    assert set(facts["models"]) <= set(spec.MODELS) and set(facts["data"]) <= set(spec.DATA), facts
    # The settings every model shares are read back once the runtime is set, before any model is built
    # (benchmarks/frameworks.py's plain loops copy them then, and it checks them against the built model's).
    assert facts["runtime"]["summary"].startswith(("oneDNN", "XLA CPU")), facts["runtime"]
    # What the workflow asks of a study's own interpreter (dlbench.harness.probe), from each backend.
    probed = interpreters.probe(name, str(env_python(name)), REPO / "workflow")
    assert probed["framework"] == name and probed["framework_version"] and probed["gpus"] == [], probed


def test_compiler_note_comes_from_the_registry():
    n = len(NAMES)
    records = pd.DataFrame(
        {
            "framework": list(NAMES),
            "compiler": [True] * n,
            "image_size": [224] * n,
            "device_name": ["GPU"] * n,
            "cpu_model": ["CPU"] * n,
            "train_flops_per_sample": [None] * n,
            "seq_length": [None] * n,
            "warmup_steps": [None] * n,
            "measured_steps": [None] * n,
        }
    )
    (note,) = caveats(records)
    # every framework's own words from its declaration, in the order of their names, and what off means
    meanings = [REGISTRY[name].compiler_meaning for name in sorted(NAMES)]
    assert note == "Compiler on means " + "; ".join(meanings) + (
        ". Off: eager / imperative execution, except JAX: compiled (XLA jit)."
    )


# A new framework, declared as the registry declares every framework: the one entry a contributor adds ...
TOY_DECLARATION = """        Framework(
            "toyfw",
            "Toy Framework",
            package="torch",
            imports=("torch",),
            compiler="torch.compile (PyTorch's, under another name)",
            amp="as PyTorch's",
            collectives="as PyTorch's",
            threads="as PyTorch's",
        ),
"""
# ... and its backend package: PyTorch's code under the toy's name, saying which framework ran.
TOY_BACKEND = {
    "__init__.py": '"""A toy framework of the tests: PyTorch\'s backend under another name."""\n',
    "backend.py": (
        "from ..pytorch.backend import Backend as PyTorchBackend\n"
        "from ..pytorch.backend import interpreter_facts  # noqa: F401\n\n\n"
        "class Backend(PyTorchBackend):\n"
        "    def environment(self) -> dict:\n"
        '        return super().environment() | {"framework": "toyfw"}\n'
    ),
    **{f"{module}.py": f"from ..pytorch.{module} import *  # noqa: F403\n" for module in ("resnet", "bert", "data")},
}


@pytest.mark.slow
def test_a_toy_framework_declared_once_runs_through_the_workflow_to_the_report(tmp_path, torch_python):
    """Registered in dlbench.harness.frameworks of a copy of the repository, with its backend package and its
    environment file, a new framework is a value of the study's framework axis, the CLI's, the schema's words and
    the report's rows: nothing else in the workflow names the frameworks."""
    repo = copy_repo(tmp_path / "repo")
    registry = repo / "workflow/dlbench/harness/frameworks.py"
    anchor = '        Framework(\n            "pytorch",'
    assert anchor in registry.read_text()
    registry.write_text(registry.read_text().replace(anchor, TOY_DECLARATION + anchor, 1))
    package = repo / "workflow/dlbench/harness/backends/toyfw"
    package.mkdir()
    for name, text in TOY_BACKEND.items():
        (package / name).write_text(text)
    shutil.copy(REPO / "envs/pytorch.yaml", repo / "envs/toyfw.yaml")
    work = tmp_path / "work"
    work.mkdir()
    config = tiny_config(defaults={**tiny_config()["defaults"], "repeats": 1})
    # its runs use the tests' PyTorch environment as a site's interpreter (software.python): no second build of it
    config["matrix"] |= {"framework": ["toyfw"], "topology": ["1x1"]}
    config["software"] |= {"python": {"toyfw": str(torch_python)}}
    study_file = write_config(work / "study.yaml", config)
    result = snakemake(work, "--cores", "2", "--configfile", str(study_file), snakefile=repo / "Snakefile")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    published = work / "results/reports/v1"
    records = pd.read_csv(published / "records.csv")
    assert list(records["framework"]) == ["toyfw"] and list(records["status"]) == ["ok"], records
    log = work / "results/runs" / records["config_id"][0] / "rep1.jsonl"
    env = next(json.loads(line) for line in log.read_text().splitlines() if '"environment"' in line)
    assert env["framework"] == "toyfw"  # its own backend ran, not PyTorch's
    assert "toyfw" in (published / "index.html").read_text()
    # the schema's words, as the copy's workflow loads them
    words = subprocess.run(
        [sys.executable, "-c", "from dlbench.plan.study import load_schema; import sys, json; "
         "print(json.dumps(load_schema(sys.argv[1])['$defs']['framework']))", str(repo / SCHEMA.relative_to(REPO))],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(repo / "workflow")},
    ).stdout  # fmt: skip
    assert "toyfw (Toy Framework)" in words
