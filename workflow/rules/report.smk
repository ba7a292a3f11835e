# Parse every run log into one record, aggregate the repeats, publish a versioned report.
from types import SimpleNamespace


rule aggregate:
    input:
        logs=STUDY.run_logs(),
        mlperf=STUDY.mlperf_logs(),  # time to quality: MLPerf's format of those runs (rule mlperf_log)
        found=found_run_logs,
        searches=SEARCH_RESULTS,
        imports=IMPORT_RECORDS,
        envs=STUDY_ENV_MARKERS,
        cpu_peaks=CPU_PEAKS,
        sweep=[SWEEP_NODES] if STUDY.sweep_nodes else [],
    output:
        records=AGGREGATE_RECORDS,
        summary=AGGREGATE_SUMMARY,
        environment=AGGREGATE_ENVIRONMENT,
        inputs=AGGREGATED_LIST,
    log:
        "logs/aggregate.log",
    localrule: True
    conda:
        "../../envs/core.yaml"
    params:
        # Snakemake tracks each (path, value) leaf of the settings, so a dry run's reason names the leaves that
        # changed; the settings themselves reach the script in a SimpleNamespace, a type Snakemake does not record.
        *settings_leaves(SETTINGS),
        study=SimpleNamespace(settings=SETTINGS),
    script:
        "../scripts/aggregate.py"


# A sweep's nodes and their SLURM states when the study was planned (dlbench.plan.sweep): written again only
# when they change (a parameter), so the aggregate runs again when a node goes down or comes back.
rule sweep_nodes:
    output:
        SWEEP_NODES,
    log:
        "logs/sweep_nodes.log",
    localrule: True
    params:
        states=lambda wildcards: SWEEP_STATES or "{}",
    run:
        Path(output[0]).write_text(f"{params.states}\n")


rule report:
    input:
        records=rules.aggregate.output.records,
        summary=rules.aggregate.output.summary,
        environment=rules.aggregate.output.environment,
    # What is published (results/reports/<version>/, `latest`, latest.json) is no rule's output: Snakemake
    # deletes the outputs of a failed job, and the published state must survive that. The outputs are a copy
    # of the version these results were published as (for `snakemake --report`) and a manifest naming it.
    output:
        index=report("results/report/index.html", caption="../report/index.rst", category="Report"),
        throughput=report("results/report/throughput.png", caption="../report/throughput.rst", category="Report"),
        speedup=report("results/report/speedup.png", caption="../report/speedup.rst", category="Report"),
        summary=report("results/report/summary.csv", caption="../report/summary.rst", category="Report"),
        manifest=PUBLISHED_MANIFEST,
    log:
        "logs/report.log",
    localrule: True
    conda:
        "../../envs/core.yaml"
    params:
        version=SETTINGS["report"]["version"],
        reports_dir=REPORTS_DIR,
        compare_to=SETTINGS["report"].get("compare_to"),
    script:
        "../scripts/report.py"


# The study's expectations, judged again from the published version after every report (dlbench.judge):
# the output is written only when all passed, so a rerun with nothing else to do judges again and fails again.
rule expectations:
    input:
        manifest=PUBLISHED_MANIFEST,
    output:
        EXPECTATIONS_PASSED,
    log:
        "logs/expectations.log",
    # A verdict is not a fault to try again (the SLURM profile's retries): judged once, said once.
    retries: 0
    localrule: True
    conda:
        "../../envs/core.yaml"
    params:
        run=run_module("core", "dlbench.judge"),
        report=lambda wildcards, input: str(Path(input.manifest).parent),
    shell:
        "{params.run} --gate {output} {params.report} 2>&1 | tee {log} >&2"
