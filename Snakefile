# dlbench: training-throughput benchmarks of deep-learning frameworks, as one Snakemake DAG.
#   snakemake --cores all                   run the study in config.yaml on this machine
#   snakemake -n                            show what would run
#   snakemake --profile slurm --cores all   run it on a SLURM cluster
from snakemake.utils import min_version

min_version("9.0")


include: "workflow/rules/configfile.smk"


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/envs.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/benchmark.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/imports.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        REPORT_MANIFEST,


onstart:
    refuse_cuda_without_a_gpu()
    refuse_to_republish_a_fixed_version()


onsuccess:
    print_problems()
    print_report_location()


onerror:
    print_problems()
