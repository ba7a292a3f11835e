# dlbench: training-throughput benchmarks of deep-learning frameworks, as one Snakemake DAG.
#   snakemake --cores all                   run the study in config.yaml on this machine
#   snakemake -n                            show what would run
#   snakemake --profile slurm --cores all   run it on a SLURM cluster
from snakemake.utils import min_version

min_version("9.0")


include: "workflow/rules/configfile.smk"


from dlbench.harness import nospace  # (configfile.smk puts workflow/ on the path)

# On a full disk Snakemake cannot write its own log (.snakemake/log/): no traceback for each line it drops.
nospace.quiet_logging()


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/envs.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/benchmark.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/imports.smk"
include: "workflow/rules/report.smk"


# The study is done when every run, search and import it names exists and its aggregate read them, not only when a
# report is there: Snakemake makes a missing file only for a job that must run, so a report present already
# (another study's, or copied without .snakemake/) would otherwise leave this study undone ("Nothing to be done").
rule all:
    default_target: True
    input:
        PUBLISHED_MANIFEST,
        EXPECTATIONS_PASSED if SETTINGS["expectations"] else [],  # the gate (rule expectations)
        rules.aggregate.output.inputs,
        rules.aggregate.input.logs,
        rules.aggregate.input.mlperf,
        rules.aggregate.input.searches,
        rules.aggregate.input.imports,
        found_run_logs,


onstart:
    refuse_cuda_without_a_gpu()
    refuse_what_needs_slurm()
    refuse_to_republish_a_fixed_version()


onsuccess:
    print_problems()
    print_report_location()


onerror:
    print_problems()
    print_report_location()  # a failed expectation (rule expectations) leaves the report published
