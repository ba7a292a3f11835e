"""The formats of other projects' logs, by name: what an import or a runner's log may be besides dlbench's own.

The registry (logformats.FORMATS) is dlbench's format (runlogs.py) and these; runlogs.py reads a runner's log
through this one, so no parser imports the registry that imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

from . import dllogger, dlperf, mlperf, tf_cnn_benchmarks

FORMATS: dict[str, ModuleType] = {module.NAME: module for module in (mlperf, dllogger, tf_cnn_benchmarks, dlperf)}


class UnknownFormat(ValueError):
    """A `source` no parser is registered for."""


def get(source: str, formats: Mapping[str, ModuleType] = FORMATS) -> ModuleType:
    """The parser module of a format, among `formats`."""
    try:
        return formats[source]
    except KeyError:
        raise UnknownFormat(f"unknown log format {source!r} (known: {', '.join(formats)})") from None
