# The study and the values the rules read, made once while Snakemake parses the workflow (core environment). What the
# Snakemake that plans does itself is dlbench.plan.session's, each step called once below, in order; what the jobs
# run comes from dlbench.plan.plan (runs, searches), dlbench.plan.data_plan (prepared data) and
# dlbench.plan.software (which Python). The input functions here only map a job's wildcards to those.
import functools
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

# The dlbench package lives in workflow/; shell jobs get it through PYTHONPATH=PACKAGE_DIR,
# scripts (workflow/scripts/) find it next to themselves.
PACKAGE_DIR = str(Path(workflow.basedir, "workflow"))
sys.path.insert(0, PACKAGE_DIR)

from dlbench.plan import plan, retries, session  # noqa: E402
from dlbench.vocabulary import identity  # noqa: E402
from dlbench.vocabulary.axes import DEFAULT_BUILD  # noqa: E402
from dlbench.vocabulary.identity import MLPERF_LOG_PATTERN, RUN_LOG_PATTERN, SEARCH_PATTERN, config_id_of  # noqa: E402
from dlbench.vocabulary.identity import BERT_DIR_PATTERN, BERT_TEXT_PATTERN, IMAGENET_DIR, LLAMA_DIR  # noqa: E402
from dlbench.vocabulary.identity import AGGREGATE_DIR, AGGREGATE_RECORDS, CPU_PEAK_PATTERN  # noqa: E402
from dlbench.vocabulary.identity import AGGREGATE_SUMMARY, AGGREGATE_ENVIRONMENT, SWEEP_NODES  # noqa: E402
from dlbench.vocabulary.identity import EXPECTATIONS_PASSED, PUBLISHED_MANIFEST, REPORTS_DIR  # noqa: E402
from dlbench.vocabulary.identity import WILDCARDS as RUN_WILDCARDS  # noqa: E402
from dlbench.plan.data_plan import BERT_SAMPLE_VOCAB, BERT_SAMPLE_WIKI, DataPlan  # noqa: E402
from dlbench.imports import expand_paths  # noqa: E402
from dlbench.plan.software import ShellWord, Software  # noqa: E402
from dlbench.plan.study import settings_leaves  # noqa: E402
from dlbench.venvs import MARKER  # noqa: E402

ENVS_DIR = Path(workflow.basedir, "envs")
# The Snakemake that plans the jobs, not a job's own (a local job's, a SLURM job's).
PLANS = not workflow.remote_exec and not workflow.subprocess_exec
session.mark_owner()
if PLANS:
    ALIVE_FD = session.claim_directory(Path(".snakemake"))
if workflow.config_settings.configfiles:
    session.replace_config(config, workflow.config_settings.overwrite_config)
STUDY_PATHS = workflow.config_settings.configfiles or [DEFAULT_CONFIGFILE]
STUDY, STUDY_FILES = session.read_study(
    config, STUDY_PATHS, Path(PACKAGE_DIR, "schemas", "config.schema.yaml"), ENVS_DIR, Path.cwd()
)
if PLANS:
    session.announce_size(STUDY)
if PLANS and workflow.output_settings.dryrun:  # no onstart in a dry run, whose executor is not known here
    session.warn_spanning_without_slurm(STUDY, local_exec=True)
# A sweep (sweep:): its nodes' states, read by the Snakemake that plans (jobs do not plan: their study has every node)
SWEEP_STATES = session.read_sweep_states(STUDY, workflow.output_settings.dryrun) if PLANS else None
SETTINGS = STUDY.config
# With --sdm conda, Snakemake activates envs/<framework>.yaml; otherwise the workflow builds it (uv).
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
USE_APPTAINER = DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method
# software.python probed (framework -> dlbench.plan.interpreters.Interpreter), device cuda that sees no GPU (onstart)
INTERPRETERS, NO_GPU_SEEN = session.check_software(
    STUDY,
    STUDY_FILES,
    PACKAGE_DIR,
    USE_APPTAINER,
    workflow.remote_exec,
    workflow.subprocess_exec,
    workflow.deployment_settings.apptainer_args or "",
)
CORE_PYTHON = sys.executable
session.export_core_python(CORE_PYTHON)
# `threads:` of the rules that take the whole machine. Snakemake's maintenance commands (--unlock,
# --cleanup-metadata, --list-*, --report) run no job and need no --cores; workflow.cores raises then.
try:
    ALL_CORES = workflow.cores
    MAINTENANCE_ONLY = False
