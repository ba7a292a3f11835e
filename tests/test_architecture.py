"""The structure the code promises: one registry of log formats, agreeing with the record schema; an
ARCHITECTURE.md whose map names files that exist; the harness's import boundary as ARCHITECTURE.md writes it,
no import cycles among dlbench's modules, and the package's layout by stage: only the entry points at its top, and
imports between the stage packages in one direction."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from dlbench import logformats
from dlbench.collect.records import SCHEMA_PATH
from dlbench.harness.frameworks import REGISTRY
from dlbench.logformats import external


def test_registry_and_the_schemas_source_enum_agree():
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    assert list(logformats.FORMATS) == schema["properties"]["source"]["enum"]


@pytest.mark.parametrize("name", list(logformats.FORMATS))
def test_every_format_module_declares_its_contract(name):
    module = logformats.FORMATS[name]
    assert module.NAME == name
    assert isinstance(module.THROUGHPUT_DEFINITION, str) and module.THROUGHPUT_DEFINITION
    assert callable(module.parse) and list(inspect.signature(module.parse).parameters) == ["path", "labels"]
    assert module.__doc__ and len(module.__doc__.strip().splitlines()) > 3  # the project's rules, documented
    assert logformats.get(name) is module


def test_unknown_format_is_refused():
    with pytest.raises(logformats.UnknownFormat, match="known: dlbench"):
        logformats.get("nope")


ARCHITECTURE = REPO / "ARCHITECTURE.md"


def test_every_path_architecture_md_names_exists():
    """The map stays true: every repository path it names in backticks is there."""
    text = ARCHITECTURE.read_text()
    paths = set(re.findall(r"`((?:workflow|envs|tests|benchmarks|profiles)/[^`<>*{}\s]+)`", text))
    assert len(paths) > 20
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_architecture_md_names_every_registered_plug_point():
    text = ARCHITECTURE.read_text()
    for heading in (
        "### A framework",
        "### A model",
        "### A log format",
        "### A runner",
        "### A dataset",
        "### A report section",
    ):
        assert heading in text
    for module in ("harness/frameworks.py", "logformats/__init__.py", "report/sections.py", "harness/runner.py"):
        assert module in text, module


# ---------------------------------------------------------------- imports: the harness's boundary, no cycles
PACKAGE = REPO / "workflow" / "dlbench"
HARNESS = PACKAGE / "harness"
# What ARCHITECTURE.md allows the harness beyond the standard library, as written there.
EVERYWHERE = {"numpy"}
# the top-level packages of each backend's framework, as its declaration names them
FRAMEWORK_OF_BACKEND = {name: framework.imports for name, framework in REGISTRY.items()}
OPTIONAL = {  # imported only inside the functions that need them
    "nvidia": ("backends/pytorch/data.py", "dali_imagenet.py", "backends/tensorflow/data.py"),
    "h5py": ("bert_hdf5.py",),
    "horovod": ("backends/mxnet/backend.py",),
}
DLBENCH_OUTSIDE_THE_HARNESS = {
    "dlbench",
    "dlbench.vocabulary",
    "dlbench.vocabulary.axes",
    "dlbench.vocabulary.identity",
    "dlbench.layout",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(path: Path) -> list[tuple[str, bool]]:
    """Every module a file imports (`from x import y` names x.y where that is a module), each with whether the
    import stands at the module's top level (runs on import) rather than inside a function."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((full if full in MODULES else base, id(node) in top_level))
    return found


def test_the_harness_imports_only_what_architecture_md_allows():
    """The harness runs in the framework environments: the standard library, numpy, its framework in its own
    backend, the optional data and launch libraries inside functions, and of dlbench only axes, identity and layout,
    which import only the standard library (ARCHITECTURE.md, data flow)."""
    problems = []
    for path in sorted(HARNESS.rglob("*.py")):
        where = path.relative_to(HARNESS).as_posix()
        backend = where.split("/")[1] if where.startswith("backends/") and where.count("/") > 1 else None
        for name, top_level in imports_of(path):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in EVERYWHERE or name.startswith("dlbench.harness"):
                continue
            if top == "dlbench":
                if name not in DLBENCH_OUTSIDE_THE_HARNESS:
                    problems.append(f"{where}: imports {name} (outside the harness)")
            elif backend and top in FRAMEWORK_OF_BACKEND.get(backend, ()):
                continue
            elif where in OPTIONAL.get(top, ()):
                if top_level:
                    problems.append(f"{where}: imports the optional {name} at the top level")
            else:
                problems.append(f"{where}: imports {name}")
    for name in sorted(DLBENCH_OUTSIDE_THE_HARNESS):
        for imported, _ in imports_of(MODULES[name]):
            if imported.split(".")[0] not in sys.stdlib_module_names and imported not in DLBENCH_OUTSIDE_THE_HARNESS:
                problems.append(f"{name} (imported by the harness): imports {imported}")
    assert not problems, "\n".join(problems)


def test_no_import_cycles_among_dlbench_modules():
    """No two modules of dlbench import each other, directly or around a loop, not even inside a function."""
    graph = {
        name: {imported for imported, _ in imports_of(path) if imported in MODULES and imported != name}
        for name, path in MODULES.items()
    }
    assert "dlbench.logformats.runlogs" in graph["dlbench.logformats"]  # the graph is resolved, not empty
    cycles, done = [], set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append(trail[trail.index(name) :] + [name])
            return
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, trail + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


