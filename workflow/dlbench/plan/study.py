"""The study: validate the config and expand its matrix into configurations and runs.

Used by the Snakefile at parse time (core environment). A user error raises ConfigError with one
line per problem, each naming the key and the allowed values.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from .. import imports, logformats
from ..collect.expectations import KINDS as EXPECTATION_KINDS
from ..collect.references import load_references, match_references, study_references
from ..harness import quality, sysinfo
from ..harness import runner as runner_module
from ..harness import strategies as strategy_registry
from ..harness.frameworks import REGISTRY, UNAVAILABLE, with_framework_words
from ..harness.spec import FRAMEWORKS, RANK_VARIABLE_PREFIX, RANK_VARIABLES
from ..venvs import EnvSpecError, read_spec
from ..vocabulary import identity
from ..vocabulary.axes import (
    BY_NAME,
    DEFAULT_BUILD,
    MATRIX,
    MODEL_MATRIX,
    matrix_axes_of_kind,
    models_in_words,
    with_model_axes,
)
from ..vocabulary.axes import DEFAULTS as AXIS_DEFAULTS
from ..vocabulary.identity import PUBLISHED_MANIFEST, REPORTS_DIR, is_bert, is_llama
from . import sweep
from .config_errors import ConfigError, schema_problems

AXES = MATRIX  # what the matrix lists and selectors (exclude, include, overrides' match) may name
SELECTABLE = (*MATRIX, "node")  # ... and a sweep's node, which selectors may name too (the sweep lists them)
# The axes of one model kind (None for the others), in the order the matrix expands them: dlbench.vocabulary.axes.
MODEL_AXES = MODEL_MATRIX


def model_axes(model: str) -> tuple[str, ...]:
    """The MODEL_AXES that apply to a model (BERT's, Llama's; none for ResNet models)."""
    return matrix_axes_of_kind(identity.model_kind(model))


SETTINGS = (
    "repeats",
    "warmup_steps",
    "max_warmup_steps",
    "measured_steps",
    "image_size",
    "timeout_minutes",
    "quality",
    "max_batch_size",
    "batch_size_multiple",
)


# The quality settings' defaults (harness/quality.py's Settings; target and eval_every_steps have none).
QUALITY_DEFAULTS = {f.name: f.default for f in fields(quality.Settings) if f.default is not MISSING}


@dataclass(frozen=True)
class Configuration:
    """One cell of the study: everything but the repeat number."""

    framework: str
    model: str
    topology: str
    precision: str
    compiler: bool | str  # off, on (the default mode) or a torch.compile mode (identity.COMPILER_MODES)
    data: str
    batch_size: int | str  # per device, or "max": the largest that trains, found by a search (identity.MAX)
    strategy: str  # gradient exchange between ranks: auto or a framework's (harness/strategies.py)
    repeats: int
    warmup_steps: int | str  # a number, or "auto": until the step times settle, at most max_warmup_steps
    max_warmup_steps: int
    measured_steps: int
    image_size: int
    timeout_minutes: float
    metric: str = identity.THROUGHPUT  # or time_to_quality (harness/quality.py)
    quality: str = ""  # time_to_quality: its settings as sorted JSON (part of the id but for the budget)
    build: str = DEFAULT_BUILD  # the software build (software.builds; default: the study's one per framework)
    node: str | None = None  # a sweep's node or group of nodes ('+'), the runs pinned there; None: SLURM's choice
    max_batch_size: int | None = None  # batch_size max: the search's cap
    batch_size_multiple: int = 1  # batch_size max: the search tries multiples of this
    # The matrix's model axes (MODEL_AXES, declared in dlbench.vocabulary.axes) by name, None for those of other
    # model kinds; read as attributes (c.<axis>).
    inputs: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, **values: Any) -> Configuration:
        """A configuration from its axes and settings, the model axes among them."""
        inputs = {axis: values.pop(axis) for axis in MODEL_AXES}
        return cls(**values, inputs=inputs)

    def __getattr__(self, name: str) -> Any:
        """A model axis's value (only reached for names that are not fields)."""
        if name not in MODEL_AXES:
            raise AttributeError(name)
        return self.__dict__.get("inputs", {}).get(name)

    @property
    def is_max(self) -> bool:
        """batch_size max: its runs are at the size its search finds (Study.searches)."""
        return self.batch_size == identity.MAX

    @property
    def search_id(self) -> str:
        return identity.search_id(self.config_id)

    @property
    def nodes(self) -> int:
        return int(self.topology.split("x")[0])

    @property
    def devices_per_node(self) -> int:
        return int(self.topology.split("x")[1])

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def is_bert(self) -> bool:
        return is_bert(self.model)

    @property
    def is_llama(self) -> bool:
        return is_llama(self.model)

    # Computed once per configuration (a frozen one never changes): every run job's input functions ask for it.
    @functools.cached_property
    def variant(self) -> str:
        return identity.variant(self.as_dict())

    @functools.cached_property
    def config_id(self) -> str:
        """Stable, readable id used in every path: model/framework/topology/variant (dlbench.vocabulary.identity)."""
        return identity.config_id(self.as_dict())

    def run_log(self, repeat: int) -> str:
        return identity.run_log(self.config_id, repeat)

    def run_logs(self) -> list[str]:
        return [self.run_log(r) for r in range(1, self.repeats + 1)]

    def as_dict(self) -> dict[str, Any]:
        """Every axis and setting by name, the model axes among them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "inputs"} | dict(self.inputs)


@dataclass
class Study:
    name: str
    config: dict[str, Any]  # validated, defaults filled in
    configurations: dict[str, Configuration]  # by config_id, in matrix order
    warnings: list[str] = field(default_factory=list)  # settings that apply to nothing, one line each
    sweep_nodes: list[str] = field(default_factory=list)  # a sweep's nodes in order (sweep:); none outside one
    # a sweep's nodes that take no job now (SLURM's state when the study is planned: plan/sweep.py), and why
    unavailable: dict[str, str] = field(default_factory=dict)
    unreadable: str = ""  # why the sweep's nodes' states could not be read (no sinfo): refused at onstart

    def takes_jobs(self, c: Configuration) -> bool:
        """A configuration's runs are jobs unless it is pinned to a node that takes none now (sweep:)."""
        return c.node is None or not any(node in self.unavailable for node in sweep.members(c.node))

    def run_logs(self) -> list[str]:
        """The runs known before any search: those of the configurations with a batch size. In a sweep, a node
        that takes no job now keeps the runs it finished before (they are read, not run) and gets no new one."""
        return [
            log
            for c in self.configurations.values()
            if not c.is_max
            for log in c.run_logs()
            if self.takes_jobs(c) or Path(log).exists()
        ]

    def searches(self) -> dict[str, Configuration]:
        """The batch-size searches of the configurations with batch_size max, by search id: one per configuration
        without its batch size and nodes (the first such configuration says how to run it)."""
        out: dict[str, Configuration] = {}
        for c in self.configurations.values():
            if c.is_max:
                out.setdefault(c.search_id, c)
        return out

    def mlperf_logs(self) -> list[str]:
        """The MLPerf logs of the time-to-quality runs (beside their run logs)."""
        return [
            identity.mlperf_log(c.config_id, r)
            for c in self.configurations.values()
            if c.quality
            for r in range(1, c.repeats + 1)
            if self.takes_jobs(c) or Path(identity.mlperf_log(c.config_id, r)).exists()
        ]

    def frameworks(self) -> list[str]:
        return sorted({c.framework for c in self.configurations.values()})


