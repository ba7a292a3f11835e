"""Run identity: the one place that makes and parses variants, config ids, run ids and run-log paths.

Standard library only: the study (core environment), the Snakemake rules, the harness (framework
environments), the log parsers and the test fixtures all call it, so the five of them cannot disagree.

    config id    <model>/<framework>/<topology>/<variant>           resnet50/pytorch/1x2/bs64-amp-nocompile-synthetic
    variant      bs<B|max>-<precision>-<compiler>-<data>[-img<S>][-via_<strategy>]   (ResNet-50; img: not 224)
                 bs<B>-<precision>-<compiler>-<data>-seq<L>-<optimizer>-<clip|noclip>[-via_<strategy>]  (BERT)
                 bs<B>-<precision>-<compiler>-<data>-seq<L>-<ckpt|nockpt>[-via_<strategy>]  (Llama; ckpt:
                 activation checkpointing)
                 (-via_<strategy> only when the gradient-exchange strategy is not auto)
                 compiler: nocompile, compile (the default mode) or compile_<mode> (compiler_part())
                 either + -ttq<target %>_<hash>   with metric time_to_quality: the target and a hash of the
                 other quality settings (schedule, optimizer, evaluation; not the budget), quality_part()
    run id       <config id>/rep<N>
    run log      results/runs/<config id>/rep<N>.jsonl   (time to quality: also rep<N>.mlperf.log, MLPerf's format)
    search id    <model>/<framework>/1x<devices per node>/bsmax-<rest of the variant>    (batch_size: max)
    search       results/search/<search id>.json

A configuration with `batch_size: max` has the variant bsmax-...; its runs are those of the configuration at the
size its search found (bs96-...), and the search is shared by the topologies with the same devices per node.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from . import axes as registry

DEFAULT_STRATEGY = registry.DEFAULTS["strategy"]  # the strategy (harness/strategies.py) a run log before the axis had
RUNS_DIR = "results/runs"
BERT_MODELS = ("bert_base", "bert_tiny")  # dimensions: harness/bert.py
LLAMA_MODELS = ("llama_tiny", "llama3_1b", "llama3_8b")  # dimensions: harness/llama.py

MAX = "max"  # the batch size a search finds (harness/batchsearch.py)
SEARCH_DIR = "results/search"
SEARCH_PATTERN = SEARCH_DIR + "/{model}/{framework}/{topology}/{variant}.json"
# The Snakemake output pattern of a run and the shape of each part (benchmark.smk's wildcard_constraints).
RUN_LOG_PATTERN = RUNS_DIR + "/{model}/{framework}/{topology}/{variant}/rep{repeat}.jsonl"
# A time-to-quality run's MLPerf log, beside its run log (mlperf_writer.write_log).
MLPERF_LOG_PATTERN = RUNS_DIR + "/{model}/{framework}/{topology}/{variant}/rep{repeat}.mlperf.log"
# Prepared datasets (workflow/rules/data.smk; a real-data run reads its dataset's directory, --data-dir).
DATA_DIR = "results/data"
IMAGENET_DIR = DATA_DIR + "/imagenet"
BERT_DIR_PATTERN = DATA_DIR + "/bert/seq{seq}"  # BERT's shards, per sequence length
LLAMA_DIR = DATA_DIR + "/llama"  # Llama's packed token shards (any sequence length reads them)
BERT_TEXT_PATTERN = DATA_DIR + "/bert/text/{name}.txt"  # a Wikipedia dump's text, BERT's input
# The aggregate: every record (one per run log and import), the summary per configuration, the environment.
AGGREGATE_DIR = "results/aggregate"
SWEEP_NODES = "results/sweep/nodes.json"  # a sweep's nodes and their SLURM states at planning (plan/sweep.py)
# A CPU peak measured for MFU (platform.cpu_peak: measure), one per framework library (dlbench.harness.peak)
CPU_PEAK_PATTERN = "results/machine/cpu_peak/{framework}.json"
AGGREGATE_RECORDS = AGGREGATE_DIR + "/records.csv"
AGGREGATE_SUMMARY = AGGREGATE_DIR + "/summary.csv"
AGGREGATE_ENVIRONMENT = AGGREGATE_DIR + "/environment.json"
# Published reports (dlbench.report.publish): one directory per version, never overwritten, and the manifest
# naming the version the current results are published as.
REPORTS_DIR = "results/reports"
PUBLISHED_MANIFEST = "results/report/published.json"
EXPECTATIONS_PASSED = "results/report/expectations.passed"  # rule expectations: written only when all passed
# What the publisher itself writes beside the versions in REPORTS_DIR: the newest version's link and its facts.
# No version takes these names (the config schema's report.version lists them again: tests/test_report.py).
LATEST_LINK, LATEST_INFO = "latest", "latest.json"
RESERVED_VERSIONS = (LATEST_LINK, LATEST_INFO)
WILDCARDS = {
    "model": "[a-z0-9_]+",
    "framework": "[a-z0-9_]+",
    "topology": "[0-9]+x[0-9]+",
    "variant": "[A-Za-z0-9_.+-]+",  # + joins a sweep group's nodes
    "repeat": "[0-9]+",
}


# Time to quality: the settings that are not part of a configuration's identity (how long a run may try).
QUALITY_BUDGET = ("max_steps", "max_minutes")
THROUGHPUT, TIME_TO_QUALITY = "throughput", "time_to_quality"  # the metric axis


class IdentityError(ValueError):
    """A path or id that is not in dlbench's run-identity format."""


