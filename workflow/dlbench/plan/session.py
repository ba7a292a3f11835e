"""What the Snakemake that plans a study does itself, outside any job (core environment).

While Snakemake parses the workflow, workflow/rules/configfile.smk and common.smk call these once each, in this
order: config.yaml read by dlbench (`check_default_configfile`), the jobs tied to this process (`mark_owner`), a
stale lock removed or a live one's owner named (`claim_directory`), a `--configfile` as the whole study
(`replace_config`), the study read with its problems and warnings placed at their lines (`read_study`), a large
study's size said (`announce_size`), the
software it brings checked (`check_software`: images, interpreters probed, device cuda on a machine without a
GPU), the core Python handed to the telemetry sampler (`export_core_python`) and damaged run logs set aside
(`set_aside_damaged_run_logs`). Before any job (the Snakefile's onstart): `refuse_cuda_without_a_gpu`,
`refuse_to_republish`. At its end (onsuccess, onerror): `print_problems`, `print_report_location`.

Each takes plain values (the config, paths, booleans such as whether this is a job's own Snakemake), so that it
runs and is tested without Snakemake. A user's mistake ends the process with `dlbench: invalid configuration:`
and one line per problem (SystemExit: no traceback); what is only worth knowing goes to stderr as a
`dlbench: ...` line.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .. import venvs
from ..harness.lifeline import OWNER_ENV
from ..harness.spec import TELEMETRY_PYTHON_ENV
from ..report import publish
from . import interpreters, problems, stale_lock, sweep
from .configfile import StudyFile, StudyFileError, load_study_files, locate
from .interpreters import Interpreter
from .software import build_key
from .study import ConfigError, Study


# ---- while parsing
def check_default_configfile(path: str) -> None:
    """Before Snakemake's `configfile:` loads config.yaml: a YAML mistake there is reported with its file, line
    and column (dlbench.plan.configfile), not as "Config file is not valid JSON or YAML"."""
    if Path(path).exists():
        try:
            StudyFile(path)
        except StudyFileError as error:
            sys.exit(f"dlbench: invalid configuration:\n  {error}")


def mark_owner() -> None:
    """The harness of a run dies with this Snakemake process, even when it is SIGKILLed (its shell would not):
    dlbench.harness.lifeline watches the process named here. Jobs inherit the environment."""
    os.environ[OWNER_ENV] = str(os.getpid())


def claim_directory(metadata_dir: Path) -> int | None:
    """A lock left by a killed Snakemake is removed, so resuming is one plain command (dlbench.plan.stale_lock); a live
    one's owner is named. Returns the descriptor that marks this Snakemake alive (kept open until it exits)."""
    alive_fd, stale_lock_removed = stale_lock.hold(metadata_dir)
    if stale_lock_removed:
        print("dlbench: removed the lock of a Snakemake that no longer runs (.snakemake/locks)", file=sys.stderr)
    elif any(Path(metadata_dir, "locks").glob("*.lock")) and (live := stale_lock.holders(metadata_dir)):
        # Snakemake's own advice for a locked directory is `--unlock`: wrong while the lock's owner runs.
        print(
            f"dlbench: a Snakemake is running in this directory and holds its lock (.snakemake/locks): "
            f'{"; ".join(live)}. Where this one stops with "Directory cannot be locked", do not run '
            "`snakemake --unlock` (two Snakemakes would write the same files): wait for that one to end, or "
            "stop it, then run this command again",
            file=sys.stderr,
        )
    return alive_fd


def replace_config(config: dict[str, Any], overwrite_config: dict[str, Any]) -> None:
    """A --configfile is a whole study: it replaces config.yaml rather than being merged into it (merged, a study
    would silently inherit the default's axes, e.g. its precisions). `config` is Snakemake's, changed in place."""
    config.clear()
    config.update(overwrite_config)


