"""The framework registry (harness/frameworks.py) is complete, and what cannot import it agrees with it: every
registered framework has its backend package with the same modules, a Backend that implements the contract of
backends/base.py, an environment file and a compiler meaning; the configuration schema lists the same names."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import yaml

from conftest import REPO, env_python, run_json
from dlbench.harness import spec
from dlbench.harness.backends.base import BackendBase
from dlbench.harness.frameworks import BACKEND_MODULES, NAMES, OPTIONAL_MODULES, REGISTRY
from dlbench.plan import interpreters
from dlbench.plan.study import ConfigError, load_study
from dlbench.report.notes import caveats

BACKENDS = REPO / "workflow" / "dlbench" / "harness" / "backends"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def test_the_schema_accepts_every_registered_framework_and_names_them():
    """The schema's framework values are a name pattern (runners are frameworks too); the study checks names
    against the registry. Every registered name must pass the pattern and be listed where the schema explains."""
    schema = yaml.safe_load(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator({**schema["$defs"]["framework"], "$defs": schema["$defs"]})
    for name in NAMES:
        assert validator.is_valid(name), name
        assert name in schema["properties"]["matrix"]["properties"]["framework"]["description"], name


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
    assert caveats(records) == [
        "Compiler on means JAX: unsupported (its off already runs the whole step compiled by XLA, jax.jit); "
        "MXNet: hybridize(static_alloc=True, static_shape=True); PyTorch: torch.compile; "
        "TensorFlow: XLA (tf.function jit_compile=True). Off: eager / imperative execution, except JAX: compiled "
        "(XLA jit)."
    ]
