"""A study's runs and batch-size searches as jobs (core environment, parse time and job planning).

Which configuration a job's ids name (a study's configuration, a search's, or one at the size its search found),
the harness command line of a run and of a search (the options of `harness_options`, spelled by
dlbench.harness.spec.command_line), the runs that follow the searches, the aggregate's list of what it reads,
and a run's GPUs per node under SLURM. workflow/rules/common.smk makes one `Plan` of the study and its input
functions map a job's wildcards to these methods' arguments.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..harness.peak import LIBRARIES as PEAK_LIBRARIES
from ..harness.spec import command_line
from ..vocabulary import identity
from ..vocabulary.axes import DEFAULT_BUILD, of_kind
from ..vocabulary.identity import AGGREGATE_DIR, model_kind
from . import sweep
from .study import Configuration, Study, dataset_of


def found_size(search: str) -> int | None:
    """The batch size a finished search found, None when it found none (it says why: oom, error, ...)."""
    result = json.loads(Path(identity.search_path(search)).read_text())
    return result["batch_size"] if result["status"] == "ok" else None


def dataset_dir(c: Configuration) -> str | None:
    """Where the prepared data of a `data: real` configuration lives (workflow/rules/data.smk)."""
    name = dataset_of(c)
    return identity.dataset_dir(name, c.seq_length) if name else None


def dataset_ready(c: Configuration) -> list[str]:
    """A real-data run waits for its dataset to be prepared and verified."""
    directory = dataset_dir(c)
    return [f"{directory}/verified.txt"] if directory else []


class Plan:
    """The jobs of one study (its settings validated, defaults filled in)."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self.settings = study.config
        self.memory_limit_gb = self.settings["platform"].get("memory_limit_gb")
        self.telemetry = self.settings["telemetry"]
        self.runners = self.settings["runners"]

    def configuration(self, config_id: str) -> Configuration:
        """The configuration of a run (or of a batch-size search: its first configuration at batch_size max)."""
        study = self.study
        found = study.configurations.get(config_id) or study.searches().get(config_id)
        found = found or self.found_configuration(config_id)
        if found is None:
            raise ValueError(f"{config_id} is not a configuration of this study")
        return found

    def found_configuration(self, config_id: str) -> Configuration | None:
        """A configuration at the size its search found (bs96-...): the one at batch_size max, at that size."""
        try:
            at_max = self.study.configurations.get(identity.with_batch_size(config_id, identity.MAX))
        except identity.IdentityError:
            return None
        if at_max is None or not Path(identity.search_path(at_max.search_id)).exists():
            return None
        size = found_size(at_max.search_id)
        found = replace(at_max, batch_size=size) if size is not None else None
        return found if found is not None and found.config_id == config_id else None

    def search_results(self) -> list[str]:
        """Every batch-size search of the study (their results go into the report's data)."""
        return [identity.search_path(search) for search in self.study.searches()]

    def cpu_peaks(self) -> list[str]:
        """The CPU peaks the aggregate measures MFU against where the study asks the workflow to measure them
        (platform.cpu_peak: measure): one per framework of its runs that dlbench.harness.peak measures (a runner
        has no GEMM of its own), none where every run is on a GPU (device cuda)."""
        platform = self.settings["platform"]
        if platform.get("cpu_peak") != "measure" or platform["device"] == "cuda":
            return []
        return [identity.CPU_PEAK_PATTERN.format(framework=f) for f in self.study.frameworks() if f in PEAK_LIBRARIES]

    def aggregated_list(self, import_records: list[str]) -> str:
        """The aggregate's list of what it read, named by the hash of the files the study names before any search
        (run logs, MLPerf logs, searches, imports): another study's aggregate, or one of another set of runs, lacks
        this file, so the aggregate runs again, also where Snakemake's records (.snakemake/) are gone."""
        known = sorted(self.study.run_logs() + self.study.mlperf_logs() + self.search_results() + import_records)
        return f"{AGGREGATE_DIR}/inputs-{hashlib.sha256(chr(10).join(known).encode()).hexdigest()[:16]}.txt"

    def found_run_logs(self, wait_for_search: Callable[[str], object]) -> list[str]:
        """The runs of each batch_size max configuration at the size its search found, once the search is done
        (`wait_for_search(search_id)`: Snakemake's checkpoint, which stops here until then); the study's other
        runs are known from the start (Study.run_logs). A search that found none (oom, error) adds no run; its
        result is in the report."""
        logs = []
        for c in self.study.configurations.values():
            if c.is_max:
                wait_for_search(c.search_id)
                size = found_size(c.search_id)
                if size is not None:
                    logs += replace(c, batch_size=size).run_logs()
        listed = set(self.study.run_logs())  # a size the study lists too is one of its own runs already
        return [log for log in dict.fromkeys(logs) if log not in listed]

    def slurm_extra(self, config_id: str) -> str:
        """A timed run's extra sbatch options: its nodes to itself, no requeue behind Snakemake's back, and in a
        sweep the node (or group of nodes) it is pinned to."""
        node = self.configuration(config_id).node
        return "--exclusive --no-requeue" + (f" --nodelist={','.join(sweep.members(node))}" if node else "")

    def search_arguments(self, config_id: str, topology: str) -> str:
        """The search's command line: how to probe (the configuration without batch size and steps, on one node),
        its multiple and cap. A changed setting that affects memory changes it and reruns the search."""
        c = replace(self.configuration(config_id), topology=topology)
        search = {"search_id": c.config_id, "multiple": c.batch_size_multiple}
        if c.max_batch_size:
            search["max_batch_size"] = c.max_batch_size
        return shlex.join(command_line(search | self.harness_options(c)))

    def run_arguments(self, config_id: str, repeat: str) -> str:
        """The harness command line of a run; a changed setting changes it and reruns only this run."""
        c = self.configuration(config_id)
        if c.is_max:
            raise ValueError(f"{c.config_id}: batch_size max runs at the size its search finds (bs<N>), not as bsmax")
        return shlex.join(command_line(self.harness_options(c, repeat)))

    def harness_options(self, c: Configuration, repeat: str | None = None) -> dict[str, Any]:
        """The harness options of a configuration, in command-line order (spelled by spec.command_line): a run's,
        or with no repeat its batch-size search's, whose probes choose their own batch size and steps. An option
        whose setting is at its default (no strategy, no memory budget, no telemetry, no runner, throughput) is
        left out, so that a run's command line changes only when a setting of that run does."""
        run = repeat is not None
        options: dict[str, Any] = {"framework": c.framework, "model": c.model, "topology": c.topology}
        if run:
            options["batch_size"] = c.batch_size
        options |= {"precision": c.precision, "compiler": bool(c.compiler)}
        if isinstance(c.compiler, str):
            options["compiler_mode"] = c.compiler
        options["data"] = c.data
        # The model axes of the model's kind that the harness takes (dlbench.vocabulary.axes), in variant order.
        options |= {axis.name: getattr(c, axis.name) for axis in of_kind(model_kind(c.model)) if axis.option}
        if dataset_dir(c):
            options["data_dir"] = dataset_dir(c)
        # The strategy changes the memory a rank needs (FSDP shards the model): a search's probes run with it too.
        if c.strategy != "auto":
            options["strategy"] = c.strategy
        if c.build != DEFAULT_BUILD:  # recorded by the run; its software is in the rule's command (plan.software)
            options["build"] = c.build
        if run:
            options["warmup_steps"] = c.warmup_steps
            if c.warmup_steps == "auto":  # the bound matters only to auto warm-up
                options["max_warmup_steps"] = c.max_warmup_steps
            options |= {"measured_steps": c.measured_steps, "repeat": repeat, "config_id": c.config_id}
        options |= {"device": self.settings["platform"]["device"], "timeout_s": float(c.timeout_minutes * 60)}
        if c.precision == "amp" and self.settings["platform"]["emulated_bf16"] == "skip":
            options["emulated_bf16"] = "skip"  # only AMP runs carry it: changing it reruns exactly them
        if self.memory_limit_gb:  # the CPU memory budget of every rank (platform.memory_limit_gb)
            options["memory_limit_gb"] = float(self.memory_limit_gb)
        if run and self.telemetry["enabled"]:
            options["telemetry_ms"] = self.telemetry["interval_ms"]
        if c.framework in self.runners:  # a runner's definition, for the harness to run instead of a framework's ranks
            options["runner"] = json.dumps(self.runners[c.framework], sort_keys=True)
        if repeat is not None and c.quality:
            # time to quality: each run its own fixed seed (MLPerf's runs differ in seed; the olympic mean needs spread)
            options |= {"quality": c.quality, "seed": int(repeat) - 1}
        return options

    def gpu_gres(self, c: Configuration) -> str:
        """GPUs per node for a CUDA run's SLURM job: one per device (gres is per node)."""
        if self.settings["platform"]["device"] != "cuda":
            return ""
        model = self.settings["platform"].get("gpu_model")
        return f"gpu:{model}:{c.devices_per_node}" if model else f"gpu:{c.devices_per_node}"