except WorkflowError:
    ALL_CORES = 1
    MAINTENANCE_ONLY = True
if PLANS and not MAINTENANCE_ONLY:
    session.set_aside_damaged_run_logs(
        identity.RUNS_DIR, [AGGREGATE_RECORDS, PUBLISHED_MANIFEST], workflow.output_settings.dryrun
    )
    session.keep_finished_runs(".snakemake", workflow.output_settings.dryrun)
    if not workflow.output_settings.dryrun:
        session.mend_latest_info(REPORTS_DIR)
# A timed run's SLURM time limit: its own timeout plus this, so the harness's limit strikes first.
RUNTIME_MARGIN_MINUTES = 5
SEARCH_PROBES = 12  # a search's SLURM time limit: this many probes, each within the configuration's timeout

# ---- what the rules read
VENV_DIR = Path(SETTINGS["software"]["venv_dir"])
CONTAINERS = SETTINGS["software"]["container"]
BUILDS = SETTINGS["software"]["builds"]
# Which Python each command runs dlbench with, and which environment a job waits for.
SOFTWARE = Software(
    package_dir=PACKAGE_DIR,
    envs_dir=ENVS_DIR,
    venv_dir=VENV_DIR,
    core_python=CORE_PYTHON,
    use_conda=USE_CONDA,
    site_python=SETTINGS["software"]["python"],
    containers=CONTAINERS,
    runners=SETTINGS["runners"],
    interpreters=INTERPRETERS,
    builds=BUILDS,
)
env_spec = SOFTWARE.env_spec
run_module = SOFTWARE.run_module  # shell words that run a dlbench module in an environment
STUDY_ENV_MARKERS = SOFTWARE.study_env_markers(STUDY.frameworks())  # their package lists go into the report
if PLANS and not USE_CONDA:
    session.refuse_building_without_uv(STUDY_ENV_MARKERS)
PLAN = plan.Plan(STUDY)  # the runs and batch-size searches
gpu_gres = PLAN.gpu_gres
SEARCH_RESULTS = PLAN.search_results()
IMPORTS = {entry["name"]: entry for entry in SETTINGS["imports"]}
IMPORT_RECORDS = [f"results/imports/{name}.jsonl" for name in IMPORTS]
CPU_PEAKS = PLAN.cpu_peaks()  # measured CPU peaks for MFU (platform.cpu_peak: measure), rule cpu_peak
AGGREGATED_LIST = PLAN.aggregated_list(IMPORT_RECORDS)  # what the aggregate read, named for this study
DATA = DataPlan(SETTINGS["datasets"])  # data preparation's inputs and arguments


# ---- input functions: a job's wildcards to its values
def build_of(wildcards):
    """The software build of a run's or a search's configuration (its variant names it away from default); a job
    of no configuration (a CPU peak's) runs the default build."""
    variant = wildcards.get("variant")
    return DEFAULT_BUILD if variant is None else variant_build(wildcards.model, variant)


@functools.cache
def variant_build(model, variant):
    """Read once per variant: a job's input functions each ask, for every repeat of a configuration."""
    return identity.parse_variant(model, variant)["build"]


# A run's environment, interpreter and command words depend on its framework and build alone: each is computed
# once per (framework, build), not once per job (a sweep of a thousand nodes asks them for every one of its runs).
def run_env_input(wildcards):
    return _run_env_input(wildcards.framework, build_of(wildcards))


@functools.cache
def _run_env_input(framework, build):
    return SOFTWARE.run_env_input(framework, build)