def read_study(
    config: dict[str, Any], paths: list[str], schema_path: Path, envs_dir: Path, base_dir: Path
) -> tuple[Study, list[StudyFile]]:
    """The study's files read again by dlbench: a key given twice is an error, every problem names its line; a
    user error says what and where, no traceback, before any job is built. Its warnings are printed. Returns the
    study and its files (to place later problems)."""
    try:
        study = load_study_files(config, paths, schema_path, envs_dir, base_dir)
    except (ConfigError, StudyFileError) as error:
        lines = str(error).replace("\n", "\n  ")
        sys.exit(f"dlbench: invalid configuration:\n  {lines}")
    for warning in study.warnings:
        print(f"dlbench: warning: {warning}", file=sys.stderr)
    return study, [StudyFile(path) for path in paths if Path(path).exists()]


# Snakemake plans every job before the first one starts (or before a dry run prints): about this long per job,
# measured on a 2-core VM (benchmarks/workflow_overhead.py), so a study this large is told what it is waiting for.
PLANNING_S_PER_JOB = 0.004
LARGE_STUDY_RUNS = 1000


def announce_size(study: Study) -> None:
    """A large study says its size and the wait for Snakemake's plan before Snakemake starts building it."""
    runs = len(study.run_logs())
    if runs < LARGE_STUDY_RUNS:
        return
    searches = len(study.searches())
    more = f" and {searches} batch-size searches" if searches else ""
    print(
        f"dlbench: study {study.name}: {runs} runs in {len(study.configurations)} configurations{more}; Snakemake "
        f"plans them all before the first job starts (or a dry run prints), about {PLANNING_S_PER_JOB * runs:.0f} s "
        f"at ~{PLANNING_S_PER_JOB * 1000:.0f} ms per job (to try a part first, narrow the matrix or exclude some)",
        file=sys.stderr,
    )


def build_interpreters(study: Study) -> dict[str, tuple[str, str]]:
    """The interpreters of the builds the study runs (software.builds.<build>.<framework>.python), keyed as the
    probed interpreters are (dlbench.plan.software.build_key): (framework, python)."""
    builds = study.config["software"]["builds"]
    run = {(c.framework, c.build) for c in study.configurations.values()}
    return {
        build_key(framework, build): (framework, builds[build][framework]["python"])
        for framework, build in sorted(run)
        if "python" in builds.get(build, {}).get(framework, {})
    }


def check_software(
    study: Study,
    study_files: list[StudyFile],
    package_dir: str,
    use_apptainer: bool,
    remote_exec: bool,
    subprocess_exec: bool,
    apptainer_args: str = "",
) -> tuple[dict[str, Interpreter], list[str]]:
    """The interpreters and images the study brings (software.python, software.container), checked by the
    Snakemake that plans (not a job's own): an image needs --sdm apptainer; each interpreter is probed
    (dlbench.plan.interpreters) and said; with device cuda, an interpreter, or this machine for the frameworks built
    here, that sees no GPU is a warning now and refused at onstart when the runs are local
    (`refuse_cuda_without_a_gpu`). Returns the interpreters by framework and those problems."""
    settings = study.config
    site_python = settings["software"]["python"]
    containers = settings["software"]["container"]
    device = settings["platform"]["device"]
    found: dict[str, Interpreter] = {}  # probed once by the Snakemake that plans
    plans = not remote_exec and not subprocess_exec  # the Snakemake that plans, not a job's own
    build_images = [
        f"software.builds.{build}.{framework}.container"
        for build, per_framework in settings["software"]["builds"].items()
        for framework, entry in per_framework.items()
        if "container" in entry
    ]
    if (containers or build_images) and not use_apptainer and not remote_exec:
        names = ", ".join([*(f"software.container.{name}" for name in sorted(containers)), *build_images])
        sys.exit(
            f"dlbench: invalid configuration:\n  {names}: an image runs only with --sdm apptainer (Snakemake's "
            "own container support); without it these runs would use another build. Add --sdm apptainer, or "
            "remove the entry"
        )
    if containers and use_apptainer and plans:
        check_images(study, study_files, package_dir, apptainer_args)
    # device cuda, an interpreter that sees no GPU here: refused when the runs are local (onstart)
    no_gpu_seen: list[str] = []
    if site_python and plans:
        try:
            found, no_gpu_seen = interpreters.check(site_python, study.frameworks(), device, package_dir)
        except ConfigError as error:
            lines = "\n  ".join(locate(problem, study_files) for problem in str(error).splitlines())
            sys.exit(f"dlbench: invalid configuration:\n  {lines}")
        no_gpu_seen = [locate(problem, study_files) for problem in no_gpu_seen]
    # The builds' interpreters, probed as software.python's; their problems keyed by the build.
    for key, (framework, python) in build_interpreters(study).items() if plans else ():
        where = f"software.builds.{key.split('/')[1]}.{{framework}}.python"
        try:
            probed, unseen = interpreters.check({framework: python}, [framework], device, package_dir, where)
        except ConfigError as error:
            lines = "\n  ".join(locate(problem, study_files) for problem in str(error).splitlines())
            sys.exit(f"dlbench: invalid configuration:\n  {lines}")
        found[key] = probed[framework]
        no_gpu_seen += [locate(problem, study_files) for problem in unseen]
    if plans:
        for key, interpreter in found.items():
            print(f"dlbench: {key} runs with {interpreter.python} ({interpreter.identity})", file=sys.stderr)
    # Frameworks without a study interpreter (those were asked above): this machine is asked instead.
    built_for_cuda = [fw for fw in study.frameworks() if fw not in site_python]
    if device == "cuda" and built_for_cuda and plans:
        if absent := interpreters.no_gpu_here():
            no_gpu_seen.append(
                locate(
                    f"platform.device: cuda, but this machine has no GPU ({absent}): every run of "
                    f"{', '.join(built_for_cuda)} here would be unsupported",
                    study_files,
                )
            )
    if plans:
        no_gpu_seen += [locate(problem, study_files) for problem in compiler_problems(study, found, package_dir)]
    # Which executor runs the jobs is known only once they start (onstart): until then, say it.
    for problem in no_gpu_seen:
        print(
            f"dlbench: warning: {problem}; refused when the runs are on this machine, not when they go to "
            "other nodes (SLURM)",
            file=sys.stderr,
        )
    return found, no_gpu_seen