def is_bert(model: str) -> bool:
    """BERT pretraining (sequences, the BERT axes) rather than ResNet-50 (images)."""
    return model in BERT_MODELS


def is_llama(model: str) -> bool:
    """Llama decoder pretraining (tokens, seq_length and activation checkpointing)."""
    return model in LLAMA_MODELS


def model_kind(model: str) -> str:
    """resnet, bert or llama: which setup_<kind> / <kind>_step a backend runs (backends/base.py)."""
    return "bert" if is_bert(model) else "llama" if is_llama(model) else "resnet"


# What a model's throughput counts, per kind: Llama's samples are tokens (rank.py multiplies by seq_length).
THROUGHPUT_UNITS = {"resnet": "images/s", "bert": "sequences/s", "llama": "tokens/s"}


def throughput_unit(model: str) -> str:
    return THROUGHPUT_UNITS[model_kind(model)]


def takes_sequences(model: str) -> bool:
    """The model reads sequences (the seq_length axis applies), not images (image_size)."""
    return is_bert(model) or is_llama(model)


# torch.compile's modes as values of the compiler axis (besides off = False and on = True, the default mode).
COMPILER_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compiler_part(compiler: bool | str) -> str:
    """The variant's compiler part: nocompile, compile (the default mode) or compile_<mode> ('-' as '_')."""
    if isinstance(compiler, str):
        return f"compile_{compiler.replace('-', '_')}"
    return "compile" if compiler else "nocompile"


def parse_compiler_part(part: str) -> bool | str | None:
    """The compiler axis value of a variant part (None: not a compiler part)."""
    if part in ("compile", "nocompile"):
        return part == "compile"
    mode = part.removeprefix("compile_").replace("_", "-")
    return mode if part.startswith("compile_") and mode in COMPILER_MODES else None


def variant(axes: Mapping[str, Any]) -> str:
    """The variant of a configuration from its axes: batch size, precision, compiler and data, then each axis of
    dlbench.vocabulary.axes that spells a part and applies to the model's kind (image_size and strategy only when not at
    their defaults), then the time-to-quality part."""
    parts = [f"bs{axes['batch_size']}", axes["precision"], compiler_part(axes["compiler"]), axes["data"]]
    kind = model_kind(axes["model"])
    for axis in registry.SPELLED:
        part = axis.part(axes) if axis.applies_to(kind) else None
        if part is not None:
            parts.append(part)
    if axes.get("metric", THROUGHPUT) == TIME_TO_QUALITY:
        parts.append(quality_part(axes["quality"]))
    return "-".join(parts)


def quality_part(quality: Mapping[str, Any] | str) -> str:
    """ttq<target in %>_<first 6 hex digits of the sha256 of the other settings but the budget, as sorted JSON>."""
    settings = json.loads(quality) if isinstance(quality, str) else dict(quality)
    kept = {k: v for k, v in settings.items() if k not in QUALITY_BUDGET and k != "target"}
    digest = hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:6]
    return f"ttq{round(float(settings['target']) * 100, 2):g}_{digest}"