# ---------------------------------------------------------------- the layout by stage
# ARCHITECTURE.md, "Data flow": the modules are grouped by the stage they serve. At the top stand only the entry
# points named outside the code: the tool's version, preflight (bootstrap.sh's startup line imports
# dlbench.preflight in existing installations) and the modules the rules' shell commands run by name
# (`python -m dlbench.<name>`): Snakemake records every job's command in the results directory, so moving one
# would rerun its jobs, and everything after them, in every existing study.
RULES_RUN = set(re.findall(r'run_module\([^)]*"dlbench\.([\w.]+)"\)', "".join(
    path.read_text() for path in (REPO / "workflow" / "rules").glob("*.smk"))))  # fmt: skip
RULE_COMMANDS = {f"{name}.py" for name in RULES_RUN if "." not in name and (PACKAGE / f"{name}.py").exists()}
TOP_LEVEL = {"__init__.py", "preflight.py", *RULE_COMMANDS}
STAGES = ("vocabulary", "plan", "collect")
# What a stage package imports nothing of, not even inside a function.
NOT_IMPORTED = {
    "vocabulary": ("plan", "collect", "report"),
    "collect": ("plan", "report"),
    "report": ("plan",),
}


def in_package(name: str, package: str) -> bool:
    return name == f"dlbench.{package}" or name.startswith(f"dlbench.{package}.")


def test_only_the_entry_points_stand_at_the_packages_top():
    at_top = {path.name for path in PACKAGE.glob("*.py")}
    assert at_top == TOP_LEVEL, f"modules at the top of workflow/dlbench/ that belong to a stage: {at_top - TOP_LEVEL}"


def test_every_module_the_rules_run_by_name_is_at_the_top_or_in_its_own_environments_package():
    """A stage's module named by a rule would change the recorded command when it moved; the harness and the
    data preparation are packages of their own environments."""
    assert RULE_COMMANDS, RULES_RUN
    tops = {name.removesuffix(".py") for name in RULE_COMMANDS}
    assert all(name.split(".")[0] in ("harness", "dataprep") or name in tops for name in RULES_RUN), RULES_RUN


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_package_says_what_it_holds(stage):
    """Each stage package's docstring names every module the package holds; the package re-exports nothing."""
    init = PACKAGE / stage / "__init__.py"
    tree = ast.parse(init.read_text())
    docstring = ast.get_docstring(tree)
    assert docstring, f"{stage}/__init__.py has no docstring"
    assert all(isinstance(node, ast.Expr) for node in tree.body), f"{stage}/__init__.py holds more than its docstring"
    missing = [path.stem for path in sorted(init.parent.glob("*.py")) if path.stem != "__init__"]
    missing = [name for name in missing if not re.search(rf"\b{name}\b", docstring)]
    assert not missing, f"{stage}/__init__.py does not name {missing}"


@pytest.mark.parametrize("stage", list(NOT_IMPORTED))
def test_imports_between_the_stage_packages_point_one_way(stage):
    """vocabulary imports nothing of plan, collect or report; collect nothing of plan or report; report nothing
    of plan (ARCHITECTURE.md, "Data flow")."""
    modules = {name: path for name, path in MODULES.items() if in_package(name, stage)}
    assert modules, stage
    problems = [
        f"{name} imports {imported}"
        for name, path in sorted(modules.items())
        for imported, _ in imports_of(path)
        if any(in_package(imported, other) for other in NOT_IMPORTED[stage])
    ]
    assert not problems, "\n".join(problems)


def test_the_stage_rules_see_the_imports_they_forbid():
    """The check above reads resolved imports: a plan module's import of collect is seen (plan may import it)."""
    seen = {imported for imported, _ in imports_of(MODULES["dlbench.plan.study"])}
    assert "dlbench.imports" in seen and "dlbench.vocabulary.identity" in seen


# ---------------------------------------------------------------- the plug points' test files
# A plug point's contract is one suite parametrised over its registry (ARCHITECTURE.md, "Tests"); a test file of
# one framework holds only what is particular to it.
CONTRACTS = {
    "framework": "test_contract_framework.py",
    "log format": "test_contract_logformat.py",
    "runner": "test_runner_definitions.py",
}


def test_every_plug_point_has_its_contract_suite():
    for plug_point, name in CONTRACTS.items():
        assert (REPO / "tests" / name).exists(), f"{plug_point}: tests/{name}"
        assert f"`tests/{name}`" in (REPO / "ARCHITECTURE.md").read_text(), f"ARCHITECTURE.md names tests/{name}"


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


@pytest.mark.parametrize("plug_point", list(CONTRACTS))
def test_no_other_test_file_repeats_a_contract(plug_point):
    """What a contract asserts for every entry of its registry is not written again for one of them."""
    contract_file = REPO / "tests" / CONTRACTS[plug_point]
    contract = _test_names(contract_file)
    for path in sorted((REPO / "tests").glob("test_*.py")):
        if path != contract_file:
            assert not contract & _test_names(path), f"{path.name} repeats {sorted(contract & _test_names(path))}"


@pytest.mark.parametrize("name", list(external.FORMATS))
def test_every_external_format_has_its_test_file(name):
    assert (REPO / "tests" / f"test_logformats_{name}.py").exists()