def refuse_building_without_uv(env_markers: list[str]) -> None:
    """The framework environments the study's runs use that are not built yet need uv: without it (a lean core
    environment on a node whose interpreters the study names) stop before any job, naming them."""
    unbuilt = [Path(marker).parent.name for marker in env_markers if not Path(marker).exists()]
    if unbuilt and not venvs.have_uv():
        sys.exit(f"dlbench: cannot build {', '.join(unbuilt)}: {venvs.NO_UV}")


def check_images(study: Study, study_files: list[StudyFile], package_dir: str, apptainer_args: str) -> None:
    """Each image file the study's frameworks run in (software.container, a local .sif) asked, through apptainer
    with the runs' arguments, whether its python runs dlbench's backend of the framework: a broken image is
    refused before any job instead of failing every run. An image named by a URI (docker://, ...) is pulled by
    Snakemake only after planning, and is not asked."""
    containers = study.config["software"]["container"]
    problems = []
    for framework in sorted(set(study.frameworks()) & set(containers)):
        image = containers[framework]
        if "://" in image:
            continue
        try:
            facts = interpreters.probe_image(framework, image, package_dir, apptainer_args)
        except ConfigError as error:
            problems.append(locate(str(error), study_files))
            continue
        identity = Interpreter(framework, image, facts).identity
        print(f"dlbench: {framework} runs in {image} ({identity})", file=sys.stderr)
    if problems:
        lines = "\n  ".join(problems)
        sys.exit(f"dlbench: invalid configuration:\n  {lines}")


def compiler_problems(study: Study, found: dict[str, Interpreter], package_dir: str) -> list[str]:
    """What the Python of the study's compiled PyTorch runs lacks for torch.compile (a C compiler, the Python
    headers), once, with the configurations it affects: the study's interpreter (software.python, probed), or the
    one the workflow builds its environment from (envs/pytorch.yaml's python). An image (software.container)
    and --sdm conda's environment are not asked here."""
    compiled = sorted(c.config_id for c in study.configurations.values() if c.framework == "pytorch" and c.compiler)
    settings = study.config["software"]
    if not compiled or "pytorch" in settings["container"] or "pytorch" in study.config["runners"]:
        return []
    python: str | None
    if "pytorch" in found:
        python, key = found["pytorch"].python, "software.python.pytorch"
    elif "pytorch" in settings["python"]:  # not probed (the runs go to other nodes): not asked either
        return []
    else:
        spec = Path(package_dir).parent / "envs" / "pytorch.yaml"
        python, key = venvs.base_python(spec, Path(settings["venv_dir"])), "matrix.compiler"
    if python is None:
        return []
    missing = interpreters.missing_toolchain(python)
    if not missing:
        return []
    shown = ", ".join(compiled[:3]) + (f" and {len(compiled) - 3} more" if len(compiled) > 3 else "")
    return [
        f"{key}: torch.compile of {python} needs a C compiler and the Python headers, and here it has "
        f"{' and '.join(missing)}: the {len(compiled)} pytorch configurations with compiler on would fail "
        f"({shown}); {interpreters.TOOLCHAIN_HELP}"
    ]