def config_id(axes: Mapping[str, Any]) -> str:
    """model/framework/topology/variant."""
    return f"{axes['model']}/{axes['framework']}/{axes['topology']}/{variant(axes)}"


def run_id(config: str, repeat: int) -> str:
    return f"{config}/rep{repeat}"


def run_log(config: str, repeat: int, runs_dir: str = RUNS_DIR) -> str:
    return f"{runs_dir}/{config}/rep{repeat}.jsonl"


def mlperf_log(config: str, repeat: int, runs_dir: str = RUNS_DIR) -> str:
    return f"{runs_dir}/{config}/rep{repeat}.mlperf.log"


def dataset_dir(dataset: str, seq_length: int | None) -> str:
    """The directory of a prepared dataset: ImageNet's, Llama's token shards, or BERT's at a sequence length (a
    BERT configuration always has one)."""
    if dataset == "llama":
        return LLAMA_DIR
    return IMAGENET_DIR if dataset == "imagenet" else BERT_DIR_PATTERN.format(seq=seq_length)


def config_id_of(wildcards: Any) -> str:
    """The config id from the run rule's wildcards (or any object with those attributes)."""
    return f"{wildcards.model}/{wildcards.framework}/{wildcards.topology}/{wildcards.variant}"


def with_batch_size(config: str, batch_size: int | str) -> str:
    """The same configuration at another batch size (or max)."""
    parts = config.split("/")
    head, sep, rest = parts[-1].partition("-")
    if len(parts) != 4 or not (sep and re.fullmatch(r"bs([0-9]+|max)", head)):
        raise IdentityError(f"config id {config!r} is not <model>/<framework>/<topology>/bs<B>-...")
    return "/".join([*parts[:3], f"bs{batch_size}-{rest}"])


def with_build(config: str, build: str) -> str:
    """The same configuration in another software build (registry.DEFAULT_BUILD: the part left out)."""
    parts = config.split("/")
    if len(parts) != 4:
        raise IdentityError(f"config id {config!r} is not <model>/<framework>/<topology>/<variant>")
    variant_parts = [p for p in parts[3].split("-") if registry.BY_NAME["build"].read(p) is registry.NOT_THIS]  # type: ignore[misc]
    if build != registry.DEFAULT_BUILD:
        at = next((i for i, p in enumerate(variant_parts) if re.fullmatch(r"ttq[0-9.]+_[0-9a-f]{6}", p)), None)
        variant_parts.insert(len(variant_parts) if at is None else at, registry.BY_NAME["build"].spell(build))  # type: ignore[misc]
    return "/".join([*parts[:3], "-".join(variant_parts)])


def with_node(config: str, node: str | None) -> str:
    """The same configuration on another node of a sweep (None: the node part left out, the fleet's key)."""
    parts = config.split("/")
    if len(parts) != 4:
        raise IdentityError(f"config id {config!r} is not <model>/<framework>/<topology>/<variant>")
    axis = registry.BY_NAME["node"]
    variant_parts = [p for p in parts[3].split("-") if axis.read(p) is registry.NOT_THIS]  # type: ignore[misc]
    if node is not None:
        at = next((i for i, p in enumerate(variant_parts) if re.fullmatch(r"ttq[0-9.]+_[0-9a-f]{6}", p)), None)
        variant_parts.insert(len(variant_parts) if at is None else at, axis.spell(node))  # type: ignore[misc]
    return "/".join([*parts[:3], "-".join(variant_parts)])


def search_id(config: str) -> str:
    """The batch-size search a configuration's size is found by (or would be, at batch_size max): the same
    configuration at bsmax, on one node with its devices per node."""
    model, framework, topology, variant_text = with_batch_size(config, MAX).split("/")
    _, per_node = parse_topology(topology)
    return f"{model}/{framework}/1x{per_node}/{variant_text}"


def search_path(search: str) -> str:
    return f"{SEARCH_DIR}/{search}.json"


def parse_topology(topology: str) -> tuple[int, int]:
    """'2x8' -> (2 nodes, 8 devices per node)."""
    nodes, sep, per_node = topology.partition("x")
    if not (sep and nodes.isdigit() and per_node.isdigit() and int(nodes) > 0 and int(per_node) > 0):
        raise IdentityError(f"topology {topology!r} is not <nodes>x<devices per node>, e.g. 1x8")
    return int(nodes), int(per_node)


