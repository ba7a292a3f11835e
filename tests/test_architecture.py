"""The structure the code promises: one registry of log formats, agreeing with the record schema, and an
ARCHITECTURE.md whose map names files that exist."""

from __future__ import annotations

import inspect
import re

import pytest
import yaml

from conftest import REPO
from dlbench import logformats
from dlbench.records import SCHEMA_PATH


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