def export_core_python(python: str) -> None:
    """The telemetry sampler runs with the core python (psutil, nvidia-ml-py): jobs inherit it from the
    environment, so a moved core environment does not change any run's command line."""
    os.environ[TELEMETRY_PYTHON_ENV] = python


def set_aside_damaged_run_logs(runs_dir: str | Path, dependants: Iterable[str | Path], dryrun: bool) -> None:
    """A run log damaged after its run (not whole: dlbench.harness.runlog.incomplete) is set aside as <log>.damaged, so
    its run is redone (dlbench.plan.problems); a dry run only says which. Only for the Snakemake that runs jobs, not
    for a maintenance command (the caller knows)."""
    if dryrun:
        for path, why in problems.damaged_run_logs(runs_dir):
            print(f"dlbench: {path}: damaged ({why}): a run redoes it", file=sys.stderr)
    else:
        for line in problems.set_aside_damaged(runs_dir, dependants):
            print(f"dlbench: {line}", file=sys.stderr)


def keep_finished_runs(metadata_dir: str | Path, dryrun: bool) -> None:
    """A run whose log is whole is kept, even where Snakemake, stopped (Ctrl-C) before it recorded the run's end,
    still marks it incomplete: the mark is removed, so `rerun-incomplete` does not run it again; a dry run only
    says which."""
    for log, marker in problems.finished_but_marked(metadata_dir):
        if not dryrun:
            marker.unlink()
        then = "the next run keeps it (this dry run still lists it)" if dryrun else "kept, not run again"
        print(f"dlbench: {log}: finished before Snakemake was stopped (its log is whole): {then}", file=sys.stderr)


def warn_spanning_without_slurm(study: Study, local_exec: bool) -> None:
    """Runs of more than one node need a SLURM allocation: on this machine alone each is recorded unsupported,
    which is said before any job (under SLURM the allocation spans the nodes)."""
    spanning = [c for c in study.configurations.values() if c.nodes > 1]
    if not local_exec or not spanning:
        return
    runs, shown = sum(c.repeats for c in spanning), ", ".join(c.config_id for c in spanning[:2])
    more = f" and {len(spanning) - 2} more" if len(spanning) > 2 else ""
    print(
        f"dlbench: warning: {len(spanning)} configurations span more than one node ({shown}{more}): without SLURM "
        f"each of their {runs} runs is recorded unsupported; run the study with --profile slurm, or leave those "
        "topologies out",
        file=sys.stderr,
    )


def read_sweep_states(study: Study, dryrun: bool) -> str | None:
    """A sweep's nodes' SLURM states (sinfo), read by the Snakemake that plans: those that take no job now are set
    aside on the study (their runs are no jobs) and said. Returns the nodes and their states as JSON for rule
    sweep_nodes (None outside a sweep). Without SLURM's commands a dry run plans every node; a run is refused at
    onstart (refuse_sweep_without_slurm)."""
    if not study.sweep_nodes:
        return None
    partition = study.config["sweep"].get("partition")
    source = f"partition {partition} (sinfo)" if partition else "sweep.nodes"
    try:
        states = sweep.node_states(study.sweep_nodes)
    except ConfigError as error:
        if dryrun:
            print(f"dlbench: warning: {error}; a dry run plans every node", file=sys.stderr)
        study.unreadable = str(error)
        states = {}
    study.unavailable = {
        node: state["state"] + (f": {state['reason']}" if state["reason"] else "")
        for node, state in states.items()
        if state["available"] == "no"
    }
    down = ", ".join(f"{node} ({why})" for node, why in list(study.unavailable.items())[:5])
    more = f" and {len(study.unavailable) - 5} more" if len(study.unavailable) > 5 else ""
    print(
        f"dlbench: sweep: {len(study.sweep_nodes)} nodes from {source}"
        + (f"; taking no job now, recorded as such: {down}{more}" if study.unavailable else ""),
        file=sys.stderr,
    )
    unread = {"state": "not read", "reason": "", "available": "yes"}  # a dry run without sinfo
    nodes = [{"node": n, **states.get(n, unread)} for n in study.sweep_nodes]
    return json.dumps({"source": source, "nodes": nodes}, indent=1)


