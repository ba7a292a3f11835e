# Study loading and the helpers the rules share. Runs at parse time, in the core environment; what the Snakemake that
# plans does itself is dlbench.session's, each step called once below, in order.
import hashlib
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

# The dlbench package lives in workflow/; shell jobs get it through PYTHONPATH=PACKAGE_DIR,
# scripts (workflow/scripts/) find it next to themselves.
PACKAGE_DIR = str(Path(workflow.basedir, "workflow"))
sys.path.insert(0, PACKAGE_DIR)

from dlbench import identity, retries, session  # noqa: E402
from dlbench.identity import MLPERF_LOG_PATTERN, RUN_LOG_PATTERN, SEARCH_PATTERN, config_id_of  # noqa: E402
from dlbench.identity import BERT_DIR_PATTERN, BERT_TEXT_PATTERN, IMAGENET_DIR, LLAMA_DIR  # noqa: E402
from dlbench.identity import AGGREGATE_DIR, AGGREGATE_RECORDS, AGGREGATE_SUMMARY, AGGREGATE_ENVIRONMENT  # noqa: E402
from dlbench.identity import PUBLISHED_MANIFEST, REPORTS_DIR  # noqa: E402
from dlbench.identity import WILDCARDS as RUN_WILDCARDS  # noqa: E402
from dlbench.study import dataset_of, settings_leaves  # noqa: E402
from dlbench.venvs import MARKER  # noqa: E402
from dlbench.software import ShellWord, Software  # noqa: E402
from dlbench.imports import expand_paths  # noqa: E402
from dlbench import layout  # noqa: E402
from dlbench.harness.spec import command_line  # noqa: E402

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
SETTINGS = STUDY.config
VENV_DIR = Path(SETTINGS["software"]["venv_dir"])
# With --sdm conda, Snakemake activates envs/<framework>.yaml; otherwise the workflow builds it (uv).
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
USE_APPTAINER = DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method
# software.python probed (framework -> dlbench.interpreters.Interpreter), device cuda that sees no GPU (onstart)
INTERPRETERS, NO_GPU_SEEN = session.check_software(
    STUDY, STUDY_FILES, PACKAGE_DIR, USE_APPTAINER, workflow.remote_exec, workflow.subprocess_exec
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
# A timed run's SLURM time limit: its own timeout plus this, so the harness's limit strikes first.
RUNTIME_MARGIN_MINUTES = 5


RUNNERS = SETTINGS["runners"]
TELEMETRY = SETTINGS["telemetry"]
CONTAINERS = SETTINGS["software"]["container"]
# Which Python each command runs dlbench with, and which environment a job waits for.
SOFTWARE = Software(
    package_dir=PACKAGE_DIR,
    envs_dir=ENVS_DIR,
    venv_dir=VENV_DIR,
    core_python=CORE_PYTHON,
    use_conda=USE_CONDA,
    site_python=SETTINGS["software"]["python"],
    containers=CONTAINERS,
    runners=RUNNERS,
    interpreters=INTERPRETERS,
)
env_spec = SOFTWARE.env_spec
run_module = SOFTWARE.run_module  # shell words that run a dlbench module in an environment
STUDY_ENV_MARKERS = SOFTWARE.study_env_markers(STUDY.frameworks())  # their package lists go into the report


def run_env_input(wildcards):
    return SOFTWARE.run_env_input(wildcards.framework)


def run_conda_env(wildcards):
    return SOFTWARE.run_conda_env(wildcards.framework)


def run_container(wildcards):
    """With --sdm apptainer: the framework's image (software.container); none: the run is not in a container."""
    return CONTAINERS.get(wildcards.framework)


def output_dir(wildcards, output):
    """The directory of a rule's first output (a tool's --out), taken from {output} rather than rebuilt."""
    return str(Path(output[0]).parent)


# ---- imported logs (workflow/rules/imports.smk)
IMPORTS = {entry["name"]: entry for entry in SETTINGS["imports"]}
IMPORT_RECORDS = [f"results/imports/{name}.jsonl" for name in IMPORTS]


def import_files(wildcards):
    """The files of one import entry: a changed or added log re-parses that entry."""
    return [str(path) for path in expand_paths(IMPORTS[wildcards.name]["paths"])]


def configuration(wildcards):
    """The configuration of a run (or of a batch-size search: its first configuration at batch_size max)."""
    config_id = config_id_of(wildcards)
    found = STUDY.configurations.get(config_id) or STUDY.searches().get(config_id) or found_configuration(config_id)
    if found is None:
        raise ValueError(f"{config_id} is not a configuration of this study")
    return found


# ---- batch_size: max (workflow/rules/search.smk)
MEMORY_LIMIT_GB = SETTINGS["platform"].get("memory_limit_gb")
SEARCH_PROBES = 12  # a search's SLURM time limit: this many probes, each within the configuration's timeout


def found_size(search):
    """The batch size a finished search found, None when it found none (it says why: oom, error, ...)."""
    result = json.loads(Path(identity.search_path(search)).read_text())
    return result["batch_size"] if result["status"] == "ok" else None


def found_configuration(config_id):
    """A configuration at the size its search found (bs96-...): the one at batch_size max, at that size."""
    try:
        at_max = STUDY.configurations.get(identity.with_batch_size(config_id, identity.MAX))
    except identity.IdentityError:
        return None
    if at_max is None or not Path(identity.search_path(at_max.search_id)).exists():
        return None
    size = found_size(at_max.search_id)
    found = replace(at_max, batch_size=size) if size is not None else None
    return found if found is not None and found.config_id == config_id else None


def search_results(wildcards=None):
    """Every batch-size search of the study (their results go into the report's data)."""
    return [identity.search_path(search) for search in STUDY.searches()]


def aggregated_list():
    """The aggregate's list of what it read, named by the hash of the files the study names before any search (run
    logs, MLPerf logs, searches, imports): another study's aggregate, or one of another set of runs, lacks this
    file, so the aggregate runs again, also where Snakemake's records (.snakemake/) are gone."""
    known = sorted(STUDY.run_logs() + STUDY.mlperf_logs() + search_results() + IMPORT_RECORDS)
    return f"{AGGREGATE_DIR}/inputs-{hashlib.sha256(chr(10).join(known).encode()).hexdigest()[:16]}.txt"


def found_run_logs(wildcards):
    """The runs of each batch_size max configuration at the size its search found, once the search is done (a
    checkpoint); the study's other runs are known from the start (STUDY.run_logs). A search that found none (oom,
    error) adds no run; its result is in the report."""
    logs = []
    for c in STUDY.configurations.values():
        if c.is_max:
            model, framework, topology, variant = c.search_id.split("/")
            checkpoints.batch_search.get(model=model, framework=framework, topology=topology, variant=variant)
            size = found_size(c.search_id)
            if size is not None:
                logs += replace(c, batch_size=size).run_logs()
    return [log for log in dict.fromkeys(logs) if log not in STUDY.run_logs()]  # a size the study lists too


def search_arguments(wildcards):
    """The search's command line: how to probe (the configuration without batch size and steps, on one node),
    its multiple and cap. A changed setting that affects memory changes it and reruns the search."""
    c = replace(configuration(wildcards), topology=wildcards.topology)
    search = {"search_id": c.config_id, "multiple": c.batch_size_multiple}
    if c.max_batch_size:
        search["max_batch_size"] = c.max_batch_size
    return shlex.join(command_line(search | harness_options(c)))


def run_arguments(wildcards):
    """The harness command line of a run; a changed setting changes it and reruns only this run."""
    c = configuration(wildcards)
    if c.is_max:
        raise ValueError(f"{c.config_id}: batch_size max runs at the size its search finds (bs<N>), not as bsmax")
    return shlex.join(command_line(harness_options(c, wildcards.repeat)))


def harness_options(c, repeat=None):
    """The harness options of a configuration, in command-line order (spelled by spec.command_line): a run's,
    or with no repeat its batch-size search's, whose probes choose their own batch size and steps. An option
    whose setting is at its default (no strategy, no memory budget, no telemetry, no runner, throughput) is
    left out, so that a run's command line changes only when a setting of that run does."""
    run = repeat is not None
    options = {"framework": c.framework, "model": c.model, "topology": c.topology}
    if run:
        options["batch_size"] = c.batch_size
    options |= {"precision": c.precision, "compiler": bool(c.compiler)}
    if isinstance(c.compiler, str):
        options["compiler_mode"] = c.compiler
    options["data"] = c.data
    if c.is_bert:
        options |= {"seq_length": c.seq_length, "optimizer": c.optimizer, "grad_clip": c.grad_clip}
    elif c.is_llama:
        options |= {"seq_length": c.seq_length, "activation_checkpointing": c.activation_checkpointing}
    else:
        options["image_size"] = c.image_size
    if dataset_dir(c):
        options["data_dir"] = dataset_dir(c)
    # The strategy changes the memory a rank needs (FSDP shards the model): a search's probes run with it too.
    if c.strategy != "auto":
        options["strategy"] = c.strategy
    if run:
        options["warmup_steps"] = c.warmup_steps
        if c.warmup_steps == "auto":  # the bound matters only to auto warm-up
            options["max_warmup_steps"] = c.max_warmup_steps
        options |= {"measured_steps": c.measured_steps, "repeat": repeat, "config_id": c.config_id}
    options |= {"device": SETTINGS["platform"]["device"], "timeout_s": float(c.timeout_minutes * 60)}
    if MEMORY_LIMIT_GB:  # the CPU memory budget of every rank (platform.memory_limit_gb)
        options["memory_limit_gb"] = float(MEMORY_LIMIT_GB)
    if run and TELEMETRY["enabled"]:
        options["telemetry_ms"] = TELEMETRY["interval_ms"]
    if c.framework in RUNNERS:  # a runner's definition, for the harness to run instead of a framework's ranks
        options["runner"] = json.dumps(RUNNERS[c.framework], sort_keys=True)
    if run and c.quality:
        # time to quality: each run its own fixed seed (MLPerf's runs differ in seed; the olympic mean needs spread)
        options |= {"quality": c.quality, "seed": int(repeat) - 1}
    return options


def dataset_dir(c):
    """Where the prepared data of a `data: real` configuration lives (workflow/rules/data.smk)."""
    name = dataset_of(c)
    return identity.dataset_dir(name, c.seq_length) if name else None


def dataset_ready(wildcards):
    """A real-data run waits for its dataset to be prepared and verified."""
    directory = dataset_dir(configuration(wildcards))
    return [f"{directory}/verified.txt"] if directory else []


def max_attempts(wildcards):
    """Tries Snakemake makes of a failing run (--retries, e.g. in profiles/slurm); the harness
    writes the failure record on the last one."""
    settings = workflow.execution_settings  # None while parsing and in dry runs
    return retries.max_attempts(workflow.remote_exec, settings.retries if settings else None)


def gpu_gres(c):
    """GPUs per node for a CUDA run's SLURM job: one per device (gres is per node)."""
    if SETTINGS["platform"]["device"] != "cuda":
        return ""
    model = SETTINGS["platform"].get("gpu_model")
    return f"gpu:{model}:{c.devices_per_node}" if model else f"gpu:{c.devices_per_node}"


# ---- onstart, onsuccess, onerror (Snakefile)
def refuse_cuda_without_a_gpu():
    session.refuse_cuda_without_a_gpu(NO_GPU_SEEN, workflow.local_exec)


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


# ---- prepared datasets (workflow/rules/data.smk)
DATASETS = SETTINGS["datasets"]
IMAGENET = DATASETS["imagenet"]
BERT_DATA = DATASETS["bert"]


def dataprep_env(wildcards):
    return [] if USE_CONDA else SOFTWARE.env_marker("dataprep")


def sample_imagenet_options():
    """The sample's options beyond the counts, only where not default (so existing data is not remade)."""
    sample = IMAGENET["sample"]
    options = " --photo-per-class" if sample["photo_per_class"] else ""
    if list(sample["long_side"]) != [480, 640]:
        options += " --long-side {} {}".format(*sample["long_side"])
    return options


def imagenet_raw_inputs():
    """The converter's input arguments: the sample tree, or the user's raw ImageNet."""
    if IMAGENET["source"] == "sample":
        tree = "resources/sample/imagenet"
        return {
            "train_dir": f"{tree}/train",
            "validation_dir": f"{tree}/validation",
            "validation_labels": f"{tree}/validation_labels.txt",
            "synsets": f"{tree}/synsets.txt",
            "metadata": f"{tree}/metadata.txt",
            "bounding_boxes": f"{tree}/bounding_boxes.csv",
        }
    keys = ("train_dir", "validation_dir", "validation_labels", "synsets", "metadata", "bounding_boxes")
    return {k: IMAGENET[k] for k in keys if k in IMAGENET}


def imagenet_arguments(wildcards, input):
    raw = imagenet_raw_inputs()
    args = [f"--{key.replace('_', '-')} {shlex.quote(str(path))}" for key, path in raw.items()]
    args += [
        f"--train-shards {IMAGENET['train_shards']}",
        f"--validation-shards {IMAGENET['validation_shards']}",
        f"--seed {DATASETS['seed']}",
    ]
    if IMAGENET["recordio"]:
        args.append("--recordio")
    return " ".join(args)


from dlbench.harness.spec import default_max_predictions  # noqa: E402
from dlbench.sample_wheels import VOCAB_IN_WHEEL, WIKI_IN_WHEEL  # noqa: E402

BERT_SAMPLE_VOCAB = VOCAB_IN_WHEEL[1]
BERT_SAMPLE_WIKI = WIKI_IN_WHEEL[1]


def bert_inputs():
    """The corpus files: gensim's Wikipedia excerpt (sample) or the user's text files and dumps."""
    if BERT_DATA["source"] == "sample":
        return [f"resources/sample/bert/{Path(BERT_SAMPLE_WIKI).name}"]
    return list(BERT_DATA["inputs"])


def _is_dump(path):
    return any(str(path).endswith(ext) for ext in (".xml.bz2", ".xml.gz", ".xml", ".bz2"))


def bert_dumps():
    """Wikipedia dumps among the inputs, by the name of their text file (results/data/bert/text/<name>.txt)."""
    return {Path(p).name.split(".")[0]: p for p in bert_inputs() if _is_dump(p)}


def bert_text_files(wildcards=None):
    """Text the shards are made of: plain text inputs as they are, dumps converted by `wikipedia_text`."""
    names = {p: n for n, p in bert_dumps().items()}
    return [BERT_TEXT_PATTERN.format(name=names[p]) if p in names else p for p in bert_inputs()]


def bert_vocab(wildcards=None):
    if "vocab" in BERT_DATA:
        return BERT_DATA["vocab"]
    return f"resources/sample/bert/{Path(BERT_SAMPLE_VOCAB).name}"


def bert_shard_arguments(wildcards):
    seq = int(wildcards.seq)
    args = [
        f"--max-seq-length {seq} --max-predictions {default_max_predictions(seq)}",
        f"--dupe-factor {BERT_DATA['dupe_factor']} --seed {DATASETS['seed']} --shards {BERT_DATA['shards']}",
        "--do-lower-case" if BERT_DATA["lower_case"] else "--no-do-lower-case",
    ]
    if BERT_DATA["whole_word_mask"]:
        args.append("--whole-word-mask")
    # the streaming settings, only when set: the shell command (and so the shards) of other studies unchanged
    args += [
        f"--{key.replace('_', '-')} {BERT_DATA[key]}"
        for key in ("random_doc_block", "shuffle_buffer")
        if key in BERT_DATA
    ]
    return " ".join(args)


def bert_group_manifests(seq):
    groups = min(BERT_DATA["jobs"], BERT_DATA["shards"])
    return [f"{BERT_DIR_PATTERN.format(seq=seq)}/{layout.group_manifest(g, groups)}" for g in range(groups)]