def settings_leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """The settings as one (path, value) per leaf, ('defaults.measured_steps', 3) (lists by index,
    'matrix.topology[1]'), sorted by path: what a rule tracks as its params, so that a change's reason names the
    leaves that changed and nothing else (the whole settings are tracked all the same: every leaf is one). Tuples,
    not strings: Snakemake would read the braces of a string param (an import's path pattern) as wildcards."""
    if isinstance(value, dict) and value:
        leaves = [leaf for key, item in value.items() for leaf in settings_leaves(item, f"{path}.{key}".lstrip("."))]
    elif isinstance(value, list) and value:
        leaves = [leaf for i, item in enumerate(value) for leaf in settings_leaves(item, f"{path}[{i}]")]
    else:
        leaves = [(path, value)]
    return sorted(leaves, key=lambda leaf: leaf[0])


# ---------------------------------------------------------------- validation
def _fill_defaults(config: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    settings_schema = schema["$defs"]["settings"]["properties"]
    out = dict(config)
    out.setdefault("study", "study")
    out["report"] = _object_defaults(config.get("report", {}), schema["properties"]["report"])
    out["telemetry"] = _object_defaults(config.get("telemetry", {}), schema["properties"]["telemetry"])
    out["platform"] = _object_defaults(config.get("platform", {}), schema["properties"]["platform"])
    out["software"] = {
        "find_links": "pip",
        "venv_dir": ".venvs",
        "python": {},
        "container": {},
        "builds": {},
        **config.get("software", {}),
    }
    out["defaults"] = {k: v["default"] for k, v in settings_schema.items() if "default" in v} | config.get(
        "defaults", {}
    )
    # An imports-only study has no matrix: no axes, no runs.
    matrix = dict(config.get("matrix", {"framework": [], "model": [], "topology": [], "batch_size": []}))
    for axis in AXES:  # the schema states the same defaults (tests/test_axes.py)
        if axis in AXIS_DEFAULTS:
            matrix.setdefault(axis, [AXIS_DEFAULTS[axis]])
    out["matrix"] = matrix
    for key in ("exclude", "include", "overrides", "imports", "references", "expectations"):
        out.setdefault(key, [])
    runner_schema = schema["$defs"]["runner"]["properties"]
    out["runners"] = {
        name: {k: p["default"] for k, p in runner_schema.items() if "default" in p} | runner
        for name, runner in config.get("runners", {}).items()
    }
    out["datasets"] = _object_defaults(config.get("datasets", {}), schema["properties"]["datasets"])
    # No sweep: {}; a sweep's settings with their defaults (its tolerance).
    sweep_schema = schema["properties"]["sweep"]["properties"]
    given = config.get("sweep") or {}
    out["sweep"] = {k: p["default"] for k, p in sweep_schema.items() if "default" in p} | given if given else {}
    return out


def _object_defaults(value: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A nested object with the schema's defaults filled in (sub-objects always present)."""
    out = dict(value)
    for key, prop in schema.get("properties", {}).items():
        if prop.get("type") == "object":
            out[key] = _object_defaults(value.get(key, {}), prop)
        elif key not in out and "default" in prop:
            out[key] = prop["default"]
    return out


RAW_INPUTS = {"imagenet": ("train_dir", "validation_dir", "synsets"), "bert": ("inputs",)}
INPUTS_OF = {"llama": "bert"}  # Llama's token shards are made from BERT's text (datasets.bert: source, inputs)


def dataset_of(configuration: Configuration) -> str | None:
    """The prepared dataset a configuration reads: imagenet, bert, llama (token shards), or None (synthetic)."""
    if configuration.data != "real":
        return None
    return "bert" if configuration.is_bert else "llama" if configuration.is_llama else "imagenet"


def _check_datasets(config: dict[str, Any], configurations: dict[str, Configuration], base_dir: Path) -> list[str]:
    """The datasets the study reads must name inputs that exist (checked before any job starts)."""
    problems = []
    read = {dataset_of(c) for c in configurations.values()}
    for name in sorted(d for d in read if d is not None):
        name = INPUTS_OF.get(name, name)
        dataset = config["datasets"][name]
        if dataset["source"] == "raw":
            problems += [
                f"datasets.{name}.{key}: required with source: raw" for key in RAW_INPUTS[name] if key not in dataset
            ]
        paths = [
            (k, dataset[k])
            for k in (
                "train_dir",
                "validation_dir",
                "validation_labels",
                "synsets",
                "metadata",
                "bounding_boxes",
                "vocab",
            )
            if k in dataset
        ]
        paths += [(f"inputs[{i}]", p) for i, p in enumerate(dataset.get("inputs", []))]
        for key, path in paths:
            if not Path(base_dir, path).exists():
                problems.append(f"datasets.{name}.{key}: {path} does not exist")
            elif key.endswith("_dir") and not Path(base_dir, path).is_dir():
                problems.append(f"datasets.{name}.{key}: {path} is a file, not a directory")
            elif not key.endswith("_dir") and Path(base_dir, path).is_dir():
                problems.append(f"datasets.{name}.{key}: {path} is a directory, not a file")
    return problems


DUMP_SUFFIXES = (".xml.bz2", ".xml.gz", ".xml", ".bz2")  # Wikipedia dumps among datasets.bert.inputs (data.smk)
SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _check_dataset_settings(config: dict[str, Any]) -> list[str]:
    bert, problems = config["datasets"]["bert"], []
    if bert["jobs"] > bert["shards"]:
        problems.append(
            f"datasets.bert.jobs: {bert['jobs']} is more than datasets.bert.shards ({bert['shards']}); "
            f"every job writes at least one shard, so use at most {bert['shards']} jobs (or more shards)"
        )
    for i, path in enumerate(bert.get("inputs", [])):
        stem = Path(path).name.split(".")[0]
        if str(path).endswith(DUMP_SUFFIXES) and not SAFE_NAME.match(stem):
            problems.append(
                f"datasets.bert.inputs[{i}]: the dump's file name {Path(path).name!r} names its text "
                f"file ({identity.BERT_TEXT_PATTERN.format(name=stem)}): before the first '.', use letters, digits, "
                "'_' and '-' only (rename or link the file)"
            )
    return problems


# Where reports are published (workflow/rules/report.smk): one directory per version, never overwritten, and
# the rule's own output, which names the version the study's current results were published as.


def published_version(base_dir: Path) -> str | None:
    """The version this working directory's report rule last published (or found unchanged), if any."""
    try:
        return json.loads(Path(base_dir, PUBLISHED_MANIFEST).read_text())["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _check_report_version(config: dict[str, Any], base_dir: Path) -> list[str]:
    """A fixed report version must not exist yet, unless it is this study's own (then a rerun with unchanged
    results publishes nothing; workflow/rules/report.smk stops a rerun that would change them)."""
    version = config["report"]["version"]
    if version != "auto" and version.lower() == "auto":  # a typo of auto, not a name to publish under
        return [
            f"report.version: {version!r} is not auto (a report's name is case-sensitive: this would publish "
            f"{REPORTS_DIR}/{version}); did you mean auto?"
        ]
    target = Path(base_dir, REPORTS_DIR, version)
    if version == "auto" or not (target.exists() or target.is_symlink()) or published_version(base_dir) == version:
        return []
    return [
        f"report.version: {version!r} already exists ({REPORTS_DIR}/{version}) and a published report is "
        "never overwritten; choose a new name, or auto (the next free v1, v2, ...)"
    ]


def _include_axes(entry: dict[str, Any]) -> dict[str, Any]:
    """The configuration an include entry names (the axes it does not give at their defaults; a model kind's
    axes at theirs where they apply, None where not)."""
    given = {k: v for k, v in entry.items() if k in AXES}
    values = {name: given.get(name, AXIS_DEFAULTS.get(name)) for name in AXES if name not in MODEL_AXES}
    applies = model_axes(given["model"])
    for axis in MODEL_AXES:
        values[axis] = given.get(axis, AXIS_DEFAULTS[axis]) if axis in applies else None
    return values


def _check_axis_limits(config: dict[str, Any]) -> list[str]:
    """A study whose models are all of kinds that limit a model axis (axes.Axis.limits: BERT's sequence length)
    cannot ask for more (the schema allows every kind's values; where the matrix has a model without the limit
    too, its cells beyond the limit record `unsupported`)."""
    kinds = {identity.model_kind(m) for m in config["matrix"]["model"]}
    errors = []
    for axis in (BY_NAME[name] for name in MODEL_MATRIX):
        applying, limits = [kind for kind in kinds if axis.applies_to(kind)], axis.limits or {}
        if not applying or any(kind not in limits for kind in applying):
            continue
        limit, why = min(limits[kind] for kind in applying)
        errors += [
            f"matrix.{axis.name}[{i}]: {value} is more than {why}"
            for i, value in enumerate(config["matrix"][axis.name])
            if value > limit
        ]
    return errors


def _check_includes(config: dict[str, Any], warnings: list[str]) -> list[str]:
    """The same configuration included twice: an error with different settings (one would vanish), a warning
    without. A model kind's keys (BERT's, Llama's) on another model apply to nothing: a warning."""
    problems: list[str] = []
    seen: list[tuple[dict[str, Any], dict[str, Any], int]] = []
    for i, entry in enumerate(config["include"]):
        axes, settings = _include_axes(entry), {k: v for k, v in entry.items() if k in SETTINGS}
        for axis in MODEL_AXES:
            if axis in entry and axis not in model_axes(entry["model"]):
                warnings.append(
                    f"include[{i}].{axis}: applies to {models_in_words(axis)} only, not {entry['model']}; ignored"
                )
        first = next(((s, j) for a, s, j in seen if a == axes), None)
        if first is None:
            seen.append((axes, settings, i))
        elif first[0] != settings:
            differ = ", ".join(
                f"{k} {first[0].get(k, 'default')} vs {settings.get(k, 'default')}"
                for k in SETTINGS
                if first[0].get(k) != settings.get(k)
            )
            problems.append(
                f"include[{i}]: the same configuration as include[{first[1]}] with other settings "
                f"({differ}); only one would be used, so give it once"
            )
        else:
            warnings.append(f"include[{i}]: the same configuration as include[{first[1]}], listed twice")
    return problems


def _unused_axes(raw: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """A model kind's matrix axes (BERT's, Llama's) given for a study whose matrix has no such model apply to
    nothing."""
    matrix = raw.get("matrix") or {}
    used = {axis for m in config["matrix"]["model"] for axis in model_axes(m)}
    models = ", ".join(config["matrix"]["model"]) or "none"
    return [
        f"matrix.{axis}: applies to {models_in_words(axis)} only, and matrix.model has none ({models}); ignored"
        for axis in MODEL_AXES
        if axis in matrix and axis not in used
    ]


def _unused_framework_settings(config: dict[str, Any], configurations: dict[str, Configuration]) -> list[str]:
    """Settings given per framework (an interpreter, an image, a runner's definition) for a framework that no
    configuration of the study runs (after exclude and include) apply to nothing."""
    run = sorted({c.framework for c in configurations.values()})
    given = [(f"software.{key}.{name}", name) for key in ("python", "container") for name in config["software"][key]]
    given += [(f"runners.{name}", name) for name in config["runners"]]
    given += [(f"software.builds.{b}.{name}", name) for b, fws in config["software"]["builds"].items() for name in fws]
    listed = {*config["matrix"]["build"], *(e.get("build") for e in config["include"])}
    unlisted = [
        f"software.builds.{b}: not in matrix.build (it lists {', '.join(config['matrix']['build'])}); not run"
        for b in config["software"]["builds"]
        if b not in listed
    ]
    return unlisted + [
        f"{where}: the study runs no {name} configuration (it runs: {', '.join(run) or 'none'}); ignored"
        for where, name in given
        if name not in run
    ]


def _check_expectations(
    config: dict[str, Any], configurations: dict[str, Configuration], warnings: list[str], base_dir: Path = Path(".")
) -> list[str]:
    """An expectation against a build names one the matrix runs and selects no configuration of that build (it would
    pass against itself); one whose selector matches none of the study's
    configurations (nor, with imports, perhaps an imported one) is noted: the report says it cannot be judged."""
    problems = []
    # the study's published figures, read once where an of_published expectation needs them
    needs_figures = any("of_published" in entry for entry in config["expectations"])
    published = study_references(config, base_dir) if needs_figures else pd.DataFrame()
    for i, entry in enumerate(config["expectations"]):
        kinds = [kind for kind in EXPECTATION_KINDS if kind in entry]
        if len(kinds) != 1:
            problems.append(
                f"expectations[{i}]: give one of {', '.join(EXPECTATION_KINDS)} "
                + (f"(it gives {' and '.join(kinds)})" if kinds else "(it gives none)")
            )
        for build in entry.get("of_build", {}):
            if build not in config["matrix"]["build"]:
                problems.append(
                    f"expectations[{i}].of_build: {build!r} is not in matrix.build "
                    f"({', '.join(config['matrix']['build'])})"
                )
            itself = [c for c in configurations.values() if c.build == build and _matches(entry["match"], c.as_dict())]
            if itself:  # each of these would be compared with itself, and pass
                problems.append(
                    f"expectations[{i}].of_build: {build!r} is a build its match selects ({len(itself)} "
                    f"configuration(s), e.g. {itself[0].config_id}): each would be compared with itself; add "
                    "build: <another build> to match"
                )
        matched = [c for c in configurations.values() if _matches(entry["match"], c.as_dict())]
        if configurations and not matched:
            warnings.append(
                f"expectations[{i}].match: {entry['match']} matches no configuration of the study; the report will "
                "say it cannot be judged"
            )
        elif matched and "of_published" in entry and not _published_matches(matched, published):
            files = ", ".join(config["references"]) or "the ones dlbench ships"
            warnings.append(
                f"expectations[{i}].of_published: no published figure ({files}) matches any of its {len(matched)} "
                f"configurations (e.g. {matched[0].config_id}): each cannot be judged, and the study exits 1; "
                "docs/builds.md says which keys a figure matches on"
            )
    return problems


def _published_matches(configurations: list[Configuration], published: pd.DataFrame) -> bool:
    """Whether any of these published figures can match one of these configurations
    (dlbench.collect.references.match_references, on the configurations' axes)."""
    frame = pd.DataFrame([{**c.as_dict(), "config_id": c.config_id, "median": 1.0} for c in configurations])
    return not match_references(frame, published).empty


def _check_comparisons(config: dict[str, Any], base_dir: Path) -> list[str]:
    """report.compare_to and references: must name something that exists (checked before any job)."""
    problems = []
    for i, path in enumerate(config.get("references", [])):
        try:
            load_references(Path(base_dir, path))
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as error:
            problems.append(f"references[{i}]: {path}: cannot be read as published figures ({error})")
    target = config["report"].get("compare_to")
    if target and target != "previous":
        candidates = [Path(base_dir, "results/reports", target), Path(base_dir, target)]
        if not any(c.exists() for c in candidates):
            problems.append(
                f"report.compare_to: {target!r} is neither 'previous', a report version under "
                "results/reports/, nor an existing report directory or records.csv"
            )
    return problems


def load_schema(schema_path: Path) -> dict[str, Any]:
    """The config schema: the file, with the model axes of dlbench.vocabulary.axes in the matrix, selectors and
    includes, and the registered frameworks named in its descriptions (dlbench.harness.frameworks)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's where PyYAML has it (every Snakemake start)
    return with_framework_words(with_model_axes(yaml.load(Path(schema_path).read_text(), Loader=loader)))


def validate(config: dict[str, Any], schema_path: Path) -> dict[str, Any]:
    """Check the config against the JSON schema; return it with every default filled in."""
    schema = load_schema(schema_path)
    problems = schema_problems(config, schema)
    if problems:
        raise ConfigError("\n".join(problems))
    return _fill_defaults(config, schema)


def _batch_sizes(matrix: dict[str, Any], model: str, precision: str) -> list[int]:
    spec = matrix["batch_size"]
    if isinstance(spec, list):
        return spec
    per_model = spec[model]
    return per_model if isinstance(per_model, list) else per_model[precision]


def _strategies(matrix: dict[str, Any], framework: str) -> list[str]:
    spec = matrix["strategy"]
    return spec if isinstance(spec, list) else spec.get(framework, [strategy_registry.AUTO])


def _builds(config: dict[str, Any], framework: str) -> list[str]:
    """The matrix's builds a framework has: default, and those of software.builds that name it."""
    defined = config["software"]["builds"]
    return [b for b in config["matrix"]["build"] if b == DEFAULT_BUILD or framework in defined.get(b, {})]


def _check_builds(config: dict[str, Any], base_dir: Path) -> list[str]:
    """Every build the matrix or an include names is defined for a framework the study runs; a build's
    environment file exists, reads as one and has a name no other environment of the study has; its interpreter
    is an executable file (what it imports is probed later, as software.python's); its .sif image exists."""
    problems = []
    builds, matrix = config["software"]["builds"], config["matrix"]
    frameworks = {*matrix["framework"], *(e["framework"] for e in config["include"])}
    for name in matrix["build"]:
        if name != DEFAULT_BUILD and name not in builds:
            close = difflib.get_close_matches(name, list(builds), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(
                f"matrix.build: {name!r} is not a build of software.builds{hint}; builds: "
                f"{', '.join([DEFAULT_BUILD, *builds])}"
            )
        elif name != DEFAULT_BUILD and not frameworks & set(builds[name]):
            problems.append(
                f"matrix.build: {name!r} names no framework the study runs (software.builds.{name} has "
                f"{', '.join(builds[name])}; the matrix runs {', '.join(sorted(frameworks))})"
            )
    for i, entry in enumerate(config["include"]):
        name = entry.get("build", DEFAULT_BUILD)
        if name != DEFAULT_BUILD and entry["framework"] not in builds.get(name, {}):
            problems.append(f"include[{i}].build: software.builds has no {name!r} of {entry['framework']}")
    stems: dict[str, str] = {fw: str(Path("envs", REGISTRY[fw].env_file)) for fw in FRAMEWORKS}
    for name, per_framework in builds.items():
        for framework, entry in per_framework.items():
            where = f"software.builds.{name}.{framework}"
            given = [key for key in ("env", "python", "container") if key in entry]
            if len(given) > 1:
                problems.append(f"{where}: give one of env, python or container (it gives {' and '.join(given)})")
                continue
            if "env" in entry:
                problems += _check_build_env(f"{where}.env", entry["env"], base_dir, stems)
            if "python" in entry:
                problems += _check_interpreter(f"{where}.python", entry["python"], base_dir)
            if entry.get("container", "").endswith(".sif") and not Path(base_dir, entry["container"]).is_file():
                problems.append(f"{where}.container: {entry['container']} does not exist")
            for variable in entry.get("variables", {}):
                if variable in RANK_VARIABLES or variable.startswith(RANK_VARIABLE_PREFIX):
                    problems.append(
                        f"{where}.variables.{variable}: dlbench sets {variable} for each rank itself (the threads "
                        "of the cores it gives the rank, the rendezvous), after the build's variables: it would "
                        "be overridden without a word; a run's cores are the command's (--cores, SLURM's "
                        "cpus-per-task), its threads follow them"
                    )
    return problems


def _check_build_env(where: str, path: str, base_dir: Path, stems: dict[str, str]) -> list[str]:
    """A build's environment file: it exists, reads as an environment (dlbench.venvs.read_spec), and its name
    (which names its environment under software.venv_dir) is its own."""
    stem = Path(path).stem
    if not re.fullmatch(r"[a-z0-9_]+", stem):
        return [
            f"{where}: {path}: the file's name names its environment: use lower-case letters, digits and '_' "
            f"before .yaml (e.g. {re.sub(r'[^a-z0-9_]', '_', stem.lower())}.yaml)"
        ]
    if not Path(base_dir, path).is_file():
        return [f"{where}: {path} does not exist"]
    if stems.setdefault(stem, path) != path:
        return [f"{where}: {path} has the name of another environment ({stems[stem]}); rename one of the two files"]
    try:
        read_spec(Path(base_dir, path))
    except (EnvSpecError, OSError, yaml.YAMLError, AttributeError, TypeError) as error:
        return [f"{where}: {path} is not an environment file dlbench can build ({error})"]
    return []


def _check_strategies(config: dict[str, Any]) -> list[str]:
    """Every strategy name must be some framework's (a framework's name for another framework's strategy is an
    `unsupported` record, not an error); per framework, only the matrix's frameworks."""
    matrix, problems = config["matrix"], []
    spec = matrix["strategy"]
    given = (
        [("matrix.strategy", spec)]
        if isinstance(spec, list)
        else [(f"matrix.strategy.{fw}", names) for fw, names in spec.items()]
    )
    given += [(f"include[{i}].strategy", [e["strategy"]]) for i, e in enumerate(config["include"]) if "strategy" in e]
    for where, names in given:
        for name in names:
            if not strategy_registry.known(name):
                close = difflib.get_close_matches(name, strategy_registry.names(), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(
                    f"{where}: {name!r} is not a known strategy{hint}; known: auto, "
                    f"{', '.join(strategy_registry.names())} (docs/strategies.md)"
                )
    if isinstance(spec, dict):
        problems += [
            f"matrix.strategy.{fw}: {fw!r} is not in matrix.framework (allowed: {', '.join(matrix['framework'])})"
            for fw in spec
            if fw not in matrix["framework"]
        ]
    return problems


def _check_batch_search(config: dict[str, Any], configurations: dict[str, Configuration]) -> list[str]:
    """batch_size max needs a limit the search can meet: a GPU's memory, the CPU budget or a cap; a cap must
    allow one multiple. The CPU budget is an address-space limit, which CUDA cannot run under. Time-to-quality
    configurations need a fixed batch size (their schedule depends on it)."""
    platform, problems = config["platform"], []
    if "memory_limit_gb" in platform and platform["device"] == "cuda":
        problems.append(
            "platform.memory_limit_gb: a CPU memory budget (an address-space limit, which CUDA cannot "
            "run under); on GPUs the device's own memory is the limit: remove it, or use device: cpu"
        )
    for c in configurations.values():
        if not c.is_max:
            continue
        if platform["device"] != "cuda" and "memory_limit_gb" not in platform and c.max_batch_size is None:
            problems.append(
                f"matrix.batch_size: max ({c.config_id}) with device {platform['device']} needs "
                "platform.memory_limit_gb (a CPU memory budget) or max_batch_size (a cap): without "
                "either, a search on CPU grows until the machine itself runs out of memory"
            )
        if c.quality:
            problems.append(
                f"matrix.batch_size: max ({c.config_id}) with metric time_to_quality: a time-to-quality "
                "run's batch size is part of its learning-rate schedule; give it a number (a throughput "
                "study with batch_size max finds one)"
            )
        if c.max_batch_size is not None and c.max_batch_size < c.batch_size_multiple:
            problems.append(
                f"max_batch_size: {c.max_batch_size} ({c.config_id}) is smaller than "
                f"batch_size_multiple {c.batch_size_multiple}; the search could try no size"
            )
    return list(dict.fromkeys(problems))


def _check_runners(runners: dict[str, dict[str, Any]], envs_dir: Path, base_dir: Path) -> list[str]:
    """A runner must name a known log format, an environment or interpreter that exists and only known
    placeholders; a runner may not take a framework's name."""
    problems = []
    for name, runner in runners.items():
        where = f"runners.{name}"
        if name in FRAMEWORKS:
            problems.append(f"{where}: {name!r} is one of dlbench's frameworks; give the runner another name")
        if runner["format"] not in logformats.FORMATS:
            problems.append(
                f"{where}.format: {runner['format']!r} is not a known log format "
                f"(known: {', '.join(logformats.FORMATS)})"
            )
        if "python" in runner:  # the rule software.python and builds follow: a path, or a command name on PATH
            problems += _check_interpreter(f"{where}.python", runner["python"], base_dir)
        elif runner["env"] != "core" and not Path(envs_dir, f"{runner['env']}.yaml").exists():
            problems.append(f"{where}.env: no {envs_dir}/{runner['env']}.yaml (use core, or add that file)")
        if "workdir" in runner and not Path(base_dir, runner["workdir"]).is_dir():
            problems.append(f"{where}.workdir: {runner['workdir']} is not a directory")
        command = shlex.split(runner["command"]) if isinstance(runner["command"], str) else runner["command"]
        items = [*command, *(a for flags in runner.get("flags", {}).values() for args in flags.values() for a in args)]
        for item in items:
            unknown = sorted(
                runner_module.placeholders(item) - set(runner_module.PLACEHOLDERS) - set(runner_module.FLAG_GROUPS)
            )
            if unknown:
                problems.append(
                    f"{where}.command: unknown placeholder {{{unknown[0]}}} in {item!r} "
                    f"(known: {', '.join(runner_module.PLACEHOLDERS + runner_module.FLAG_GROUPS)})"
                )
    return problems


def _check_software(software: dict[str, Any], base_dir: Path) -> list[str]:
    """An interpreter or image per framework: the key a framework's name, one of the two per framework, and an
    interpreter that is an executable file (what it imports is checked later: dlbench.plan.interpreters)."""
    problems = []
    for key in ("python", "container"):
        for name, value in software[key].items():
            where = f"software.{key}.{name}"
            if name not in FRAMEWORKS:
                close = difflib.get_close_matches(name, FRAMEWORKS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(
                    f"{where}: {name!r} is not one of dlbench's frameworks{hint}; frameworks: {', '.join(FRAMEWORKS)}"
                )
            elif "\n" in value:
                problems.append(f"{where}: {value!r} has a line break in it")
            elif key == "python":
                problems += _check_interpreter(where, value, base_dir)
            elif key == "container" and value.endswith(".sif") and not Path(base_dir, value).is_file():
                problems.append(f"{where}: {value} does not exist")
    for name in sorted(set(software["python"]) & set(software["container"])):
        problems.append(
            f"software.container.{name}: {name} has an interpreter too (software.python.{name}); give one of the two"
        )
    return problems


def _check_interpreter(where: str, value: str, base_dir: Path) -> list[str]:
    """An interpreter a study names: on PATH (a command name) or an executable file."""
    if "/" not in value:
        if shutil.which(value) is None:
            return [
                f"{where}: no {value!r} on PATH (give the interpreter's path, or load the module that provides it "
                "first)"
            ]
    elif not Path(base_dir, value).is_file():
        return [
            f"{where}: {value} does not exist (give the interpreter's path, e.g. the output of `which python` with "
            "the site's module loaded)"
        ]
    elif not os.access(Path(base_dir, value), os.X_OK):
        return [f"{where}: {value} is not executable"]
    return []


def _check_matrix(config: dict[str, Any], envs_dir: Path, base_dir: Path = Path(".")) -> None:
    matrix = config["matrix"]
    problems = (
        _check_software(config["software"], base_dir)
        + _check_runners(config["runners"], envs_dir, base_dir)
        + _check_strategies(config)
        + _check_builds(config, base_dir)
    )
    available = [fw for fw in FRAMEWORKS if Path(envs_dir, REGISTRY[fw].env_file).exists()] + list(config["runners"])
    frameworks = {*matrix["framework"], *(e["framework"] for e in config["include"])}
    for fw in sorted(frameworks):
        if fw not in available:
            close = difflib.get_close_matches(fw, [*FRAMEWORKS, *config["runners"]], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            if fw in FRAMEWORKS:
                reason = f"has no environment (no {envs_dir}/{REGISTRY[fw].env_file})"
            elif fw in UNAVAILABLE:
                reason = f"cannot run here: {UNAVAILABLE[fw]}"
            else:
                reason = f"is neither a framework nor one of the study's runners{hint}"
            problems.append(f"matrix.framework: {fw!r} {reason}; available: {', '.join(available) or 'none'}")
    if isinstance(matrix["batch_size"], dict):
        for model, per_model in matrix["batch_size"].items():
            if model not in matrix["model"]:
                problems.append(
                    f"matrix.batch_size.{model}: {model!r} is not in matrix.model "
                    f"(allowed: {', '.join(matrix['model'])})"
                )
            elif isinstance(per_model, dict):
                missing = [p for p in matrix["precision"] if p not in per_model]
                if missing:
                    problems.append(f"matrix.batch_size.{model}: no batch sizes for precision {', '.join(missing)}")
        for model in matrix["model"]:
            if model not in matrix["batch_size"]:
                problems.append(f"matrix.batch_size: no batch sizes for model {model!r}")
    if problems:
        raise ConfigError("\n".join(problems))


def _matches(selector: dict[str, Any], axes: dict[str, Any]) -> bool:
    return all(axes.get(key) == value for key, value in selector.items() if key in SELECTABLE)


def expand(
    config: dict[str, Any],
    envs_dir: Path,
    base_dir: Path = Path("."),
    warnings: list[str] | None = None,
    nodes: list[str] | None = None,
) -> dict[str, Configuration]:
    """All configurations of a validated config, by config_id (matrix order, then includes); in a sweep (`nodes`,
    in order) each on every consecutive group of as many nodes as its topology has. Selectors that match nothing
    are noted in `warnings` (printed when None)."""
    notes: list[str] = [] if warnings is None else warnings
    _check_matrix(config, envs_dir, base_dir)
    matrix = config["matrix"]
    cells: list[dict[str, Any]] = []
    for fw, model, topo, prec, comp, data in itertools.product(
        matrix["framework"],
        matrix["model"],
        matrix["topology"],
        matrix["precision"],
        matrix["compiler"],
        matrix["data"],
    ):
        applies = model_axes(model)  # the model's own axes vary; the other kinds' are None
        model_cells = itertools.product(*(matrix[a] if a in applies else [None] for a in MODEL_AXES))
        for model_values, bs, strategy, build in itertools.product(
            list(model_cells), _batch_sizes(matrix, model, prec), _strategies(matrix, fw), _builds(config, fw)
        ):
            cells.append(
                dict(
                    framework=fw,
                    model=model,
                    topology=topo,
                    precision=prec,
                    compiler=comp,
                    data=data,
                    batch_size=bs,
                    **dict(zip(MODEL_AXES, model_values, strict=True)),
                    strategy=strategy,
                    build=build,
                )
            )
    cells = [dict(cell, metric=metric) for cell in cells for metric in matrix["metric"]]
    cells = _on_nodes(cells, nodes or [], notes)
    for i, selector in enumerate(config["exclude"]):
        kept = [c for c in cells if not _matches(selector, c)]
        if len(kept) == len(cells):
            notes.append(f"exclude[{i}]: {selector} matches no configuration; ignored")
        cells = kept
    extra_settings: list[tuple[dict, dict]] = []
    for entry in config["include"]:
        for axes in _on_nodes([_include_axes(entry)], nodes or [], notes):
            if axes not in cells:
                cells.append(axes)
            extra_settings.append((axes, {k: v for k, v in entry.items() if k in SETTINGS}))

    for i, override in enumerate(config["overrides"]):
        if not any(_matches(override["match"], axes) for axes in cells):
            notes.append(f"overrides[{i}].match: {override['match']} matches no configuration; ignored")
    configurations: dict[str, Configuration] = {}
    problems: list[str] = []
    for axes in cells:
        settings = dict(config["defaults"])
        for override in config["overrides"]:
            if _matches(override["match"], axes):
                _merge_settings(settings, override["set"])
        for include_axes, include_settings in extra_settings:
            if include_axes == axes:
                _merge_settings(settings, include_settings)
        settings["quality"], problem = _quality(axes, settings, config["runners"])
        if problem:
            problems.append(problem)
            continue
        configuration = Configuration.of(**axes, **settings)
        configurations[configuration.config_id] = configuration
    if problems:
        raise ConfigError("\n".join(sorted(set(problems))))
    if not configurations and not config["imports"]:
        catch_all = [i for i, selector in enumerate(config["exclude"]) if not selector]
        if catch_all:  # an empty selector matches every configuration
            raise ConfigError(
                f"exclude[{catch_all[0]}]: an empty selector excludes every configuration (the study "
                "is empty); name the axes to exclude, e.g. {precision: amp}"
            )
        raise ConfigError("matrix: the study is empty (every configuration is excluded)")
    if warnings is None:
        for note in notes:
            print(f"dlbench: warning: {note}", file=sys.stderr)
    return configurations


def _on_nodes(cells: list[dict[str, Any]], nodes: list[str], notes: list[str]) -> list[dict[str, Any]]:
    """Each cell on every consecutive group of the sweep's nodes that its topology spans (node None outside a
    sweep); nodes left out of a topology's groups are noted."""
    if not nodes:
        return [dict(cell, node=None) for cell in cells]
    out = []
    for cell in cells:
        spanned, _ = identity.parse_topology(cell["topology"])
        node_groups, left = sweep.groups(nodes, spanned)
        if left and not any(f"sweep: {cell['topology']}:" in note for note in notes):
            notes.append(
                f"sweep: {cell['topology']}: {len(nodes)} nodes make {len(node_groups)} group(s) of {spanned}; "
                f"{', '.join(left)} left out of them"
            )
        out += [dict(cell, node=group) for group in node_groups]
    return out


def _merge_settings(settings: dict[str, Any], new: dict[str, Any]) -> None:
    """Later settings win; `quality` is merged key by key (an override may change only the target or budget)."""
    for key, value in new.items():
        settings[key] = {**settings.get(key, {}), **value} if key == "quality" else value


def _quality(axes: dict[str, Any], settings: dict[str, Any], runners: dict[str, Any]) -> tuple[str, str]:
    """(the quality settings as sorted JSON, with the schema's defaults, for time_to_quality; else "", and a
    problem naming the configuration, or "")."""
    given = settings.pop("quality", None) or {}
    if axes["metric"] != identity.TIME_TO_QUALITY:
        return "", ""
    values = {**QUALITY_DEFAULTS, **given}
    where = (
        f"quality (time_to_quality of {axes['model']}/{axes['framework']}/{axes['topology']}, bs{axes['batch_size']})"
    )
    if axes["data"] != "real" or axes["framework"] in runners:
        return "", (
            f"matrix.metric: time_to_quality of {axes['model']}/{axes['framework']} on {axes['data']} data: "
            "only dlbench's own models on real data have a held-out evaluation (synthetic data has none, "
            "runners are not implemented); exclude it, e.g. exclude: [{metric: time_to_quality, data: "
            "synthetic}]"
        )
    missing = [key for key in ("target", "eval_every_steps") if key not in values]
    if missing:
        return "", f"{where}: {', '.join(missing)} required (set them in defaults.quality or an override)"
    try:
        quality.Settings(**values)
    except (TypeError, ValueError) as error:
        return "", f"{where}: {error}"
    if values["max_minutes"] and values["max_minutes"] >= settings["timeout_minutes"]:
        return "", (
            f"{where}: max_minutes {values['max_minutes']} must be less than timeout_minutes "
            f"{settings['timeout_minutes']} (a run at its budget must still end by itself)"
        )
    return json.dumps(values, sort_keys=True), ""


def _check_sweep(config: dict[str, Any], configurations: dict[str, Configuration], nodes: list[str]) -> list[str]:
    """A sweep names nodes (or a partition), every configuration has a batch size, and of_fleet needs a sweep."""
    problems = []
    if config["sweep"] and not nodes:
        problems.append("sweep: names no node: give sweep.nodes (host names, hostlists) or sweep.partition")
    if nodes and (searched := [c.config_id for c in configurations.values() if c.is_max]):
        problems.append(
            f"matrix.batch_size: max in a sweep ({searched[0]}{' and more' if len(searched) > 1 else ''}): a sweep "
            "compares nodes at one batch size; give the size (a search on one node finds it: batch_size max)"
        )
    if not nodes:
        problems += [
            f"expectations[{i}].of_fleet: the study has no sweep (sweep:), so there is no fleet to compare with"
            for i, entry in enumerate(config["expectations"])
            if "of_fleet" in entry
        ]
    return problems


def _emulated_bf16_warnings(config: dict[str, Any], configurations: dict[str, Configuration]) -> list[str]:
    """AMP on this machine's CPU without native bf16: which runs it would emulate (or skip) and what that costs,
    said before any job; nothing where the runs use a GPU or this CPU multiplies bf16 itself."""
    device, policy = config["platform"]["device"], config["platform"]["emulated_bf16"]
    amp = [c for c in configurations.values() if c.precision == "amp"]
    if not amp or not sysinfo.emulates_bf16(device):
        return []
    runs, frameworks = sum(c.repeats for c in amp), ", ".join(sorted({c.framework for c in amp}))
    where = f"matrix.precision: amp: this machine's CPU ({sysinfo.cpu_model()}) has {sysinfo.EMULATED_BF16}"
    if policy == "skip":
        return [
            f"{where}; its {runs} AMP runs ({len(amp)} configurations: {frameworks}) are recorded unsupported without "
            "running where they run on it (platform.emulated_bf16: skip)"
        ]
    return [
        f"{where}: its {runs} AMP runs ({len(amp)} configurations: {frameworks}) run emulated where they run on it, "
        "7-17x slower than fp32 (PyTorch and TensorFlow on an AVX2 CPU), most of the study's time; "
        "platform.emulated_bf16: skip records them unsupported in seconds"
    ]


def load_study(config: dict[str, Any], schema_path: Path, envs_dir: Path, base_dir: Path = Path(".")) -> Study:
    """The validated, expanded study; relative dataset paths are checked from base_dir (the working directory)."""
    if not config:
        raise ConfigError("no configuration: pass --configfile or keep config.yaml at the top level")
    validated = validate(config, schema_path)
    warnings: list[str] = []
    problems = (
        _check_report_version(validated, base_dir)
        + _check_dataset_settings(validated)
        + _check_axis_limits(validated)
        + _check_includes(validated, warnings)
    )
    try:
        nodes = sweep.sweep_nodes(validated["sweep"])
        configurations = expand(validated, envs_dir, base_dir, warnings, nodes)
    except ConfigError as error:
        raise ConfigError("\n".join([*problems, str(error)])) from None
    problems += _check_sweep(validated, configurations, nodes)
    problems += _check_datasets(validated, configurations, base_dir) + _check_batch_search(validated, configurations)
    problems += imports.check_entries(validated["imports"], base_dir) + _check_comparisons(validated, base_dir)
    if problems:
        raise ConfigError("\n".join(problems))
    problems += _check_expectations(validated, configurations, warnings, base_dir)
    if problems:
        raise ConfigError("\n".join(problems))
    warnings += _unused_framework_settings(validated, configurations)
    warnings += _emulated_bf16_warnings(validated, configurations)
    if validated["platform"].get("cpu_peak") == "measure" and validated["platform"]["device"] == "cuda":
        warnings.append(
            "platform.cpu_peak: measure: a CPU's peak, and the study's runs are on GPUs (device: cuda), whose peaks "
            "come from workflow/references/device_peaks.yaml; ignored"
        )
    return Study(validated["study"], validated, configurations, _unused_axes(config, validated) + warnings, nodes)