def run_conda_env(wildcards):
    return _run_conda_env(wildcards.framework, build_of(wildcards))


@functools.cache
def _run_conda_env(framework, build):
    return SOFTWARE.run_conda_env(framework, build)


def run_container(wildcards):
    """With --sdm apptainer: the image of the framework's build (software.container, or a build's); none: the run
    is not in a container."""
    return SOFTWARE.container(wildcards.framework, build_of(wildcards))


def run_words(module):
    """The input function of a run's (or a search's, a CPU peak's) command: a dlbench module in the configuration's
    build."""
    return lambda wildcards: _run_module(wildcards.framework, module, build_of(wildcards))


@functools.cache
def _run_module(framework, module, build):
    return run_module(framework, module, build)


# The runs' image only where the study names one: Snakemake asks a callable for every job (and again each time it
# answered none), a second or more in a study of thousands of runs; a rule without one asks nothing. (The conda
# environment stays a callable: `snakemake --lint` wants every rule to name one.)
RUN_CONTAINER = run_container if SOFTWARE.uses_images() else None


def dataprep_env(wildcards):
    return [] if USE_CONDA else SOFTWARE.env_marker("dataprep")


def output_dir(wildcards, output):
    """The directory of a rule's first output (a tool's --out), taken from {output} rather than rebuilt."""
    return str(Path(output[0]).parent)


def import_files(wildcards):
    """The files of one import entry: a changed or added log re-parses that entry."""
    return [str(path) for path in expand_paths(IMPORTS[wildcards.name]["paths"])]


def configuration(wildcards):
    return PLAN.configuration(config_id_of(wildcards))


def dataset_ready(wildcards):
    return plan.dataset_ready(configuration(wildcards))


def search_arguments(wildcards):
    return PLAN.search_arguments(config_id_of(wildcards), wildcards.topology)


def slurm_extra(wildcards) -> str:
    """A timed run's extra sbatch options: exclusive nodes, no requeue, and a sweep's node (dlbench.plan.plan)."""
    return PLAN.slurm_extra(identity.config_id_of(wildcards))


def run_arguments(wildcards):
    return PLAN.run_arguments(config_id_of(wildcards), wildcards.repeat)


def found_run_logs(wildcards):
    return PLAN.found_run_logs(wait_for_search)


def wait_for_search(search_id):
    """Snakemake's checkpoint of a batch-size search: stops the input function until the search is done."""
    model, framework, topology, variant = search_id.split("/")
    checkpoints.batch_search.get(model=model, framework=framework, topology=topology, variant=variant)


def max_attempts(wildcards):
    """Tries Snakemake makes of a failing run (--retries, e.g. in profiles/slurm); the harness
    writes the failure record on the last one."""
    settings = workflow.execution_settings  # None while parsing and in dry runs
    return retries.max_attempts(workflow.remote_exec, settings.retries if settings else None)


# ---- onstart, onsuccess, onerror (Snakefile)
def refuse_cuda_without_a_gpu():
    session.refuse_cuda_without_a_gpu(NO_GPU_SEEN, workflow.local_exec)


# Which executor runs the jobs is known only once Snakemake starts them (onstart), not while it parses.
def refuse_what_needs_slurm():
    session.refuse_sweep_without_slurm(STUDY, workflow.local_exec)
    session.warn_spanning_without_slurm(STUDY, workflow.local_exec)


def refuse_to_republish_a_fixed_version():
    session.refuse_to_republish(SETTINGS["report"]["version"], REPORTS_DIR, rules_to_run)


def rules_to_run():
    """The rules of the jobs this Snakemake runs; None in another Snakemake's DAG."""
    try:
        return {job.rule.name for job in workflow.dag.needrun_jobs()}
    except AttributeError:
        return None


def print_problems():
    session.print_problems(AGGREGATE_RECORDS, (f"results/imports/{name}.notes" for name in IMPORTS))


def print_report_location():
    session.print_report_location(PUBLISHED_MANIFEST)