def refuse_sweep_without_slurm(study: Study, local_exec: bool) -> None:
    """A sweep pins each run to its node through SLURM: run on this machine alone, or where sinfo cannot say what
    the nodes are, it is refused before any job."""
    if not study.sweep_nodes:
        return
    if local_exec:
        sys.exit(
            f"dlbench: sweep: the study runs each configuration on {len(study.sweep_nodes)} named nodes, each run "
            "pinned to its node through SLURM (--nodelist), and this Snakemake runs its jobs on this machine: run "
            "it with --profile slurm (docs/nodes.md), or remove sweep: to measure this machine alone"
        )
    if study.unreadable:
        sys.exit(f"dlbench: {study.unreadable}")


def mend_latest_info(reports_dir: str | Path) -> None:
    """The published state's pointer (latest.json) is made again whenever the workflow runs jobs, not only when
    a new version is published (dlbench.report.publish)."""
    if said := publish.mend_latest_info(Path(reports_dir)):
        print(f"dlbench: {said}", file=sys.stderr)


# ---- before any job (onstart)
def refuse_cuda_without_a_gpu(no_gpu_seen: list[str], local_exec: bool) -> None:
    """Device cuda on a machine without a GPU, or with an interpreter that sees none here, is an error when the
    runs are on this machine; under SLURM the GPUs are on the nodes (the warning printed while planning stands)."""
    if no_gpu_seen and local_exec:
        lines = "\n  ".join(no_gpu_seen)
        sys.exit(f"dlbench: invalid configuration:\n  {lines}")


def refuse_to_republish(version: str, reports_dir: str, rules_to_run: Callable[[], set[str] | None]) -> None:
    """A fixed report.version this study has published may be run again when nothing changes, but not to publish
    new results (it is never overwritten): stop now rather than after every run. Validation (dlbench.plan.study)
    already refused a fixed version published by anything else. `rules_to_run`: the rules of the jobs this
    Snakemake will run, None where it cannot tell (then the report rule still refuses, after the runs)."""
    if version == "auto" or not Path(reports_dir, version).exists():
        return
    to_run = rules_to_run()
    if to_run is None:
        return
    if to_run & {"benchmark_run", "batch_search", "import_logs", "aggregate"}:
        sys.exit(
            f"dlbench: invalid configuration:\n  report.version: {version!r} is published already "
            f"({reports_dir}/{version}) and this run computes new results ({', '.join(sorted(to_run))}); "
            "a published report is never overwritten: choose a new name, or auto"
        )


# ---- at its end (onsuccess, onerror)
def print_problems(records_csv: str | Path, notes: Iterable[str | Path]) -> None:
    """One line per log or input that could not be read, and per file an import did not read as a run
    (dlbench.plan.problems), so a number the report lacks is never silently missing."""
    lines = problems.problem_lines(records_csv)
    note_lines = problems.note_lines(notes)
    if lines:
        print(
            f"dlbench: {len(lines)} runs or logs ended in an error (the report lists them):",
            file=sys.stderr,
        )
        for line in lines:
            print(f"  {line}", file=sys.stderr)
    for line in note_lines:
        print(f"dlbench: import note: {line}", file=sys.stderr)


def print_report_location(manifest_path: str | Path) -> None:
    if Path(manifest_path).exists():
        manifest = json.loads(Path(manifest_path).read_text())
        print(f"dlbench: report {manifest['version']}: {manifest['index']}")