def parse_variant(model: str, text: str) -> dict[str, Any]:
    """The axes a variant encodes (the inverse of `variant`)."""
    parts = text.split("-")
    if len(parts) < 4 or not re.fullmatch(r"bs([0-9]+|max)", parts[0]) or parse_compiler_part(parts[2]) is None:
        raise IdentityError(
            f"variant {text!r} is not bs<B|max>-<precision>-<compile|nocompile|compile_<mode>>-<data>[-...]"
        )
    bs, precision, compiler, data, *rest = parts
    axes: dict[str, Any] = {
        "batch_size": MAX if bs == f"bs{MAX}" else int(bs[2:]),
        "precision": precision,
        "compiler": parse_compiler_part(compiler),
        "data": data,
    }
    # Axes that do not apply to the model are None (as in the study's configurations); those a variant names only
    # away from their defaults start at their defaults.
    kind = model_kind(model)
    axes |= {a.name: a.default if a.omit_default and a.applies_to(kind) else None for a in registry.SPELLED}
    axes["metric"] = THROUGHPUT
    for part in rest:
        if re.fullmatch(r"ttq[0-9.]+_[0-9a-f]{6}", part):
            axes["metric"], axes["quality_id"] = TIME_TO_QUALITY, part
            continue
        for axis in registry.READ_ORDER:
            assert axis.read is not None
            value = axis.read(part)
            if value is not registry.NOT_THIS:
                axes[axis.name] = value
                break
    return axes


def parse_config_id(text: str) -> dict[str, Any]:
    """model, framework, topology, nodes, devices_per_node, config_id and the variant's axes."""
    parts = text.split("/")
    if len(parts) != 4:
        raise IdentityError(f"config id {text!r} is not <model>/<framework>/<topology>/<variant>")
    model, framework, topology, variant_text = parts
    nodes, per_node = parse_topology(topology)
    return {
        "model": model,
        "framework": framework,
        "topology": topology,
        "nodes": nodes,
        "devices_per_node": per_node,
        "config_id": text,
        **parse_variant(model, variant_text),
    }


def parse_run_log(path: str | PurePath) -> dict[str, Any]:
    """What a run log's path says (…/<model>/<framework>/<topology>/<variant>/rep<N>.jsonl): the
    configuration's axes, repeat and run id. Used when the log itself cannot be read."""
    parts = PurePath(path).parts[-5:]
    match = re.fullmatch(r"rep([0-9]+)(\..*)?", parts[-1]) if len(parts) == 5 else None
    if not match:
        raise IdentityError(f"{path}: not a run log path (<model>/<framework>/<topology>/<variant>/rep<N>.jsonl)")
    axes = parse_config_id("/".join(parts[:4]))
    repeat = int(match.group(1))
    return {**axes, "repeat": repeat, "run_id": run_id(axes["config_id"], repeat)}


AXIS_DEFAULTS = {**registry.DEFAULTS, "repeat": 1}
REQUIRED_LABELS = ("framework", "model", "topology", "batch_size")


def from_labels(labels: Mapping[str, Any]) -> dict[str, Any]:
    """A run's identity from labels (an import's, or what a log of another tool says): the axes with their
    defaults, nodes and devices per node, config id and run id. Needs framework, model, topology, batch_size."""
    missing = [key for key in REQUIRED_LABELS if labels.get(key) in (None, "")]
    if missing:
        raise IdentityError(f"cannot place the run: no {', '.join(missing)} (give them as labels)")
    axes = {**AXIS_DEFAULTS, **{k: v for k, v in labels.items() if v is not None}}
    axes["batch_size"] = int(axes["batch_size"])
    axes["nodes"], axes["devices_per_node"] = parse_topology(str(axes["topology"]))
    kind = model_kind(axes["model"])
    for axis in registry.MODEL_AXES:
        if not axis.applies_to(kind):
            axes[axis.name] = None
        elif axis.matrix and axis.record is not None:
            axes[axis.name] = axis.record(axes.get(axis.name), axes)
    axes["config_id"] = config_id(axes)
    axes["run_id"] = run_id(axes["config_id"], int(axes["repeat"]))
    return axes
