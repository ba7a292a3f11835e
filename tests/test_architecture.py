"""The structure the code promises: one registry of log formats, agreeing with the record schema."""

from __future__ import annotations

import inspect

import pytest
import yaml

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
